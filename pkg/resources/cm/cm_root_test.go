//go:build integration

// These tests need root (mounts, chown) or a cgroup v1 host: they run
// with the integration suites (make test), and go test ./... stays the
// unit suite that runs anywhere, unprivileged.

package cm

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/nodelet/nodelet/internal/testutil"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestPodCgroups(t *testing.T) {
	m := newTestManager(t)
	if err := m.Setup(v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("1Gi")}); err != nil {
		t.Fatal(err)
	}
	root := fmt.Sprintf("/nodelet-unit-%d", os.Getpid())
	top := root + "/kubepods"
	if got := read(t, m, "cpu", top, "cpu.shares"); got != "2048" {
		t.Errorf("kubepods cpu.shares %s", got)
	}
	if got := read(t, m, "memory", top, "memory.limit_in_bytes"); got != strconv.Itoa(1<<30) {
		t.Errorf("kubepods memory limit %s", got)
	}

	guaranteed := podWith("g", rr("cpu=500m,memory=64Mi", "cpu=500m,memory=64Mi"))
	burst := podWith("b", rr("cpu=250m", "memory=32Mi"), rr("cpu=250m", ""))
	best := podWith("e", rr("", ""))
	for _, p := range []*v1.Pod{guaranteed, burst, best} {
		if m.Exists(p) {
			t.Fatalf("%s exists before creation", p.UID)
		}
		if err := m.EnsureExists(p); err != nil {
			t.Fatal(err)
		}
		if !m.Exists(p) {
			t.Fatalf("%s missing after creation", p.UID)
		}
	}
	if got := m.PodCgroup(guaranteed); got != root+"/kubepods/podg" {
		t.Errorf("guaranteed pod cgroup %s", got)
	}
	if got := m.PodCgroup(burst); got != root+"/kubepods/burstable/podb" {
		t.Errorf("burstable pod cgroup %s", got)
	}
	g := m.PodCgroup(guaranteed)
	for file, want := range map[string]string{"cpu.shares": "512", "cpu.cfs_quota_us": "50000", "cpu.cfs_period_us": "100000"} {
		if got := read(t, m, "cpu", g, file); got != want {
			t.Errorf("guaranteed %s = %s, want %s", file, got, want)
		}
	}
	if got := read(t, m, "memory", g, "memory.limit_in_bytes"); got != strconv.Itoa(64<<20) {
		t.Errorf("guaranteed memory limit %s", got)
	}
	if got := read(t, m, "pids", g, "pids.max"); got != "1024" {
		t.Errorf("pids.max %s", got)
	}
	// Not every container limits memory: the pod as a whole has no limit.
	b := m.PodCgroup(burst)
	if got := read(t, m, "memory", b, "memory.limit_in_bytes"); len(got) < 15 {
		t.Errorf("burstable pod memory limit %s, want unlimited", got)
	}
	if got := read(t, m, "cpu", b, "cpu.shares"); got != "512" {
		t.Errorf("burstable cpu.shares %s", got)
	}

	if err := m.UpdateQoS([]*v1.Pod{guaranteed, burst, best}); err != nil {
		t.Fatal(err)
	}
	if got := read(t, m, "cpu", m.QoSCgroup(v1.PodQOSBurstable), "cpu.shares"); got != "512" {
		t.Errorf("burstable class cpu.shares %s, want its pods' requests", got)
	}

	listed, err := m.PodCgroups()
	if err != nil || len(listed) != 3 || listed["b"] != b {
		t.Fatalf("listed %v %v", listed, err)
	}
	if err := m.Destroy(b); err != nil {
		t.Fatal(err)
	}
	if m.Exists(burst) {
		t.Fatal("destroyed cgroup still exists")
	}
}

// A process left in the pod cgroup, or in a container's cgroup below it
// (a runc init the runtime failed to clean up after a start cancelled
// mid-way), is killed and the cgroup removed.
func TestDestroyKillsStrays(t *testing.T) {
	for _, child := range []string{"", "container"} {
		t.Run("in "+cmp.Or(child, "the pod cgroup"), func(t *testing.T) { destroyKillsStray(t, child) })
	}
}

func destroyKillsStray(t *testing.T, child string) {
	m := newTestManager(t)
	if err := m.Setup(v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}); err != nil {
		t.Fatal(err)
	}
	p := podWith("stray", rr("", ""))
	if err := m.EnsureExists(p); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "3600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	cg := m.PodCgroup(p)
	h := m.h.(v1Hierarchy)
	for _, c := range managedV1 {
		if _, mounted := h.mounts[c]; !mounted {
			continue // hugetlb, on hosts that mount it only in the unified tree
		}
		dir := filepath.Join(h.path(c, cg), child)
		testutil.Must(t, os.MkdirAll(dir, 0o755))
		testutil.Must(t, os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644))
	}
	if err := m.Destroy(cg); err != nil {
		cmd.Process.Kill()
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("the stray process was not killed")
	}
}
