//go:build integration

package faults

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// The invariants, as the table names them.
const (
	invNoneLost    = "no pod lost"
	invNoRestart   = "no restart"
	invTruth       = "status = runtime"
	invNoCRILeak   = "no sandbox/container leak"
	invNoHostLeak  = "no mount/cgroup/dir leak"
	invNoGoroutine = "no goroutine leak"
)

// convergeTimeout bounds how long the node may take to settle after a fault.
const convergeTimeout = 3 * time.Minute

// openAPI opens the kubelet API to anyone, for /metrics.
const openAPI = "authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}\nauthorization: {mode: AlwaysAllow}\n"

// startNode runs a nodelet whose kubelet API is open.
func startNode(t *testing.T, extra string) *testbed.Nodelet {
	return testbed.StartNodelet(t, cd, testbed.NodeletOptions{ExtraConfig: openAPI + extra})
}

// sleeper is a pod that runs until told to stop.
func sleeper(name string) string { return shPod(name, "sleep 3600") }

// shPod is a pod whose one container runs the shell loop in the
// background and exits 0 on SIGTERM.
func shPod(name, loop string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: %s
    command: ["sh", "-c", "trap 'exit 0' TERM; %s & wait"]
`, name, testbed.BusyboxImage, loop)
}

// writePods writes count sleeper manifests at once and returns their names.
func writePods(n *testbed.Nodelet, prefix string, count int) []string {
	var names []string
	for i := 0; i < count; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		n.WriteManifest(name+".yaml", sleeper(name))
		names = append(names, name)
	}
	return names
}

// allRunning waits until every pod runs its container, as the runtime
// and /pods both say, and returns how long that took.
func allRunning(t *testing.T, n *testbed.Nodelet, names []string) time.Duration {
	t.Helper()
	start := time.Now()
	testbed.Eventually(t, convergeTimeout, func() (bool, string) {
		pods, err := podsByName(n)
		if err != nil {
			return false, err.Error()
		}
		running := runningContainers(t, n.CD)
		for _, name := range names {
			p, ok := pods[n.PodName(name)]
			if !ok || p.Status.Phase != v1.PodRunning || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Running == nil {
				return false, fmt.Sprintf("%s not running: %+v", name, p.Status)
			}
			if !running[strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")] {
				return false, fmt.Sprintf("%s: the runtime does not run %s", name, p.Status.ContainerStatuses[0].ContainerID)
			}
		}
		return true, ""
	})
	return time.Since(start)
}

func podsByName(n *testbed.Nodelet) (map[string]v1.Pod, error) {
	list, err := n.Pods()
	if err != nil {
		return nil, err
	}
	out := map[string]v1.Pod{}
	for _, p := range list {
		out[p.Name] = p
	}
	return out, nil
}

func runningContainers(t *testing.T, cd *testbed.Containerd) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := cd.Containers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, c := range cs {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			out[c.Id] = true
		}
	}
	return out
}

// checkNoRestarts: no container of the pods restarted.
func checkNoRestarts(t *testing.T, n *testbed.Nodelet, names []string) {
	t.Helper()
	pods, err := podsByName(n)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		for _, cs := range pods[n.PodName(name)].Status.ContainerStatuses {
			if cs.RestartCount != 0 {
				t.Errorf("%s: container %s restarted %d times", name, cs.Name, cs.RestartCount)
			}
		}
	}
}

// checkTruth: the runtime holds exactly one ready sandbox per pod, and
// every running container is the one its pod's status names. Dead
// containers of a desired pod may stay, one per container name besides
// the current instance, as upstream's garbage collection keeps them (a
// container created but never started, say).
func checkTruth(t *testing.T, n *testbed.Nodelet, names []string) {
	t.Helper()
	pods, err := podsByName(n)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sandboxes, err := n.CD.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	containers, err := n.CD.Containers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, name := range names {
		want[n.PodName(name)] = true
	}
	perPod := map[string]int{}
	for _, s := range sandboxes {
		if !want[s.Metadata.Name] {
			t.Errorf("sandbox %s of pod %s is not a desired pod's", s.Id, s.Metadata.Name)
			continue
		}
		if s.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			t.Errorf("pod %s keeps a sandbox not ready (%s)", s.Metadata.Name, s.Id)
		}
		perPod[s.Metadata.Name]++
	}
	for name := range want {
		if perPod[name] != 1 {
			t.Errorf("pod %s has %d sandboxes", name, perPod[name])
		}
	}
	current := map[string]bool{}
	for _, p := range pods {
		for _, cs := range p.Status.ContainerStatuses {
			current[strings.TrimPrefix(cs.ContainerID, "containerd://")] = true
		}
	}
	dead := map[string]int{}
	for _, c := range containers {
		pod := c.Labels["io.kubernetes.pod.name"]
		switch {
		case !want[pod]:
			t.Errorf("container %s (%s, %v) is not a desired pod's", c.Id, c.Metadata.Name, c.State)
		case current[c.Id]:
		case c.State == runtimeapi.ContainerState_CONTAINER_RUNNING:
			t.Errorf("container %s of %s runs, but its status names another", c.Id, pod)
		default:
			if dead[pod+"/"+c.Metadata.Name]++; dead[pod+"/"+c.Metadata.Name] > 1 {
				t.Errorf("pod %s keeps more than one dead %s container", pod, c.Metadata.Name)
			}
		}
	}
}

// allGone waits until the runtime holds nothing and /pods lists no pod,
// and returns how long that took. If something stays, nodelet's log lines
// about it are printed first.
func allGone(t *testing.T, n *testbed.Nodelet) time.Duration {
	t.Helper()
	start := time.Now()
	var leftIDs []string
	t.Cleanup(func() {
		if !t.Failed() || len(leftIDs) == 0 {
			return
		}
		for _, l := range strings.Split(n.Log(), "\n") {
			for _, id := range leftIDs {
				if strings.Contains(l, id) {
					t.Log(l)
					break
				}
			}
		}
	})
	testbed.Eventually(t, convergeTimeout, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sandboxes, err := n.CD.Sandboxes(ctx)
		if err != nil {
			return false, err.Error()
		}
		containers, err := n.CD.Containers(ctx)
		if err != nil {
			return false, err.Error()
		}
		pods, err := n.Pods()
		if err != nil {
			return false, err.Error()
		}
		var left []string
		leftIDs = nil
		for _, s := range sandboxes {
			left = append(left, fmt.Sprintf("sandbox %s of %s (%v)", s.Id[:12], s.Metadata.Name, s.State))
			leftIDs = append(leftIDs, s.Id[:12], s.Metadata.Uid)
		}
		for _, c := range containers {
			left = append(left, fmt.Sprintf("container %s %s of %s (%v)", c.Id[:12], c.Metadata.Name, c.Labels["io.kubernetes.pod.name"], c.State))
			leftIDs = append(leftIDs, c.Id[:12])
		}
		for _, p := range pods {
			left = append(left, "pod "+p.Name)
		}
		return len(left) == 0, fmt.Sprintf("left: %v", left)
	})
	return time.Since(start)
}

// checkNoHostLeaks: once every pod is gone, nodelet left no pod
// directory, no mount under its root directory and no pod cgroup.
func checkNoHostLeaks(t *testing.T, n *testbed.Nodelet) {
	t.Helper()
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		var left []string
		entries, err := os.ReadDir(filepath.Join(n.RootDir, "pods"))
		if err != nil && !os.IsNotExist(err) {
			return false, err.Error()
		}
		for _, e := range entries {
			left = append(left, "pod dir "+e.Name())
		}
		left = append(left, mountsUnder(t, n.RootDir)...)
		left = append(left, podCgroups(t)...)
		return len(left) == 0, fmt.Sprintf("left behind: %v", left)
	})
}

func mountsUnder(t *testing.T, dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			out = append(out, "mount "+fields[4])
		}
	}
	return out
}

// podCgroups lists pod cgroups under the test's cgroup root (the memory
// hierarchy: every pod cgroup has one).
func podCgroups(t *testing.T) []string {
	root := filepath.Join("/sys/fs/cgroup/memory", testbed.CgroupRoot())
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // removed while walking, or no root yet
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), "pod") {
			out = append(out, "cgroup "+strings.TrimPrefix(path, root))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// goroutines reads nodelet's go_goroutines from the kubelet API.
func goroutines(t *testing.T, n *testbed.Nodelet) int {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Get(fmt.Sprintf("https://127.0.0.1:%d/metrics", n.APIPort))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "go_goroutines "); ok {
			g, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
	}
	t.Fatalf("no go_goroutines in /metrics (HTTP %d)", resp.StatusCode)
	return 0
}

// goroutineSlack is how many more goroutines than at the start an idle
// nodelet may run after a scenario: idle HTTP and gRPC connections come
// and go. A leak per pod or per fault is far above it.
const goroutineSlack = 15

// checkGoroutines: after the scenario, with its pods gone, nodelet runs
// about as many goroutines as it did idle before.
func checkGoroutines(t *testing.T, n *testbed.Nodelet, before int) {
	t.Helper()
	var after int
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		after = goroutines(t, n)
		return after <= before+goroutineSlack, fmt.Sprintf("%d goroutines after, %d before", after, before)
	})
	t.Logf("goroutines: %d idle before, %d after", before, after)
}

// removePods deletes the pods' manifests.
func removePods(n *testbed.Nodelet, names []string) {
	for _, name := range names {
		n.RemoveManifest(name + ".yaml")
	}
}

// deleteAndCheck deletes the pods and checks that they went for good:
// nothing left in the runtime or on the host, and no goroutine leaked
// since the idle count.
func deleteAndCheck(t *testing.T, n *testbed.Nodelet, names []string, idle int) {
	t.Helper()
	removePods(n, names)
	allGone(t, n)
	checkNoHostLeaks(t, n)
	checkGoroutines(t, n, idle)
}
