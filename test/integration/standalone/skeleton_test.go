//go:build integration

package standalone

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/testbed"
	"github.com/nodelet/nodelet/internal/testutil"
)

const podTimeout = 60 * time.Second

// sleeper is a pod whose container runs until told to stop and stops at
// once on SIGTERM (a shell as PID 1 would otherwise ignore it).
func sleeper(name, marker string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 10
  containers:
  - name: main
    image: %s
    command: ["sh", "-c", "trap 'exit 0' TERM; echo %s; sleep 3600 & wait"]
`, name, testbed.BusyboxImage, marker)
}

// waitRunning waits until the runtime runs the container and /pods
// reports the pod Running with an IP and the container running.
func waitRunning(t *testing.T, n *testbed.Nodelet, pod, cname string) *runtimeapi.Container {
	t.Helper()
	var c *runtimeapi.Container
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		c = n.RunningContainer(pod, cname)
		if c == nil {
			return false, "no running container in the runtime"
		}
		p, err := n.Pod(pod)
		if err != nil || p == nil {
			return false, fmt.Sprintf("pod not in /pods: %v", err)
		}
		if p.Status.Phase != v1.PodRunning || p.Status.PodIP == "" {
			return false, fmt.Sprintf("pod phase %q ip %q", p.Status.Phase, p.Status.PodIP)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == cname && cs.State.Running != nil && strings.HasSuffix(cs.ContainerID, c.Id) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("container status not running: %+v", p.Status.ContainerStatuses)
	})
	return c
}

func TestManifestRunsContainer(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	n.WriteManifest("web.yaml", sleeper("web", "hello"))
	c := waitRunning(t, n, "web", "main")

	if got := c.Labels["io.kubernetes.pod.namespace"]; got != "default" {
		t.Errorf("namespace label = %q, want default", got)
	}
	if got := c.Labels["io.kubernetes.container.name"]; got != "main" {
		t.Errorf("container name label = %q", got)
	}
	p, _ := n.Pod("web")
	if p.Annotations["kubernetes.io/config.source"] != "file" || p.Annotations["kubernetes.io/config.hash"] != string(p.UID) {
		t.Errorf("static pod annotations = %v", p.Annotations)
	}
	for _, want := range []v1.PodConditionType{v1.PodReady, v1.ContainersReady, v1.PodInitialized, v1.PodScheduled, v1.PodReadyToStartContainers} {
		if !hasCondition(p, want, v1.ConditionTrue) {
			t.Errorf("condition %s not True: %+v", want, p.Status.Conditions)
		}
	}
	if p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("restart count %d", p.Status.ContainerStatuses[0].RestartCount)
	}
}

func hasCondition(p *v1.Pod, t v1.PodConditionType, s v1.ConditionStatus) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status == s
		}
	}
	return false
}

func TestChangedCommandReplacesContainer(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	n.WriteManifest("app.yaml", sleeper("app", "first"))
	old := waitRunning(t, n, "app", "main")
	if out, err := n.Exec(old.Id, "cat", "/proc/1/cmdline"); err != nil || !strings.Contains(out, "first") {
		t.Fatalf("first container runs %q (%v)", out, err)
	}

	n.WriteManifest("app.yaml", sleeper("app", "second"))
	var cur *runtimeapi.Container
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		cur = n.RunningContainer("app", "main")
		if cur == nil || cur.Id == old.Id {
			return false, "no new container yet"
		}
		return true, ""
	})
	if out, err := n.Exec(cur.Id, "cat", "/proc/1/cmdline"); err != nil || !strings.Contains(out, "second") {
		t.Fatalf("new container runs %q (%v)", out, err)
	}
	for _, c := range n.RuntimeContainers("app") {
		if c.Id == old.Id && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("old container %s still running", old.Id)
		}
	}
	waitRunning(t, n, "app", "main")
}

func TestDeletedManifestRemovesPod(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	n.WriteManifest("gone.yaml", sleeper("gone", "x"))
	waitRunning(t, n, "gone", "main")
	n.RemoveManifest("gone.yaml")
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		cs, sbs := n.RuntimeContainers("gone"), n.RuntimeSandboxes("gone")
		return len(cs)+len(sbs) == 0, fmt.Sprintf("%d containers and %d sandboxes left", len(cs), len(sbs))
	})
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		p, err := n.Pod("gone")
		return err == nil && p == nil, "pod still in /pods"
	})
}

func TestTwoPods(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	n.WriteManifest("a.yaml", sleeper("a", "a"))
	n.WriteManifest("b.yaml", sleeper("b", "b"))
	ca := waitRunning(t, n, "a", "main")
	cb := waitRunning(t, n, "b", "main")
	if ca.PodSandboxId == cb.PodSandboxId {
		t.Fatal("two pods share a sandbox")
	}
	pa, _ := n.Pod("a")
	pb, _ := n.Pod("b")
	if pa.Status.PodIP == pb.Status.PodIP {
		t.Fatalf("two pods share IP %s", pa.Status.PodIP)
	}
}

func TestInitContainerRunsFirst(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	shared := filepath.Join(t.TempDir(), "shared")
	n.WriteManifest("init.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: init
spec:
  terminationGracePeriodSeconds: 5
  initContainers:
  - name: prepare
    image: %[1]s
    command: ["sh", "-c", "sleep 1; echo prepared > /shared/data"]
    volumeMounts: [{name: shared, mountPath: /shared}]
  containers:
  - name: main
    image: %[1]s
    command: ["sh", "-c", "trap 'exit 0' TERM; cat /shared/data > /shared/seen || exit 1; sleep 3600 & wait"]
    volumeMounts: [{name: shared, mountPath: /shared}]
  volumes:
  - name: shared
    hostPath: {path: %[2]s, type: DirectoryOrCreate}
`, testbed.BusyboxImage, shared))
	main := waitRunning(t, n, "init", "main")

	// Running is the start of its shell, not the end of its cat: the
	// redirection makes the file a moment before cat fills it.
	var seen []byte
	var err error
	testutil.WaitFor(t, "the app container's copy of the init container's output", func() bool {
		seen, err = os.ReadFile(filepath.Join(shared, "seen"))
		return err == nil && len(seen) > 0
	})
	if strings.TrimSpace(string(seen)) != "prepared" {
		t.Fatalf("app container read %q, want the init container's output", seen)
	}
	var init *runtimeapi.Container
	for _, c := range n.RuntimeContainers("init") {
		if c.GetMetadata().GetName() == "prepare" {
			init = c
		}
	}
	if init == nil {
		t.Fatal("init container not in the runtime")
	}
	ist := containerStatus(t, n, init.Id)
	mst := containerStatus(t, n, main.Id)
	if ist.State != runtimeapi.ContainerState_CONTAINER_EXITED || ist.ExitCode != 0 {
		t.Fatalf("init container state %v exit %d", ist.State, ist.ExitCode)
	}
	if mst.StartedAt < ist.FinishedAt {
		t.Fatalf("app container started %v before the init container finished", time.Duration(ist.FinishedAt-mst.StartedAt))
	}
	p, _ := n.Pod("init")
	if len(p.Status.InitContainerStatuses) != 1 || p.Status.InitContainerStatuses[0].State.Terminated == nil ||
		p.Status.InitContainerStatuses[0].State.Terminated.Reason != "Completed" {
		t.Fatalf("init container status %+v", p.Status.InitContainerStatuses)
	}
}

func containerStatus(t *testing.T, n *testbed.Nodelet, id string) *runtimeapi.ContainerStatus {
	t.Helper()
	r, err := n.CD.Runtime.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	return r.Status
}

func TestMalformedManifestDisturbsNothingElse(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	n.WriteManifest("broken.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: [unclosed\n")
	n.WriteManifest("good.yaml", sleeper("good", "ok"))
	waitRunning(t, n, "good", "main")
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		log := n.Log()
		return strings.Contains(log, "Could not process static pod manifest") && strings.Contains(log, "broken.yaml"),
			"no error naming broken.yaml in the log"
	})
	if n.Exited() {
		t.Fatal("nodelet exited")
	}
	if err := n.Healthz(); err != nil {
		t.Fatal(err)
	}
	pods, err := n.Pods()
	if err != nil || len(pods) != 1 {
		t.Fatalf("want only the good pod in /pods, got %d (%v)", len(pods), err)
	}
}
