//go:build integration

package standalone

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/internal/testbed"
	"github.com/nodelet/nodelet/pkg/resources/cm"
)

func cgroupFile(controller, cgroup, file string) (string, error) {
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", controller, cgroup, file))
	return strings.TrimSpace(string(b)), err
}

// A pod runs in its own cgroup under its QoS class, with the pod's limits;
// the cgroup goes with the pod, and one nobody owns is removed.
func TestPodCgroups(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{ExtraConfig: "podPidsLimit: 500\n"})
	n.WriteManifest("limited.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: limited
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: main
    image: %s
    command: ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
    resources:
      requests: {cpu: 250m, memory: 32Mi}
      limits: {cpu: 500m, memory: 64Mi}
`, testbed.BusyboxImage))
	c := waitRunning(t, n, "limited", "main")
	p := mustPod(t, n, "limited")
	if p.Status.QOSClass != "Burstable" {
		t.Fatalf("QoS %s", p.Status.QOSClass)
	}
	podCg := filepath.Join(testbed.CgroupRoot(), "kubepods", "burstable", "pod"+string(p.UID))
	for _, check := range []struct{ controller, file, want string }{
		{"cpu", "cpu.shares", "256"},
		{"cpu", "cpu.cfs_quota_us", "50000"},
		{"memory", "memory.limit_in_bytes", fmt.Sprint(64 << 20)},
		{"pids", "pids.max", "500"},
	} {
		if got, err := cgroupFile(check.controller, podCg, check.file); err != nil || got != check.want {
			t.Errorf("pod %s = %q (%v), want %s", check.file, got, err, check.want)
		}
	}
	// All pods together are held to the node's process capacity, as
	// upstream's node allocatable holds them.
	if want, ok := cm.PIDCapacity("/proc"); !ok {
		t.Error("no PID capacity read from /proc")
	} else if got, err := cgroupFile("pids", filepath.Join(testbed.CgroupRoot(), "kubepods"), "pids.max"); err != nil || got != fmt.Sprint(want) {
		t.Errorf("kubepods pids.max = %q (%v), want %d", got, err, want)
	}
	// The container's cgroup is inside the pod's.
	for _, check := range []struct{ controller, file, want string }{
		{"memory", "memory.limit_in_bytes", fmt.Sprint(64 << 20)},
		{"cpu", "cpu.cfs_quota_us", "50000"},
		{"cpu", "cpu.shares", "256"},
	} {
		if got, err := cgroupFile(check.controller, filepath.Join(podCg, c.Id), check.file); err != nil || got != check.want {
			t.Errorf("container %s = %q (%v), want %s", check.file, got, err, check.want)
		}
	}

	// An orphaned pod cgroup is removed by housekeeping.
	orphan := filepath.Join(testbed.CgroupRoot(), "kubepods", "besteffort", "podorphan-uid")
	if err := os.MkdirAll(filepath.Join("/sys/fs/cgroup/memory", orphan), 0o755); err != nil {
		t.Fatal(err)
	}
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		_, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", orphan))
		return os.IsNotExist(err), "orphaned cgroup still there"
	})

	n.RemoveManifest("limited.yaml")
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		_, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", podCg))
		return os.IsNotExist(err), "the pod's cgroup outlived it"
	})
}

// kubeletCgroups moves nodelet into its cgroup, and the summary API
// reports it, the runtime's cgroup (--runtime-cgroups) and the pods' as
// upstream's system containers "kubelet", "runtime" and "pods" (the
// node e2e suite's launcher starts the kubelet so, and its summary spec
// reads them).
func TestSystemCgroups(t *testing.T) {
	kubeletCg := filepath.Join(testbed.CgroupRoot(), "kubelet")
	runtimeCg := filepath.Join(testbed.CgroupRoot(), "runtime")
	if err := os.MkdirAll(filepath.Join("/sys/fs/cgroup/memory", runtimeCg), 0o755); err != nil {
		t.Fatal(err)
	}
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{ExtraConfig: "kubeletCgroups: " + kubeletCg + "\n", Args: []string{"--runtime-cgroups", runtimeCg}})
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", n.PID()))
		return err == nil && strings.Contains(string(b), ":memory:"+kubeletCg+"\n"), fmt.Sprintf("nodelet's cgroups:\n%s", b)
	})
	// nodelet's usage counts in its cgroup from its move on (cgroup v1
	// leaves what it used before where it was): it shows within a few
	// seconds of work.
	var sum statsapi.Summary
	testbed.Eventually(t, 60*time.Second, func() (bool, string) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/stats/summary", n.Port))
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		sum = statsapi.Summary{}
		if err := json.NewDecoder(resp.Body).Decode(&sum); err != nil {
			return false, err.Error()
		}
		names := map[string]statsapi.ContainerStats{}
		for _, c := range sum.Node.SystemContainers {
			names[c.Name] = c
		}
		k, ok := names["kubelet"]
		used := ok && k.CPU != nil && k.CPU.UsageCoreNanoSeconds != nil && *k.CPU.UsageCoreNanoSeconds > 0 &&
			k.Memory != nil && k.Memory.UsageBytes != nil && *k.Memory.UsageBytes > 0
		_, runtime := names["runtime"]
		_, pods := names["pods"]
		return len(names) == 3 && used && runtime && pods, fmt.Sprintf("system containers %+v", sum.Node.SystemContainers)
	})
}
