//go:build integration

package faults

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// journalPods are the ten pods of the journal scenario, in mixed states.
var journalPods = []struct {
	name  string
	state string // what it is when nodelet is killed
	tweak func(p *v1.Pod)
}{
	{"run-0", "running", nil},
	{"run-1", "running", nil},
	{"run-gone", "running", nil}, // deleted while nodelet is down
	{"cfg-reader", "running", withConfig},
	{"finisher", "running", exitsWhenTold(3)},
	{"done-ok", "terminal", exits(0)},
	{"done-failed", "terminal", exits(1)},
	{"too-big", "rejected", func(p *v1.Pod) {
		p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("1000")}
	}},
	{"wrong-node", "rejected", func(p *v1.Pod) { p.Spec.NodeSelector = map[string]string{"nodelet.test/journal": "elsewhere"} }},
	{"leaving", "mid-deletion", func(p *v1.Pod) {
		// sh as PID 1 ignores SIGTERM: the pod takes its whole grace
		// period to stop.
		p.Spec.TerminationGracePeriodSeconds = new(int64(20))
		p.Spec.Containers[0].Command = []string{"sh", "-c", "sleep 3600 & wait"}
	}},
}

func withConfig(p *v1.Pod) {
	p.Spec.Volumes = []v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "journal-cfg"}}}}}
	c := &p.Spec.Containers[0]
	c.VolumeMounts = []v1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}}
	c.Env = []v1.EnvVar{{Name: "PASSWORD", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: "journal-secret"}, Key: "password"}}}}
	// It exits when told, and is restarted (restartPolicy Always): the
	// new container needs the configMap and the secret.
	c.Command = []string{"sh", "-c", "trap 'exit 0' TERM; while [ ! -f /tmp/exit ]; do sleep 0.2; done; exit 1"}
}

func exits(code int) func(p *v1.Pod) {
	return func(p *v1.Pod) {
		p.Spec.RestartPolicy = v1.RestartPolicyNever
		p.Spec.Containers[0].Command = []string{"sh", "-c", fmt.Sprintf("exit %d", code)}
	}
}

func exitsWhenTold(code int) func(p *v1.Pod) {
	return func(p *v1.Pod) {
		p.Spec.RestartPolicy = v1.RestartPolicyNever
		p.Spec.Containers[0].Command = []string{"sh", "-c", fmt.Sprintf("trap 'exit 0' TERM; while [ ! -f /tmp/exit ]; do sleep 0.2; done; exit %d", code)}
	}
}

// nodelet is SIGKILLed with ten pods in mixed states, and started again
// while the API server is down: from its journal it keeps running
// exactly what it ran (no container restarted, no finished pod run
// again, no rejected pod admitted), finishes the deletion under way, and
// serves the configMap and secret to a container that must start again.
// Once the API server is back, the API wins: the pod deleted meanwhile
// stops, and the statuses held meanwhile are written.
func TestJournalRestartWithAPIServerDown(t *testing.T) {
	record(t, row{scenario: "nodelet SIGKILL, restart with API down", load: "10 pods in mixed states", fault: "SIGKILL, API server down, restart",
		invariants: []string{invNoneLost, invNoRestart, invTruth, invNoCRILeak}})
	ctx := context.Background()
	ns := cl.Client.CoreV1()
	if _, err := ns.ConfigMaps("default").Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "journal-cfg"}, Data: map[string]string{"key": "from-the-api"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Secrets("default").Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "journal-secret"}, StringData: map[string]string{"password": "hunter2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ns.ConfigMaps("default").Delete(context.Background(), "journal-cfg", metav1.DeleteOptions{})
		_ = ns.Secrets("default").Delete(context.Background(), "journal-secret", metav1.DeleteOptions{})
	})
	n := clusterNode(t, "journal")
	for _, jp := range journalPods {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: jp.name}, Spec: v1.PodSpec{
			NodeName: n.NodeName, AutomountServiceAccountToken: new(false), TerminationGracePeriodSeconds: new(int64(2)),
			Containers: []v1.Container{{Name: "main", Image: testbed.BusyboxImage, ImagePullPolicy: v1.PullIfNotPresent,
				Command: []string{"sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"}}},
		}}
		if jp.tweak != nil {
			jp.tweak(p)
		}
		if _, err := ns.Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	apiStates(t, map[string]string{
		"run-0": "Running", "run-1": "Running", "run-gone": "Running", "cfg-reader": "Running", "finisher": "Running", "leaving": "Running",
		"done-ok": "Succeeded", "done-failed": "Failed", "too-big": "Failed OutOfcpu", "wrong-node": "Failed NodeAffinity",
	})
	if err := ns.Pods("default").Delete(ctx, "leaving", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLog(t, n, `"Killing container with a grace period" pod="default/leaving"`)
	before := runtimeContainers(t, n)

	start := restartWithAPIDown(t, n, func() {
		if err := ns.Pods("default").Delete(ctx, "run-gone", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	// The deletion under way finishes, with the API server still down.
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		return n.RunningPodContainer("leaving", "main") == nil, "leaving still runs"
	})
	// The pods run as they did, and the finished and rejected ones as
	// they ended: nodelet's own account, from the journal.
	nodeletStates(t, n, map[string]string{
		"run-0": "Running", "run-1": "Running", "run-gone": "Running", "cfg-reader": "Running", "finisher": "Running",
		"done-ok": "Succeeded", "done-failed": "Failed", "too-big": "Failed OutOfcpu", "wrong-node": "Failed NodeAffinity",
	})
	after := runtimeContainers(t, n)
	for pod, ids := range before {
		if pod == "leaving" {
			continue
		}
		if after[pod] != ids {
			t.Errorf("%s: containers %s before the restart, %s after", pod, ids, after[pod])
		}
	}
	for _, pod := range []string{"too-big", "wrong-node"} {
		if sbs := n.PodSandboxes(pod); len(sbs) != 0 {
			t.Errorf("rejected pod %s has %d sandboxes", pod, len(sbs))
		}
	}
	// A container that must start again gets its configMap volume and
	// secret from the journal.
	told := n.RunningPodContainer("cfg-reader", "main")
	if _, err := n.Exec(told.Id, "touch", "/tmp/exit"); err != nil {
		t.Fatal(err)
	}
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		c := n.RunningPodContainer("cfg-reader", "main")
		return c != nil && c.Id != told.Id, "cfg-reader's container did not start again"
	})
	again := n.RunningPodContainer("cfg-reader", "main")
	if out, err := n.Exec(again.Id, "sh", "-c", "cat /cfg/key; echo; echo $PASSWORD"); err != nil || out != "from-the-api\nhunter2\n" {
		t.Errorf("the new container reads %q (%v)", out, err)
	}
	// A status reached while the API server is down is held.
	if _, err := n.Exec(n.RunningPodContainer("finisher", "main").Id, "touch", "/tmp/exit"); err != nil {
		t.Fatal(err)
	}
	nodeletStates(t, n, map[string]string{"finisher": "Failed"})

	startAPIServer(t)
	// The API wins: the pod deleted meanwhile goes, the deletion under way
	// completes, and the statuses held meanwhile are written.
	apiGone(t, n, []string{"run-gone", "leaving"})
	apiStates(t, map[string]string{"finisher": "Failed", "run-0": "Running", "cfg-reader": "Running",
		"done-ok": "Succeeded", "too-big": "Failed OutOfcpu"})
	setRow(t, time.Since(start))
	for _, name := range []string{"run-0", "run-1"} {
		p, err := ns.Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rc := p.Status.ContainerStatuses[0].RestartCount; rc != 0 {
			t.Errorf("%s restarted %d times", name, rc)
		}
	}
	inspectJournal(t, n)
	for _, jp := range journalPods {
		_ = ns.Pods("default").Delete(ctx, jp.name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
	}
	apiGone(t, n, []string{"run-0", "run-1", "cfg-reader", "finisher", "done-ok", "done-failed", "too-big", "wrong-node"})
}

// clusterNode runs a nodelet in the cluster, in its own cgroup, and
// deletes its Node when the test ends.
func clusterNode(t *testing.T, node string) *testbed.Nodelet {
	t.Helper()
	kubeconfig, err := cl.NodeKubeconfig(node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Registered before the nodelet, so it runs after the runtime's
		// pods are gone: the pod cgroups a failed run leaves must not
		// fail the scenarios after it.
		removeCgroupTree(t, testbed.CgroupRoot()+"/"+node)
	})
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{NodeName: node, Kubeconfig: kubeconfig,
		CgroupRoot: testbed.CgroupRoot() + "/" + node, ExtraConfig: openAPI})
	t.Cleanup(func() { _ = cl.Client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	return n
}

// restartWithAPIDown SIGKILLs nodelet, runs meanwhile (while the API
// server still answers), stops the API server and starts nodelet again,
// returning once it runs the journal's pods, and when it started.
func restartWithAPIDown(t *testing.T, n *testbed.Nodelet, meanwhile func()) time.Time {
	t.Helper()
	n.Kill()
	testbed.Eventually(t, 30*time.Second, func() (bool, string) { return n.Exited(), "nodelet still runs" })
	meanwhile()
	cl.StopAPIServer()
	// A test that fails with the API server down must not take the
	// scenarios after it down too.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_ = cl.StartAPIServer(ctx) // an error if it runs already
	})
	start := time.Now()
	n.Start()
	waitLog(t, n, "running the node journal's")
	return start
}

func startAPIServer(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cl.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
}

// nodelet is SIGKILLed in the middle of a journal write, before and after
// its commit: the journal opens whole (no damaged record, nothing moved
// aside), and the pod whose arrival was being written runs once.
func TestJournalKilledMidWrite(t *testing.T) {
	for _, point := range []string{"journal-tx-written", "journal-committed"} {
		t.Run(point, func(t *testing.T) {
			record(t, row{scenario: "nodelet SIGKILL at " + point, load: "2 pods", fault: "SIGKILL at failpoint, restart",
				invariants: []string{invNoneLost, invNoRestart, invTruth, invNoCRILeak, invNoHostLeak}})
			n := startNode(t, "")
			idle := goroutines(t, n)
			names := killWhileCreating(t, n, point)
			log := n.Log()
			if i := strings.LastIndex(log, "Node journal opened"); i < 0 || !strings.Contains(log[i:], "damagedRecords=0") {
				t.Errorf("the journal did not open whole after the kill")
			}
			if strings.Contains(log, "moving it aside") {
				t.Errorf("the journal was moved aside")
			}
			checkNoRestarts(t, n, names)
			checkTruth(t, n, names)
			deleteAndCheck(t, n, names, idle)
		})
	}
}

// inspectJournal runs `nodelet journal inspect` on the running node's
// journal: it lists the pods with their decisions, and names the objects
// without printing the secret.
func inspectJournal(t *testing.T, n *testbed.Nodelet) {
	t.Helper()
	bin, err := testbed.NodeletBinary()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "journal", "inspect", "--root-dir", n.RootDir).CombinedOutput()
	if err != nil {
		t.Fatalf("journal inspect: %v\n%s", err, out)
	}
	t.Logf("nodelet journal inspect:\n%s", out)
	for _, want := range []string{"read from a copy: nodelet holds it", "default/run-0", "rejected: OutOfcpu", "rejected: NodeAffinity",
		"configmap/default/journal-cfg", "secret/default/journal-secret"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("journal inspect lacks %q", want)
		}
	}
	if strings.Contains(string(out), "hunter2") {
		t.Error("journal inspect printed the secret")
	}
}

// removeCgroupTree removes a cgroup and everything under it, in every
// hierarchy, deepest first.
func removeCgroupTree(t *testing.T, rel string) {
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range append(hierarchies, "/sys/fs/cgroup") {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, rel), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil {
				t.Logf("removing cgroup %s: %v", dirs[i], err)
				return
			}
		}
	}
}

// runtimeContainers lists each API pod's containers' IDs in the runtime.
func runtimeContainers(t *testing.T, n *testbed.Nodelet) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, jp := range journalPods {
		var ids []string
		for _, c := range n.PodContainers(jp.name) {
			ids = append(ids, c.Id[:12])
		}
		out[jp.name] = strings.Join(ids, ",")
	}
	return out
}

// podState is "Phase" or, for a pod that failed with a reason, "Phase
// Reason"; a running pod counts as Running only once its container runs.
func podState(p *v1.Pod) string {
	s := string(p.Status.Phase)
	if p.Status.Reason != "" {
		s += " " + p.Status.Reason
	}
	if p.Status.Phase == v1.PodRunning && (len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Running == nil) {
		s = "Running, container not running"
	}
	return s
}

// apiStates waits until the API shows each pod in its state.
func apiStates(t *testing.T, want map[string]string) {
	t.Helper()
	testbed.Eventually(t, convergeTimeout, func() (bool, string) {
		for name, state := range want {
			p, err := cl.Client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if got := podState(p); got != state {
				return false, fmt.Sprintf("API: %s is %q, want %q", name, got, state)
			}
		}
		return true, ""
	})
}

// nodeletStates waits until nodelet's /pods shows each pod in its state.
func nodeletStates(t *testing.T, n *testbed.Nodelet, want map[string]string) {
	t.Helper()
	testbed.Eventually(t, convergeTimeout, func() (bool, string) {
		pods, err := n.Pods()
		if err != nil {
			return false, err.Error()
		}
		got := map[string]*v1.Pod{}
		for i := range pods {
			got[pods[i].Name] = &pods[i]
		}
		for name, state := range want {
			p, ok := got[name]
			if !ok {
				return false, name + " is not in nodelet's /pods"
			}
			if s := podState(p); s != state {
				return false, fmt.Sprintf("nodelet: %s is %q, want %q", name, s, state)
			}
		}
		return true, ""
	})
}
