//go:build integration

package standalone

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// oneShot is a pod whose container runs a shell script once.
func oneShot(name string, policy v1.RestartPolicy, script string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  restartPolicy: %s
  terminationGracePeriodSeconds: 5
  containers:
  - name: main
    image: %s
    command: ["sh", "-c", %q]
`, name, policy, testbed.BusyboxImage, script)
}

func mainStatus(p *v1.Pod) v1.ContainerStatus {
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == "main" {
			return c
		}
	}
	return v1.ContainerStatus{}
}

// Every restart policy with a container exiting 0 and exiting 1.
func TestRestartPolicies(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	type want struct {
		restarts bool
		phase    v1.PodPhase // final phase, for pods that do not restart
	}
	cases := map[string]struct {
		policy v1.RestartPolicy
		exit   int
		want   want
	}{
		"always-0":    {v1.RestartPolicyAlways, 0, want{restarts: true}},
		"always-1":    {v1.RestartPolicyAlways, 1, want{restarts: true}},
		"onfailure-0": {v1.RestartPolicyOnFailure, 0, want{phase: v1.PodSucceeded}},
		"onfailure-1": {v1.RestartPolicyOnFailure, 1, want{restarts: true}},
		"never-0":     {v1.RestartPolicyNever, 0, want{phase: v1.PodSucceeded}},
		"never-1":     {v1.RestartPolicyNever, 1, want{phase: v1.PodFailed}},
	}
	for name, c := range cases {
		n.WriteManifest(name+".yaml", oneShot(name, c.policy, fmt.Sprintf("exit %d", c.exit)))
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if c.want.restarts {
				p := n.WaitPod(t, name, podTimeout, func(p *v1.Pod) (bool, string) {
					return mainStatus(p).RestartCount >= 1, fmt.Sprintf("restart count %d", mainStatus(p).RestartCount)
				})
				if p.Status.Phase != v1.PodRunning {
					t.Errorf("restarting pod is %s, want Running", p.Status.Phase)
				}
				return
			}
			p := n.WaitPod(t, name, podTimeout, func(p *v1.Pod) (bool, string) {
				return p.Status.Phase == c.want.phase, fmt.Sprintf("phase %s", p.Status.Phase)
			})
			cs := mainStatus(p)
			if cs.RestartCount != 0 || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != int32(c.exit) {
				t.Fatalf("container status %+v", cs)
			}
			// Its worker is done: the sandbox is stopped and no second
			// instance of the container was ever created.
			testbed.Eventually(t, podTimeout, func() (bool, string) {
				sbs := n.RuntimeSandboxes(name)
				return len(sbs) == 1 && sbs[0].State == runtimeapi.PodSandboxState_SANDBOX_NOTREADY, "sandbox still ready"
			})
			if cs := n.RuntimeContainers(name); len(cs) != 1 {
				t.Fatalf("%d container instances, want 1", len(cs))
			}
		})
	}
}

func initPod(name string, policy v1.RestartPolicy) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  restartPolicy: %s
  terminationGracePeriodSeconds: 5
  initContainers:
  - name: init
    image: %[3]s
    command: ["sh", "-c", "exit 3"]
  containers:
  - name: main
    image: %[3]s
    command: ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
`, name, policy, testbed.BusyboxImage)
}

// A failing init container is retried under Always and OnFailure and
// fails the pod under Never; the app container never starts.
func TestFailingInitContainer(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	for _, policy := range []v1.RestartPolicy{v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever} {
		n.WriteManifest(strings.ToLower(string(policy))+".yaml", initPod(strings.ToLower(string(policy)), policy))
	}
	for _, policy := range []v1.RestartPolicy{v1.RestartPolicyAlways, v1.RestartPolicyOnFailure} {
		name := strings.ToLower(string(policy))
		p := n.WaitPod(t, name, podTimeout, func(p *v1.Pod) (bool, string) {
			return len(p.Status.InitContainerStatuses) == 1 && p.Status.InitContainerStatuses[0].RestartCount >= 1, "init container not restarted"
		})
		if p.Status.Phase != v1.PodPending || mainStatus(p).State.Waiting == nil || mainStatus(p).State.Waiting.Reason != "PodInitializing" {
			t.Errorf("%s: phase %s, app %+v", name, p.Status.Phase, mainStatus(p).State)
		}
	}
	p := n.WaitPod(t, "never", podTimeout, func(p *v1.Pod) (bool, string) {
		return p.Status.Phase == v1.PodFailed, fmt.Sprintf("phase %s", p.Status.Phase)
	})
	if ic := p.Status.InitContainerStatuses[0]; ic.RestartCount != 0 || ic.State.Terminated == nil || ic.State.Terminated.ExitCode != 3 {
		t.Errorf("init container %+v", ic)
	}
	for _, name := range []string{"always", "onfailure", "never"} {
		for _, c := range n.RuntimeContainers(name) {
			if c.GetMetadata().GetName() == "main" {
				t.Errorf("%s: the app container was created although initialisation failed", name)
			}
		}
	}
}

// Sidecars start in order before later init containers and keep running
// beside the app containers.
func TestSidecarOrdering(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	shared := filepath.Join(t.TempDir(), "shared")
	n.WriteManifest("side.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: side
spec:
  terminationGracePeriodSeconds: 5
  initContainers:
  - name: proxy
    image: %[1]s
    restartPolicy: Always
    command: ["sh", "-c", "trap 'exit 0' TERM; touch /shared/proxy-up; sleep 3600 & wait"]
    volumeMounts: [{name: shared, mountPath: /shared}]
  - name: setup
    image: %[1]s
    command: ["sh", "-c", "test -e /shared/proxy-up && touch /shared/setup-done"]
    volumeMounts: [{name: shared, mountPath: /shared}]
  containers:
  - name: main
    image: %[1]s
    command: ["sh", "-c", "trap 'exit 0' TERM; test -e /shared/setup-done || exit 1; sleep 3600 & wait"]
    volumeMounts: [{name: shared, mountPath: /shared}]
  volumes:
  - name: shared
    hostPath: {path: %[2]s, type: DirectoryOrCreate}
`, testbed.BusyboxImage, shared))
	main := waitRunning(t, n, "side", "main")
	proxy := n.RunningContainer("side", "proxy")
	if proxy == nil {
		t.Fatal("the sidecar does not run beside the app")
	}
	var setup *runtimeapi.Container
	for _, c := range n.RuntimeContainers("side") {
		if c.GetMetadata().GetName() == "setup" {
			setup = c
		}
	}
	ps, ss, ms := containerStatus(t, n, proxy.Id), containerStatus(t, n, setup.Id), containerStatus(t, n, main.Id)
	if ss.ExitCode != 0 || !(ps.StartedAt < ss.StartedAt && ss.FinishedAt <= ms.StartedAt) {
		t.Fatalf("order: proxy started %d, setup started %d finished %d (exit %d), main started %d",
			ps.StartedAt, ss.StartedAt, ss.FinishedAt, ss.ExitCode, ms.StartedAt)
	}
	if mainStatus(mustPod(t, n, "side")).RestartCount != 0 {
		t.Fatal("the app container had to restart")
	}
}

func mustPod(t *testing.T, n *testbed.Nodelet, name string) *v1.Pod {
	t.Helper()
	p, err := n.Pod(name)
	if err != nil || p == nil {
		t.Fatalf("pod %s: %v", name, err)
	}
	return p
}

// postStart runs once the container started; preStop runs before it is
// stopped. Both leave a mark in a hostPath.
func TestLifecycleHooks(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	marks := filepath.Join(t.TempDir(), "marks")
	n.WriteManifest("hooks.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: hooks
spec:
  terminationGracePeriodSeconds: 10
  containers:
  - name: main
    image: %[1]s
    command: ["sh", "-c", "trap 'echo term >> /marks/log; exit 0' TERM; echo started >> /marks/log; sleep 3600 & wait"]
    lifecycle:
      postStart:
        exec: {command: ["sh", "-c", "echo poststart >> /marks/log"]}
      preStop:
        exec: {command: ["sh", "-c", "echo prestop >> /marks/log"]}
    volumeMounts: [{name: marks, mountPath: /marks}]
  volumes:
  - name: marks
    hostPath: {path: %[2]s, type: DirectoryOrCreate}
`, testbed.BusyboxImage, marks))
	waitRunning(t, n, "hooks", "main")
	// The hook is a runtime exec: seconds on a loaded node.
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		b, _ := os.ReadFile(filepath.Join(marks, "log"))
		return strings.Contains(string(b), "poststart"), fmt.Sprintf("log %q", b)
	})
	n.RemoveManifest("hooks.yaml")
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		b, _ := os.ReadFile(filepath.Join(marks, "log"))
		return strings.Contains(string(b), "term"), fmt.Sprintf("log %q", b)
	})
	b, _ := os.ReadFile(filepath.Join(marks, "log"))
	lines := strings.Fields(string(b))
	pre, term := index(lines, "prestop"), index(lines, "term")
	if pre < 0 || pre > term {
		t.Fatalf("preStop did not run before SIGTERM: %v", lines)
	}
}

func index(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// A failing postStart hook kills the container with FailedPostStartHook.
func TestFailingPostStartHook(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	n.WriteManifest("badhook.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: badhook
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: %s
    command: ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
    lifecycle:
      postStart:
        exec: {command: ["sh", "-c", "exit 7"]}
`, testbed.BusyboxImage))
	n.WaitPod(t, "badhook", podTimeout, func(p *v1.Pod) (bool, string) {
		return mainStatus(p).RestartCount >= 1, fmt.Sprintf("restarts %d", mainStatus(p).RestartCount)
	})
	log := n.Log()
	if !strings.Contains(log, `reason="FailedPostStartHook"`) || !strings.Contains(log, "exited with 7") {
		t.Fatal("no FailedPostStartHook event with the hook's exit status in the log")
	}
}

// A manifest moved out and back while its pod terminates (same content,
// so the same UID): the pod runs again, and its status follows, instead
// of keeping the finished one until nodelet restarts.
func TestManifestPutBackWhileItsPodTerminates(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: again
spec:
  terminationGracePeriodSeconds: 4
  containers:
  - name: main
    image: %s
    command: ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"]
`, testbed.BusyboxImage)
	n.WriteManifest("again.yaml", manifest)
	first := waitRunning(t, n, "again", "main")
	uid := n.WaitPod(t, "again", podTimeout, func(p *v1.Pod) (bool, string) { return true, "" }).UID
	n.RemoveManifest("again.yaml")
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		p, err := n.Pod("again")
		return err == nil && p == nil, "still desired"
	})
	// Its container is being stopped (it ignores SIGTERM for 4 s).
	if c := n.RunningContainer("again", "main"); c == nil || c.Id != first.Id {
		t.Fatal("the first container stopped before the manifest was put back: nothing was terminating")
	}
	n.WriteManifest("again.yaml", manifest)
	p := n.WaitPod(t, "again", 60*time.Second, func(p *v1.Pod) (bool, string) {
		cs := mainStatus(p)
		c := n.RunningContainer("again", "main")
		return p.Status.Phase == v1.PodRunning && cs.State.Running != nil && cs.Ready && c != nil && c.Id != first.Id &&
				strings.HasSuffix(cs.ContainerID, c.Id),
			fmt.Sprintf("phase %s, main %+v, running %v", p.Status.Phase, cs.State, c)
	})
	if p.UID != uid {
		t.Fatalf("UID %s, then %s: the test needs the same UID", uid, p.UID)
	}
}

// A process that ignores SIGTERM is killed when its grace period ends,
// and not before.
func TestGracePeriodIsHonoured(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	n.WriteManifest("stubborn.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: stubborn
spec:
  terminationGracePeriodSeconds: 3
  containers:
  - name: main
    image: %s
    command: ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"]
`, testbed.BusyboxImage))
	c := waitRunning(t, n, "stubborn", "main")
	removed := time.Now()
	n.RemoveManifest("stubborn.yaml")
	var st *runtimeapi.ContainerStatus
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		r, err := cd.Runtime.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
		if err != nil {
			return false, fmt.Sprintf("container gone before its exit was seen: %v", err)
		}
		st = r.Status
		return st.State == runtimeapi.ContainerState_CONTAINER_EXITED, "still running"
	})
	lived := time.Unix(0, st.FinishedAt).Sub(removed)
	if st.ExitCode != 137 || lived < 3*time.Second || lived > 5*time.Second {
		t.Fatalf("exit %d after %v: want SIGKILL (137) 3 s after the deletion", st.ExitCode, lived)
	}
}

// The termination message comes from the file, or from the log tail with
// FallbackToLogsOnError.
func TestTerminationMessage(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	n.WriteManifest("msgfile.yaml", oneShot("msgfile", v1.RestartPolicyNever, "echo -n 'goodbye from the file' > /dev/termination-log; exit 2"))
	n.WriteManifest("msglog.yaml", strings.Replace(
		oneShot("msglog", v1.RestartPolicyNever, "echo 'first line'; echo 'last words'; exit 3"),
		"    command:", "    terminationMessagePolicy: FallbackToLogsOnError\n    command:", 1))
	// The last output without a newline is a partial line in the log.
	n.WriteManifest("msgpartial.yaml", strings.Replace(
		oneShot("msgpartial", v1.RestartPolicyNever, "/bin/echo -n DONE; /bin/false"),
		"    command:", "    terminationMessagePolicy: FallbackToLogsOnError\n    command:", 1))
	for name, want := range map[string]string{"msgfile": "goodbye from the file", "msglog": "first line\nlast words\n", "msgpartial": "DONE"} {
		p := n.WaitPod(t, name, podTimeout, func(p *v1.Pod) (bool, string) {
			return p.Status.Phase == v1.PodFailed, fmt.Sprintf("phase %s", p.Status.Phase)
		})
		term := mainStatus(p).State.Terminated
		if term == nil || term.Message != want {
			t.Errorf("%s: termination %+v, want message %q", name, term, want)
		}
	}
}

// A crash-looping container backs off: restarted at once, then after
// 10 s, then after 20 s, reporting CrashLoopBackOff while it waits.
func TestCrashLoopBackOffGrows(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	n.WriteManifest("crash.yaml", oneShot("crash", v1.RestartPolicyAlways, "exit 1"))
	restartedAt := map[int32]time.Time{}
	sawBackOff := false
	n.WaitPod(t, "crash", 90*time.Second, func(p *v1.Pod) (bool, string) {
		cs := mainStatus(p)
		if _, ok := restartedAt[cs.RestartCount]; !ok {
			restartedAt[cs.RestartCount] = time.Now()
		}
		if w := cs.State.Waiting; w != nil && w.Reason == "CrashLoopBackOff" {
			sawBackOff = true
		}
		return cs.RestartCount >= 3, fmt.Sprintf("restart count %d", cs.RestartCount)
	})
	if !sawBackOff {
		t.Error("CrashLoopBackOff was never reported")
	}
	first, second := restartedAt[2].Sub(restartedAt[1]), restartedAt[3].Sub(restartedAt[2])
	t.Logf("restart gaps: %v, %v", first, second)
	if first < 9*time.Second || second < 19*time.Second || second <= first {
		t.Fatalf("restart gaps %v then %v: want about 10 s then 20 s", first, second)
	}
	// Restarts come when the back-off ends (jittered by up to half, as
	// upstream requeues), not at the next resync, a minute on.
	if second > 33*time.Second {
		t.Fatalf("second back-off took %v: the pod waited for a resync", second)
	}
}

// nth is the index of the n-th (from 1) occurrence of v in s, or -1.
func nth(s []string, v string, n int) int {
	for i, x := range s {
		if x == v {
			if n--; n == 0 {
				return i
			}
		}
	}
	return -1
}

// A sidecar in crash-loop back-off does not hold back the app: the app,
// crashing while the sidecar backs off, is restarted before the sidecar.
func TestSidecarBackOffDoesNotBlockTheApp(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	marks := t.TempDir()
	// The sidecar crashes a second after each start: its second crash
	// puts it in a 10 s back-off. The app crashes once, 3 s after the
	// sidecar's second start, then runs.
	n.WriteManifest("sideloop.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: sideloop
spec:
  terminationGracePeriodSeconds: 2
  initContainers:
  - name: proxy
    image: %[1]s
    restartPolicy: Always
    command: ["sh", "-c", "echo side >> /marks/log; sleep 1; exit 1"]
    volumeMounts: [{name: marks, mountPath: /marks}]
  containers:
  - name: main
    image: %[1]s
    command: ["sh", "-c", "echo app >> /marks/log; test -e /marks/crashed && exec sleep 3600; until [ $(grep -c side /marks/log) -ge 2 ]; do sleep 0.2; done; sleep 3; touch /marks/crashed; exit 1"]
    volumeMounts: [{name: marks, mountPath: /marks}]
  volumes:
  - name: marks
    hostPath: {path: %[2]s, type: DirectoryOrCreate}
`, testbed.BusyboxImage, marks))
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		l := testbed.MarksLog(marks)
		return nth(l, "app", 2) >= 0 && nth(l, "side", 3) >= 0, fmt.Sprintf("log %v", l)
	})
	l := testbed.MarksLog(marks)
	if nth(l, "app", 2) > nth(l, "side", 3) {
		t.Fatalf("the app was restarted only after the sidecar's back-off: %v", l)
	}
}

// A stopping pod stops its app containers first, then its sidecars, the
// last declared first, as upstream's; every preStop hook runs at once,
// the sidecars' too, while the app is still running (upstream's node
// e2e: "should call sidecar container PreStop hook simultaneously"). The
// app's SIGTERM handler waits for both sidecars' hooks: had they waited
// for the app, it would never write its mark.
func TestSidecarsStopAfterTheApp(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	marks := t.TempDir()
	sidecar := func(name string) string {
		return fmt.Sprintf(`  - name: %[1]s
    image: %[2]s
    restartPolicy: Always
    command: ["sh", "-c", "trap 'echo %[1]s-term >> /marks/log; exit 0' TERM; sleep 3600 & wait"]
    lifecycle:
      preStop:
        exec: {command: ["sh", "-c", "echo %[1]s-prestop >> /marks/log"]}
    volumeMounts: [{name: marks, mountPath: /marks}]
`, name, testbed.BusyboxImage)
	}
	n.WriteManifest("ordered.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: ordered
spec:
  terminationGracePeriodSeconds: 20
  initContainers:
%[3]s%[4]s  containers:
  - name: main
    image: %[1]s
    command: ["sh", "-c", "trap 'until grep -q first-prestop /marks/log && grep -q second-prestop /marks/log; do sleep 0.1; done; echo main-term >> /marks/log; exit 0' TERM; sleep 3600 & wait"]
    volumeMounts: [{name: marks, mountPath: /marks}]
  volumes:
  - name: marks
    hostPath: {path: %[2]s, type: DirectoryOrCreate}
`, testbed.BusyboxImage, marks, sidecar("first"), sidecar("second")))
	waitRunning(t, n, "ordered", "main")
	n.RemoveManifest("ordered.yaml")
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		l := testbed.MarksLog(marks)
		return len(l) >= 5, fmt.Sprintf("log %v", l)
	})
	l := testbed.MarksLog(marks)
	var terms []string
	for _, m := range l {
		if strings.HasSuffix(m, "-term") {
			terms = append(terms, m)
		}
	}
	if want := "main-term second-term first-term"; strings.Join(terms, " ") != want {
		t.Fatalf("stopped in the order %v, want %s", l, want)
	}
	if slices.Index(l, "main-term") < 2 {
		t.Fatalf("log %v: want both sidecars' preStop hooks before the app's end", l)
	}
}

// An init container nodelet created but never started (it died in
// between) is started when nodelet comes back, even under
// restartPolicy Never: it did not fail.
func TestInitContainerLeftCreatedIsStarted(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	n.Failpoint("container-created", "kill")
	n.WriteManifest("created.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: created
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 2
  initContainers:
  - name: setup
    image: %[1]s
    command: ["true"]
  containers:
  - name: main
    image: %[1]s
    command: ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
`, testbed.BusyboxImage))
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		return n.Exited(), "nodelet did not stop at the failpoint"
	})
	cs := n.RuntimeContainers("created")
	if len(cs) != 1 || cs[0].State != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Fatalf("containers %v, want the init container left created", cs)
	}
	n.ClearFailpoint("container-created")
	n.Start()
	waitRunning(t, n, "created", "main")
	p := n.WaitPod(t, "created", podTimeout, func(p *v1.Pod) (bool, string) {
		return p.Status.Phase == v1.PodRunning, fmt.Sprintf("phase %s", p.Status.Phase)
	})
	if s := p.Status.InitContainerStatuses; len(s) != 1 || s[0].State.Terminated == nil || s[0].State.Terminated.ExitCode != 0 {
		t.Fatalf("init container status %+v", s)
	}
}

// A container's log is linked in /var/log/containers under upstream's
// name, <pod>_<namespace>_<container>-<container ID>.log, where log
// shippers and upstream's "ContainerLogPath should print log to correct
// log path" [NodeConformance] spec read it; the link goes when the
// container is removed.
func TestLegacyContainerLogLink(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	n.WriteManifest("logpath.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: logpath
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: %s, command: ["sh", "-c", "echo logs-from-main"]}
`, testbed.BusyboxImage))
	p := n.WaitPod(t, "logpath", podTimeout, func(p *v1.Pod) (bool, string) {
		return p.Status.Phase == v1.PodSucceeded, fmt.Sprintf("phase %s", p.Status.Phase)
	})
	id := strings.TrimPrefix(mainStatus(p).ContainerID, "containerd://")
	link := filepath.Join("/var/log/containers", fmt.Sprintf("%s_%s_main-%s.log", p.Name, p.Namespace, id))
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		b, err := os.ReadFile(link)
		return err == nil && strings.Contains(string(b), "logs-from-main"), fmt.Sprintf("%s: %q %v", link, b, err)
	})
	n.RemoveManifest("logpath.yaml")
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		_, err := os.Lstat(link)
		return os.IsNotExist(err), fmt.Sprintf("%s still there (%v)", link, err)
	})
}
