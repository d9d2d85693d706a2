package cm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// newTestManager works under a cgroupRoot of the test's own, on the real
// cgroup filesystem (root and cgroup v1, as CI has; the cgroup v2 paths
// are tested on a fake root in v2_test.go).
func newTestManager(t *testing.T) *Manager {
	t.Helper()
	m, err := New(Options{CgroupRoot: fmt.Sprintf("/nodelet-unit-%d", os.Getpid()), PodPidsLimit: 1024})
	if err == nil && m.Version() != 1 {
		t.Fatalf("this test needs a cgroup v1 host; found cgroup v%d", m.Version())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.RemoveRoot(); err != nil {
			t.Errorf("removing the test cgroup root: %v", err)
		}
	})
	return m
}

func read(t *testing.T, m *Manager, controller, cgroup, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.h.(v1Hierarchy).path(controller, cgroup), file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func podWith(uid string, res ...v1.ResourceRequirements) *v1.Pod {
	p := &v1.Pod{}
	p.UID, p.Name, p.Namespace = types.UID(uid), uid, "ns"
	for i, r := range res {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: fmt.Sprint(i), Resources: r})
	}
	return p
}

func rr(req, lim string) v1.ResourceRequirements {
	parse := func(s string) v1.ResourceList {
		out := v1.ResourceList{}
		if s == "" {
			return out
		}
		for _, kv := range strings.Split(s, ",") {
			k, v, _ := strings.Cut(kv, "=")
			out[v1.ResourceName(k)] = resource.MustParse(v)
		}
		return out
	}
	return v1.ResourceRequirements{Requests: parse(req), Limits: parse(lim)}
}

// The node's PID capacity is the lower of kernel.pid_max and
// kernel.threads-max, as upstream's pidlimit reads it.
func TestPIDCapacity(t *testing.T) {
	proc := t.TempDir()
	kernel := filepath.Join(proc, "sys", "kernel")
	if err := os.MkdirAll(kernel, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, ok := PIDCapacity(proc); ok {
		t.Fatal("a capacity without the files")
	}
	for f, v := range map[string]string{"pid_max": "4194304\n", "threads-max": "191803\n"} {
		if err := os.WriteFile(filepath.Join(kernel, f), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n, ok := PIDCapacity(proc); !ok || n != 191803 {
		t.Fatalf("capacity %d %v, want threads-max's 191803", n, ok)
	}
}
