package cpumanager

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/internal/numatest"
	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/pkg/resources/numa"
	"github.com/nodelet/nodelet/pkg/resources/topologymanager"
)

// dualSocketHT is upstream's topoDualSocketHT: 12 CPUs, 2 sockets of 3
// cores, 2 threads per core; core c is CPUs c and c+6, on socket c%2,
// each socket a NUMA node.
func dualSocketHT() *numa.Topology {
	t := &numa.Topology{CPUs: numa.CPUDetails{}}
	for cpu := 0; cpu < 12; cpu++ {
		core := cpu % 6
		t.CPUs[cpu] = numa.CPUInfo{Core: core, Socket: core % 2, NUMANode: core % 2}
	}
	t.Nodes = []numa.Node{{ID: 0, CPUs: cpuset.New(0, 2, 4, 6, 8, 10)}, {ID: 1, CPUs: cpuset.New(1, 3, 5, 7, 9, 11)}}
	return t
}

// TestTakeByTopology is the golden table of assignments: a topology, the
// free CPUs and a request, and the CPUs the packed algorithm picks.
// The first three are upstream's own cases.
func TestTakeByTopology(t *testing.T) {
	twoNUMAPerSocket := numatest.Machine(numatest.Shape{Sockets: 2, CoresPerSocket: 20, ThreadsPerCore: 2, NUMANodesPerSocket: 2})
	thisMachine := numatest.Machine(numatest.Shape{Sockets: 1, CoresPerSocket: 2, ThreadsPerCore: 1})
	for _, tc := range []struct {
		name      string
		topo      *numa.Topology
		free      string
		n         int
		want, err string
	}{
		{"one CPU: the fuller socket's first free core", dualSocketHT(), "1-5,7-11", 1, "2", ""},
		{"8 CPUs: a whole NUMA node, then a whole core", dualSocketHT(), "0-11", 8, "0-2,4,6-8,10", ""},
		{"64 of 80: a socket, a node, two cores", twoNUMAPerSocket, "0-79", 64, "0-31,40-71", ""},
		{"two CPUs: a whole core", dualSocketHT(), "0-11", 2, "0,6", ""},
		{"three CPUs: a core, then a thread of the same socket", dualSocketHT(), "0-11", 3, "0,2,6", ""},
		{"a half-used core is filled first", dualSocketHT(), "1-11", 1, "6", ""},
		{"the last free CPU", thisMachine, "1", 1, "1", ""},
		{"too many", thisMachine, "1", 2, "", "not enough cpus available to satisfy request: requested=2, available=1"},
	} {
		free, _ := cpuset.Parse(tc.free)
		got, err := takeByTopology(tc.topo, free, tc.n)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%s: %v, want %s", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("%s: %s (%v), want %s", tc.name, got, err, tc.want)
		}
	}
}

func pod(uid string, qos string, containers ...v1.Container) *v1.Pod {
	p := &v1.Pod{}
	p.Name, p.Namespace, p.UID = uid, "ns", types.UID(uid)
	p.Spec.Containers = containers
	_ = qos
	return p
}

func ctr(name, cpu, mem string) v1.Container {
	c := v1.Container{Name: name}
	if cpu != "" {
		r := v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(mem)}
		c.Resources = v1.ResourceRequirements{Requests: r, Limits: r}
	}
	return c
}

type updater struct {
	mu      sync.Mutex
	updates map[string]string
	gone    map[string]bool
}

func (u *updater) UpdateContainerResources(_ context.Context, id string, l *runtimeapi.LinuxContainerResources) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.gone[id] {
		return errors.New("container not found")
	}
	u.updates[id] = l.CpusetCpus
	return nil
}

func (u *updater) get(id string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.updates[id]
}

func newStaticManager(t *testing.T, topo *numa.Topology, reserved string, opts map[string]string) (*Manager, *updater, string) {
	t.Helper()
	root := t.TempDir()
	u := &updater{updates: map[string]string{}, gone: map[string]bool{}}
	r, _ := cpuset.Parse(reserved)
	m, err := New(Options{Policy: PolicyStatic, PolicyOptions: opts, Topology: topo, Reserved: r, NumReserved: r.Size(), RootDir: root,
		ReconcilePeriod: 10 * time.Second, Runtime: u, Clock: testingclock.NewFakeClock(time.Now())})
	if err != nil {
		t.Fatal(err)
	}
	return m, u, root
}

func config() *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{}}}
}

// TestStaticOnThisMachinesShape is the integration test's case on its
// 2-CPU shape: CPU 0 reserved, a Guaranteed 1-CPU container gets CPU 1
// alone, a BestEffort one CPU 0; once the pod is gone, CPU 1 is shared
// again, and the BestEffort container is updated to both.
func TestStaticOnThisMachinesShape(t *testing.T) {
	m, u, root := newStaticManager(t, numatest.Machine(numatest.Shape{Sockets: 1, CoresPerSocket: 2, ThreadsPerCore: 1}), "0", nil)
	g := pod("g", "", ctr("c", "1", "64Mi"))
	be := pod("be", "", ctr("c", "", ""))
	for _, p := range []*v1.Pod{g, be} {
		if err := m.Allocate(p, &p.Spec.Containers[0], topologymanager.Hint{}); err != nil {
			t.Fatal(err)
		}
	}
	gc, bc := config(), config()
	testutil.Must(t, m.PreCreateContainer(context.Background(), g, &g.Spec.Containers[0], gc))
	testutil.Must(t, m.PreCreateContainer(context.Background(), be, &be.Spec.Containers[0], bc))
	if gc.Linux.Resources.CpusetCpus != "1" || bc.Linux.Resources.CpusetCpus != "0" {
		t.Fatalf("cpusets: guaranteed %q, best effort %q", gc.Linux.Resources.CpusetCpus, bc.Linux.Resources.CpusetCpus)
	}
	testutil.Must(t, m.PreStartContainer(context.Background(), be, &be.Spec.Containers[0], "be-id"))
	if got := m.ExclusiveCPUs("g", "c"); got.String() != "1" || m.AllocatableCPUs().String() != "1" {
		t.Fatalf("exclusive %s, allocatable %s", got, m.AllocatableCPUs())
	}
	// The state is on disk before the pod runs.
	reread, err := loadState(filepath.Join(root, StateFile), PolicyStatic)
	if err != nil || reread.defaultSet.String() != "0" || reread.assignments["g"]["c"].String() != "1" {
		t.Fatalf("state on disk %+v %v", reread, err)
	}

	m.RetainActive([]*v1.Pod{be})
	if m.SharedPool().String() != "0-1" {
		t.Fatalf("shared pool after the pod went: %s", m.SharedPool())
	}
	m.reconcile(context.Background())
	if got := u.get("be-id"); got != "0-1" {
		t.Fatalf("shared container updated to %q", got)
	}
}

// TestReconcileLoop: the loop updates the shared containers when the
// pool changes, without waiting for the period, and forgets containers
// the runtime no longer has.
func TestReconcileLoop(t *testing.T) {
	m, u, _ := newStaticManager(t, numatest.Machine(numatest.Shape{Sockets: 1, CoresPerSocket: 4, ThreadsPerCore: 1}), "0", nil)
	be := pod("be", "", ctr("c", "", ""))
	testutil.Must(t, m.PreStartContainer(context.Background(), be, &be.Spec.Containers[0], "be-id"))
	testutil.Must(t, m.PreStartContainer(context.Background(), be, &v1.Container{Name: "old"}, "dead-id"))
	u.gone["dead-id"] = true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	g := pod("g", "", ctr("c", "2", "64Mi"))
	testutil.Must(t, m.Allocate(g, &g.Spec.Containers[0], topologymanager.Hint{}))
	testutil.WaitFor(t, "the shared container moved off the exclusive CPUs", func() bool { return u.get("be-id") == "0,3" })
	testutil.WaitFor(t, "the dead container forgotten", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		_, ok := m.running["dead-id"]
		return !ok
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestRunningAtStartReconciled: after a restart, the containers already
// running are reconciled too: the shared one gets the pool as it is now,
// the exclusive one keeps its CPU (as the state file says).
func TestRunningAtStartReconciled(t *testing.T) {
	topo := numatest.Machine(numatest.Shape{Sockets: 1, CoresPerSocket: 2, ThreadsPerCore: 1})
	first, _, root := newStaticManager(t, topo, "0", nil)
	g := pod("g", "", ctr("c", "1", "64Mi"))
	testutil.Must(t, first.Allocate(g, &g.Spec.Containers[0], topologymanager.Hint{}))

	u := &updater{updates: map[string]string{}, gone: map[string]bool{}}
	m, err := New(Options{Policy: PolicyStatic, Topology: topo, Reserved: cpuset.New(0), NumReserved: 1, RootDir: root,
		ReconcilePeriod: 10 * time.Second, Runtime: u, Clock: testingclock.NewFakeClock(time.Now()),
		RunningAtStart: []RunningContainer{{ID: "be-id", Pod: "be", Name: "c"}, {ID: "g-id", Pod: "g", Name: "c"}}})
	if err != nil {
		t.Fatal(err)
	}
	m.reconcile(context.Background())
	if be, gc := u.get("be-id"), u.get("g-id"); be != "0" || gc != "1" {
		t.Fatalf("after the restart: shared container %q, exclusive %q; want 0 and 1", be, gc)
	}
}

// TestFullPhysicalCPUsOnly: whole cores or nothing.
func TestFullPhysicalCPUsOnly(t *testing.T) {
	m, _, _ := newStaticManager(t, dualSocketHT(), "0", map[string]string{OptionFullPCPUsOnly: "true"})
	odd := pod("odd", "", ctr("c", "3", "64Mi"))
	err := m.Allocate(odd, &odd.Spec.Containers[0], topologymanager.Hint{})
	var smt SMTAlignmentError
	if !errors.As(err, &smt) || err.Error() != "SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2" {
		t.Fatalf("3 CPUs: %v", err)
	}
	even := pod("even", "", ctr("c", "4", "64Mi"))
	testutil.Must(t, m.Allocate(even, &even.Spec.Containers[0], topologymanager.Hint{}))
	// CPU 0 is reserved, so its sibling 6 is never handed out.
	if got := m.ExclusiveCPUs("even", "c"); got.String() != "2,4,8,10" {
		t.Fatalf("4 CPUs: %s", got)
	}
	big := pod("big", "", ctr("c", "8", "64Mi"))
	if err := m.Allocate(big, &big.Spec.Containers[0], topologymanager.Hint{}); err == nil ||
		err.Error() != "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = 6, requested CPUs = 8, CPUs per core = 2" {
		t.Fatalf("8 CPUs: %v", err)
	}
}

// TestHintsAndAffinity: hints name the narrowest NUMA nodes that fit,
// and an allocation follows the topology manager's affinity.
func TestHintsAndAffinity(t *testing.T) {
	m, _, _ := newStaticManager(t, dualSocketHT(), "0", nil)
	p := pod("p", "", ctr("c", "2", "64Mi"))
	hints := m.TopologyHints(p, &p.Spec.Containers[0])["cpu"]
	var got []string
	for _, h := range hints {
		got = append(got, h.String())
	}
	if s := strings.Join(got, " "); s != "{0} preferred=true {1} preferred=true {0,1} preferred=false" {
		t.Fatalf("hints %s", s)
	}
	testutil.Must(t, m.Allocate(p, &p.Spec.Containers[0], topologymanager.Hint{NUMANodes: topologymanager.NewMask(1), Preferred: true}))
	if got := m.ExclusiveCPUs("p", "c"); got.String() != "1,7" {
		t.Fatalf("allocated %s, want a core of node 1", got)
	}
	// Not Guaranteed, or not whole CPUs: no preference.
	frac := pod("f", "", ctr("c", "1500m", "64Mi"))
	if h := m.TopologyHints(frac, &frac.Spec.Containers[0]); h != nil {
		t.Fatalf("fractional CPUs: %v", h)
	}
}

// TestInitContainerCPUsReused: an app container takes the CPUs its pod's
// init container had; a sidecar's are its own.
func TestInitContainerCPUsReused(t *testing.T) {
	m, _, _ := newStaticManager(t, numatest.Machine(numatest.Shape{Sockets: 1, CoresPerSocket: 4, ThreadsPerCore: 1}), "0", nil)
	p := pod("p", "", ctr("app", "2", "64Mi"))
	p.Spec.InitContainers = []v1.Container{ctr("init", "2", "64Mi")}
	for _, c := range []*v1.Container{&p.Spec.InitContainers[0], &p.Spec.Containers[0]} {
		testutil.Must(t, m.Allocate(p, c, topologymanager.Hint{}))
	}
	if i, a := m.ExclusiveCPUs("p", "init"), m.ExclusiveCPUs("p", "app"); !i.Equals(a) || m.SharedPool().String() != "0,3" {
		t.Fatalf("init %s, app %s, shared %s", i, a, m.SharedPool())
	}
}

// TestUpstreamStateFiles: the kubelet's own files (v4 and, from kubelets
// before v1.36, v2; written by hack/cluster/tools/checkpoints with
// upstream's code) read, and nodelet writes byte for byte what the
// kubelet writes for the same state.
func TestUpstreamStateFiles(t *testing.T) {
	for _, name := range []string{"upstream_cpu_manager_state", "upstream_cpu_manager_state_v2"} {
		s, err := loadState(filepath.Join("testdata", name), PolicyStatic)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s.defaultSet.String() != "0,3-7" || s.assignments["pod-a"]["c1"].String() != "1-2" {
			t.Fatalf("%s: %+v", name, s)
		}
	}
	s, _ := loadState(filepath.Join("testdata", "upstream_cpu_manager_state"), PolicyStatic)
	got, err := s.encode()
	testutil.Must(t, err)
	want, err := os.ReadFile(filepath.Join("testdata", "upstream_cpu_manager_state"))
	testutil.Must(t, err)
	if string(got) != strings.TrimSpace(string(want)) {
		t.Fatalf("nodelet writes\n%s\nthe kubelet\n%s", got, want)
	}
	if _, err := loadState(filepath.Join("testdata", "upstream_cpu_manager_state"), PolicyNone); err == nil ||
		!strings.Contains(err.Error(), `written for policy "static", not the configured "none"`) {
		t.Fatalf("policy change: %v", err)
	}
	damaged := filepath.Join(t.TempDir(), StateFile)
	testutil.Must(t, os.WriteFile(damaged, []byte(strings.Replace(string(want), `\"1-2\"`, `\"1-3\"`, 1)), 0o600))
	if _, err := loadState(damaged, PolicyStatic); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("damaged file: %v", err)
	}
}

// TestStateMustFitTheNode: a state whose CPUs are not this node's, or
// that shares reserved CPUs away, refuses to start.
func TestStateMustFitTheNode(t *testing.T) {
	root := t.TempDir()
	s := newState(PolicyStatic)
	s.defaultSet = cpuset.New(0, 3, 4, 5, 6, 7)
	s.set("pod-a", "c1", cpuset.New(1, 2))
	testutil.Must(t, s.save(filepath.Join(root, StateFile)))
	o := Options{Policy: PolicyStatic, Topology: numatest.Machine(numatest.Shape{Sockets: 1, CoresPerSocket: 4, ThreadsPerCore: 1}),
		Reserved: cpuset.New(0), NumReserved: 1, RootDir: root, Runtime: &updater{}, Clock: testingclock.NewFakeClock(time.Now())}
	if _, err := New(o); err == nil || !strings.Contains(err.Error(), "drain it and remove the file") {
		t.Fatalf("8-CPU state on a 4-CPU node: %v", err)
	}
	o.Topology = numatest.Machine(numatest.Shape{Sockets: 1, CoresPerSocket: 8, ThreadsPerCore: 1})
	o.Reserved = cpuset.New(1)
	if _, err := New(o); err == nil || !strings.Contains(err.Error(), "not all reserved CPUs 1 are in the shared pool") {
		t.Fatalf("reserved CPU given away: %v", err)
	}
	o.Reserved = cpuset.New(0)
	if _, err := New(o); err != nil {
		t.Fatalf("matching state: %v", err)
	}
	o.NumReserved, o.Reserved = 0, cpuset.New()
	if _, err := New(o); err == nil || !strings.Contains(err.Error(), "requires CPUs reserved") {
		t.Fatalf("nothing reserved: %v", err)
	}
}
