package memorymanager

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/internal/numatest"
	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/pkg/resources/memorymanager/state"
	"github.com/nodelet/nodelet/pkg/resources/numa"
	"github.com/nodelet/nodelet/pkg/resources/topologymanager"
)

// twoNodes is two NUMA nodes of 4 GiB, with (empty) 2 MiB huge pages.
func twoNodes() *numa.Topology {
	return numatest.Machine(numatest.Shape{Sockets: 2, CoresPerSocket: 2, ThreadsPerCore: 1, MemoryPerNode: 4 << 30,
		HugePagesPerNode: map[int64]int64{2 << 20: 0}})
}

func reservation(node int32, mem string) kubeletv1beta1.MemoryReservation {
	return kubeletv1beta1.MemoryReservation{NumaNode: node, Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse(mem)}}
}

func newStatic(t *testing.T, topo *numa.Topology, root string) *Manager {
	t.Helper()
	m, err := New(Options{Policy: PolicyStatic, Topology: topo, RootDir: root,
		Reserved:        []kubeletv1beta1.MemoryReservation{reservation(0, "512Mi")},
		NodeReservation: v1.ResourceList{v1.ResourceMemory: resource.MustParse("512Mi"), v1.ResourceCPU: resource.MustParse("1")}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func gpod(uid string, mems ...string) *v1.Pod {
	p := &v1.Pod{}
	p.Name, p.Namespace, p.UID = uid, "ns", types.UID(uid)
	for i, mem := range mems {
		r := v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse(mem)}
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "c" + string(rune('1'+i)), Resources: v1.ResourceRequirements{Requests: r, Limits: r}})
	}
	return p
}

func hintStrings(hs []topologymanager.Hint) string {
	var s []string
	for _, h := range hs {
		s = append(s, h.String())
	}
	return strings.Join(s, " ")
}

// TestStaticPlacement is the golden table of the Static policy on two
// 4 GiB nodes (512 MiB of node 0 reserved): hints, the placement, the
// cpuset.mems, and the rule that a node serves single-node or
// multi-node allocations, not both.
func TestStaticPlacement(t *testing.T) {
	m := newStatic(t, twoNodes(), t.TempDir())
	small := gpod("small", "1Gi")
	if got := hintStrings(m.TopologyHints(small, &small.Spec.Containers[0])["memory"]); got != "{0} preferred=true {1} preferred=true {0,1} preferred=false" {
		t.Fatalf("1 GiB hints: %s", got)
	}
	testutil.Must(t, m.Allocate(small, &small.Spec.Containers[0], topologymanager.Hint{NUMANodes: topologymanager.NewMask(1), Preferred: true}))
	cfg := &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{}}
	testutil.Must(t, m.PreCreateContainer(context.Background(), small, &small.Spec.Containers[0], cfg))
	if cfg.Linux.Resources.CpusetMems != "1" {
		t.Fatalf("cpuset.mems %q", cfg.Linux.Resources.CpusetMems)
	}

	// 6 GiB needs both nodes; node 1 serves a single-node allocation, so
	// no pair is possible.
	big := gpod("big", "6Gi")
	if h := m.TopologyHints(big, &big.Spec.Containers[0]); len(h["memory"]) != 0 {
		t.Fatalf("6 GiB hints beside a single-node allocation: %v", h)
	}
	if err := m.Allocate(big, &big.Spec.Containers[0], topologymanager.Hint{}); err == nil || !strings.Contains(err.Error(), "no NUMA nodes with enough memory") {
		t.Fatalf("6 GiB: %v", err)
	}
	// Once the small pod is gone, both nodes hold it together.
	m.RetainActive(nil)
	if got := hintStrings(m.TopologyHints(big, &big.Spec.Containers[0])["memory"]); got != "{0,1} preferred=true" {
		t.Fatalf("6 GiB hints on an empty machine: %s", got)
	}
	testutil.Must(t, m.Allocate(big, &big.Spec.Containers[0], topologymanager.Hint{}))
	if n := m.NUMANodes("big", "c1"); len(n) != 2 {
		t.Fatalf("6 GiB on %v", n)
	}
	// Node 0 is grouped with node 1 now: no single-node allocation on it.
	if got := hintStrings(m.TopologyHints(small, &small.Spec.Containers[0])["memory"]); got != "{0,1} preferred=false" {
		t.Fatalf("1 GiB hints beside the pair: %s", got)
	}
}

// TestInitContainerMemoryReused: an app container reuses its init
// container's memory at admission, and the init container's goes back
// when the app container starts.
func TestInitContainerMemoryReused(t *testing.T) {
	m := newStatic(t, twoNodes(), t.TempDir())
	p := gpod("p", "1Gi")
	p.Spec.InitContainers = []v1.Container{gpod("x", "2Gi").Spec.Containers[0]}
	p.Spec.InitContainers[0].Name = "init"
	one := topologymanager.Hint{NUMANodes: topologymanager.NewMask(1), Preferred: true}
	testutil.Must(t, m.Allocate(p, &p.Spec.InitContainers[0], one))
	testutil.Must(t, m.Allocate(p, &p.Spec.Containers[0], one))
	if r := m.state.Machine[1].MemoryMap[v1.ResourceMemory].Reserved; r != 2<<30 {
		t.Fatalf("reserved %d, want the init container's 2 GiB only", r)
	}
	testutil.Must(t, m.PreStartContainer(context.Background(), p, &p.Spec.Containers[0], "id"))
	if r := m.state.Machine[1].MemoryMap[v1.ResourceMemory].Reserved; r != 1<<30 {
		t.Fatalf("reserved %d once the app container started, want 1 GiB", r)
	}
}

func TestReservedMemoryChecked(t *testing.T) {
	for _, tc := range []struct {
		reserved []kubeletv1beta1.MemoryReservation
		node     string
		want     string
	}{
		{nil, "100Mi", `the total amount "0" of type "memory" is not equal to the value "100Mi"`},
		{[]kubeletv1beta1.MemoryReservation{reservation(0, "50Mi"), reservation(1, "50Mi")}, "100Mi", ""},
		{[]kubeletv1beta1.MemoryReservation{reservation(3, "100Mi")}, "100Mi", "NUMA node 3, which this machine does not have"},
	} {
		_, err := New(Options{Policy: PolicyStatic, Topology: twoNodes(), RootDir: t.TempDir(), Reserved: tc.reserved,
			NodeReservation: v1.ResourceList{v1.ResourceMemory: resource.MustParse(tc.node)}})
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%v: %v, want %q", tc.reserved, err, tc.want)
		}
	}
	if _, err := New(Options{Policy: PolicyNone, Topology: twoNodes(), RootDir: t.TempDir(), Reserved: []kubeletv1beta1.MemoryReservation{reservation(0, "1Mi")}}); err == nil {
		t.Fatal("reservedMemory accepted without the Static policy")
	}
}

// TestUpstreamStateFile: the kubelet's file (written by
// hack/cluster/tools/checkpoints with upstream's code) reads on the
// machine it describes, and nodelet writes it back byte for byte.
func TestUpstreamStateFile(t *testing.T) {
	want, err := os.ReadFile(filepath.Join("testdata", "upstream_memory_manager_state"))
	testutil.Must(t, err)
	root := t.TempDir()
	testutil.Must(t, os.WriteFile(filepath.Join(root, state.File), want, 0o600))
	m := newStatic(t, twoNodes(), root)
	if n := m.NUMANodes("pod-a", "c1"); len(n) != 1 || n[0] != 1 {
		t.Fatalf("pod-a's memory on %v", n)
	}
	got, err := m.state.Encode()
	testutil.Must(t, err)
	if string(got) != strings.TrimSpace(string(want)) {
		t.Fatalf("nodelet writes\n%s\nthe kubelet\n%s", got, want)
	}
	// On a machine with less memory the recorded state does not fit.
	small := numatest.Machine(numatest.Shape{Sockets: 2, CoresPerSocket: 2, ThreadsPerCore: 1, MemoryPerNode: 2 << 30, HugePagesPerNode: map[int64]int64{2 << 20: 0}})
	_, err = New(Options{Policy: PolicyStatic, Topology: small, RootDir: root, Reserved: []kubeletv1beta1.MemoryReservation{reservation(0, "512Mi")},
		NodeReservation: v1.ResourceList{v1.ResourceMemory: resource.MustParse("512Mi")}})
	if err == nil || !strings.Contains(err.Error(), "drain it and remove the file") {
		t.Fatalf("smaller machine: %v", err)
	}
}
