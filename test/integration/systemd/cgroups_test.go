//go:build integration

package systemd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

const podTimeout = 90 * time.Second

func running(p *v1.Pod) (bool, string) {
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running == nil {
			return false, fmt.Sprintf("container %s: %+v", c.Name, c.State)
		}
	}
	return p.Status.Phase == v1.PodRunning && len(p.Status.ContainerStatuses) > 0, fmt.Sprintf("phase %s", p.Status.Phase)
}

// startNode runs nodelet in the bed with the systemd cgroup driver, its
// pods under the bed's root slice.
func startNode(t *testing.T, extra string) *testbed.Nodelet {
	t.Helper()
	return testbed.StartNodelet(t, cd, testbed.NodeletOptions{Systemd: bed, CgroupRoot: "/", ExtraConfig: "cgroupDriver: systemd\n" + extra})
}

// hostCgroup reads a cgroup file of the bed from the host.
func hostCgroup(controller, cgroup, file string) (string, error) {
	b, err := os.ReadFile(filepath.Join(bed.CgroupPath("/sys/fs/cgroup/"+controller, cgroup), file))
	return strings.TrimSpace(string(b)), err
}

// unitProperty is a unit's property as systemd has it.
func unitProperty(t *testing.T, unit, property string) string {
	t.Helper()
	out, err := bed.Systemctl(context.Background(), "show", "-p", property, "--value", unit)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

func limitedPod(name, requests, limits string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: main
    image: %s
    command: ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
    resources:
      requests: {%s}
      limits: {%s}
`, name, testbed.BusyboxImage, requests, limits)
}

// TestSystemdCgroupDriver: with cgroupDriver systemd, the QoS and pod
// cgroups are slices systemd created (kubepods.slice,
// kubepods-burstable.slice, kubepods-burstable-pod<uid>.slice) with the
// pods' limits as unit properties, runc puts each container in a scope of
// its pod's slice, a restart of nodelet restarts nothing, and a deleted
// pod's slice is stopped and gone.
func TestSystemdCgroupDriver(t *testing.T) {
	n := startNode(t, "podPidsLimit: 500\n")
	if !strings.Contains(n.Log(), `"QoS cgroups ready"`) || !strings.Contains(n.Log(), `cgroupDriver="systemd"`) {
		t.Fatalf("nodelet did not set up the systemd driver:\n%s", n.LogTail(20))
	}
	for _, slice := range []string{"kubepods.slice", "kubepods-burstable.slice", "kubepods-besteffort.slice"} {
		if state := unitProperty(t, slice, "ActiveState"); state != "active" {
			t.Errorf("%s is %q", slice, state)
		}
	}
	n.WriteManifest("guaranteed.yaml", limitedPod("guaranteed", "cpu: 500m, memory: 64Mi", "cpu: 500m, memory: 64Mi"))
	n.WriteManifest("burstable.yaml", limitedPod("burstable", "cpu: 250m, memory: 32Mi", "memory: 48Mi"))
	g := n.WaitPod(t, "guaranteed", podTimeout, running)
	b := n.WaitPod(t, "burstable", podTimeout, running)
	escape := func(p *v1.Pod) string { return strings.ReplaceAll(string(p.UID), "-", "_") }
	gSlice := "kubepods-pod" + escape(g) + ".slice"
	bSlice := "kubepods-burstable-pod" + escape(b) + ".slice"
	for unit, want := range map[string]map[string]string{
		gSlice: {"ActiveState": "active", "CPUShares": "512", "MemoryLimit": fmt.Sprint(64 << 20), "CPUQuotaPerSecUSec": "500ms", "TasksMax": "500"},
		bSlice: {"ActiveState": "active", "CPUShares": "256", "TasksMax": "500"},
	} {
		for prop, v := range want {
			if got := unitProperty(t, unit, prop); got != v {
				t.Errorf("%s %s = %q, want %q", unit, prop, got, v)
			}
		}
	}
	gPath := "/kubepods.slice/" + gSlice
	for controller, file := range map[string]string{"cpu": "cpu.shares", "memory": "memory.limit_in_bytes"} {
		want := map[string]string{"cpu": "512", "memory": fmt.Sprint(64 << 20)}[controller]
		if got, err := hostCgroup(controller, gPath, file); err != nil || got != want {
			t.Errorf("%s %s = %q (%v), want %s", gPath, file, got, err, want)
		}
	}
	// runc placed the container in a scope of the pod's slice.
	c := n.RunningContainer("guaranteed", "main")
	scope := filepath.Join(gPath, "cri-containerd-"+c.Id+".scope")
	if got, err := hostCgroup("memory", scope, "memory.limit_in_bytes"); err != nil || got != fmt.Sprint(64<<20) {
		t.Errorf("container scope %s: memory limit %q (%v)", scope, got, err)
	}
	if slice := unitProperty(t, "cri-containerd-"+c.Id+".scope", "Slice"); slice != gSlice {
		t.Errorf("the container's scope is in %q, want %s", slice, gSlice)
	}

	// A restart of nodelet restarts nothing.
	n.Stop()
	n.Start()
	n.WaitPod(t, "guaranteed", podTimeout, running)
	if again := n.RunningContainer("guaranteed", "main"); again == nil || again.Id != c.Id {
		t.Fatalf("the container changed across a restart of nodelet: %v", again)
	}

	n.RemoveManifest("guaranteed.yaml")
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		state := unitProperty(t, gSlice, "LoadState") + "/" + unitProperty(t, gSlice, "ActiveState")
		_, err := os.Stat(bed.CgroupPath("/sys/fs/cgroup/memory", gPath))
		return os.IsNotExist(err) && state != "loaded/active", fmt.Sprintf("slice %s, cgroup: %v", state, err)
	})
	if state := unitProperty(t, bSlice, "ActiveState"); state != "active" {
		t.Errorf("the other pod's slice is %q", state)
	}
}

// TestRuntimeReportsItsCgroupDriver: a runtime that reports its cgroup
// driver (CRI RuntimeConfig, containerd 2.x) wins over the configuration,
// as upstream's kubelet does; containerd 1.x reports none and the
// configuration stands.
func TestRuntimeReportsItsCgroupDriver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cd.Runtime.RuntimeConfig(ctx, &runtimeapi.RuntimeConfigRequest{})
	if err != nil {
		if !strings.HasPrefix(cd.Version, "1.") {
			t.Fatalf("containerd %s: RuntimeConfig: %v", cd.Version, err)
		}
		n := startNode(t, "")
		if !strings.Contains(n.Log(), "The runtime does not report its cgroup driver") {
			t.Fatalf("containerd %s reports no driver, and nodelet did not say it used its configuration:\n%s", cd.Version, n.LogTail(20))
		}
		return
	}
	if d := resp.GetLinux().GetCgroupDriver(); d != runtimeapi.CgroupDriver_SYSTEMD {
		t.Fatalf("the bed's containerd reports %v", d)
	}
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{Systemd: bed, CgroupRoot: "/", ExtraConfig: "cgroupDriver: cgroupfs\n"})
	if log := n.Log(); !strings.Contains(log, "Using the cgroup driver the runtime reports") || !strings.Contains(log, `cgroupDriver="systemd"`) {
		t.Fatalf("nodelet did not take the runtime's driver:\n%s", n.LogTail(20))
	}
	n.WriteManifest("pod.yaml", limitedPod("pod", "cpu: 100m", "memory: 32Mi"))
	n.WaitPod(t, "pod", podTimeout, running)
}
