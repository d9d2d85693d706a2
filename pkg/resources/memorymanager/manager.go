// Package memorymanager is the memory manager (memoryManagerPolicy):
// with the Static policy, a Guaranteed pod's containers get their memory
// and huge pages on the fewest NUMA nodes that hold them (aligned with
// their CPUs and devices by the topology manager), and run with their
// cpuset.mems set to those nodes, as the upstream kubelet's memory
// manager does. reservedMemory keeps memory of each node for the system.
// With None, it does nothing.
//
// The machine's memory per node and type (total, reserved for the
// system, allocatable, given to containers, free) and each container's
// blocks are kept in <root>/memory_manager_state, in upstream's format.
// A node serves either single-node allocations or the allocations of
// one group of nodes, never both (upstream's rule, so that a multi-node
// container's memory is not squeezed by single-node ones).
package memorymanager

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/resources/memorymanager/state"
	"github.com/nodelet/nodelet/pkg/resources/numa"
	"github.com/nodelet/nodelet/pkg/resources/topologymanager"
)

// Policies, as memoryManagerPolicy names them.
const (
	PolicyNone   = "None"
	PolicyStatic = "Static"
)

// Options configure a Manager.
type Options struct {
	Policy   string
	Topology *numa.Topology
	// Reserved is reservedMemory: memory kept for the system, per NUMA
	// node and type.
	Reserved []kubeletv1beta1.MemoryReservation
	// NodeReservation is what node allocatable keeps back (kubeReserved,
	// systemReserved and the hard eviction threshold); reservedMemory must
	// add up to it for memory and each huge page size.
	NodeReservation v1.ResourceList
	RootDir         string
}

// Manager is the memory manager.
type Manager struct {
	path   string
	static *static // nil with None

	mu    sync.Mutex
	state *state.State
}

// New checks reservedMemory, reads the state and checks it against the
// machine.
func New(o Options) (*Manager, error) {
	m := &Manager{path: filepath.Join(o.RootDir, state.File)}
	switch o.Policy {
	case PolicyNone:
		if len(o.Reserved) > 0 {
			return nil, fmt.Errorf("reservedMemory needs memoryManagerPolicy Static")
		}
	case PolicyStatic:
		m.static = &static{topo: o.Topology, reuse: map[string]map[topologymanager.Mask]map[v1.ResourceName]uint64{}}
	default:
		return nil, fmt.Errorf("memoryManagerPolicy %q is not one of None, Static", o.Policy)
	}
	reserved, err := perNode(o.Topology, o.Reserved, o.NodeReservation, m.static != nil)
	if err != nil {
		return nil, err
	}
	s, err := state.Load(m.path)
	if err != nil {
		return nil, err
	}
	want := state.NUMANodeMap{}
	if m.static != nil {
		want = defaultMachine(o.Topology, reserved)
	}
	if s == nil {
		s = &state.State{Policy: o.Policy, Machine: want, Entries: state.ContainerMemoryAssignments{}}
	} else if err := check(s, o.Policy, want); err != nil {
		return nil, fmt.Errorf("memory manager state %s does not fit this node (drain it and remove the file): %w", m.path, err)
	}
	m.state = s
	return m, s.Save(m.path)
}

// perNode turns reservedMemory into bytes per node and type, checking
// (for Static) that it adds up to what node allocatable keeps back.
func perNode(topo *numa.Topology, reservations []kubeletv1beta1.MemoryReservation, nodeReservation v1.ResourceList, static bool) (map[int]map[v1.ResourceName]uint64, error) {
	out := map[int]map[v1.ResourceName]uint64{}
	totals := map[v1.ResourceName]*resource.Quantity{}
	for _, r := range reservations {
		if _, ok := topo.Node(int(r.NumaNode)); !ok {
			return nil, fmt.Errorf("reservedMemory references NUMA node %d, which this machine does not have", r.NumaNode)
		}
		for name, q := range r.Limits {
			if !isMemoryResource(name) {
				return nil, fmt.Errorf("reservedMemory: %q is not memory or huge pages", name)
			}
			if out[int(r.NumaNode)] == nil {
				out[int(r.NumaNode)] = map[v1.ResourceName]uint64{}
			}
			out[int(r.NumaNode)][name] += uint64(q.Value())
			if totals[name] == nil {
				totals[name] = resource.NewQuantity(0, resource.BinarySI)
			}
			totals[name].Add(q)
		}
	}
	if !static {
		return out, nil
	}
	for name := range nodeReservation {
		if isMemoryResource(name) && totals[name] == nil {
			totals[name] = resource.NewQuantity(0, resource.BinarySI)
		}
	}
	for name, total := range totals {
		want := nodeReservation[name]
		if total.Cmp(want) != 0 {
			return nil, fmt.Errorf("reservedMemory: the total amount %q of type %q is not equal to the value %q determined by node allocatable (kubeReserved, systemReserved and the hard eviction threshold)", total.String(), name, want.String())
		}
	}
	return out, nil
}

// check compares a state read back with what the machine and the
// recorded blocks make of it.
func check(s *state.State, policy string, empty state.NUMANodeMap) error {
	if s.Policy != policy {
		return fmt.Errorf("it was written for policy %q, not the configured %q", s.Policy, policy)
	}
	want := empty.Clone()
	for _, cs := range s.Entries {
		for _, blocks := range cs {
			for _, b := range blocks {
				take(want, b.NUMAAffinity, b.Type, b.Size)
			}
		}
	}
	if !reflect.DeepEqual(normalized(want), normalized(s.Machine)) {
		return fmt.Errorf("the machine state it records differs from this machine with the recorded containers' memory")
	}
	return nil
}

func normalized(m state.NUMANodeMap) state.NUMANodeMap {
	c := m.Clone()
	for _, n := range c {
		sort.Ints(n.Cells)
	}
	return c
}

// TopologyHints implements topologymanager.HintProvider.
func (m *Manager) TopologyHints(pod *v1.Pod, c *v1.Container) map[string][]topologymanager.Hint {
	req := requests(pod, c)
	if m.static == nil || len(req) == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if blocks, ok := m.state.Entries[string(pod.UID)][c.Name]; ok {
		return regenerated(blocks, req)
	}
	return m.static.hints(m.state.Machine, pod, req)
}

// regenerated: a container admitted before (nodelet restarted) is where
// it is.
func regenerated(blocks []state.Block, req map[v1.ResourceName]uint64) map[string][]topologymanager.Hint {
	out := map[string][]topologymanager.Hint{}
	for name := range req {
		out[string(name)] = []topologymanager.Hint{}
	}
	if len(blocks) != len(req) {
		return nil
	}
	for _, b := range blocks {
		if _, ok := req[b.Type]; !ok || req[b.Type] != b.Size {
			return out
		}
		out[string(b.Type)] = []topologymanager.Hint{{NUMANodes: topologymanager.NewMask(b.NUMAAffinity...), Preferred: true}}
	}
	return out
}

// PodTopologyHints implements topologymanager.HintProvider: the pod's
// peak memory (the largest init container, or all app containers).
func (m *Manager) PodTopologyHints(pod *v1.Pod) map[string][]topologymanager.Hint {
	req := podRequests(pod)
	if m.static == nil || len(req) == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.static.hints(m.state.Machine, pod, req)
}

func podRequests(pod *v1.Pod) map[v1.ResourceName]uint64 {
	apps, peak := map[v1.ResourceName]uint64{}, map[v1.ResourceName]uint64{}
	for i := range pod.Spec.Containers {
		for n, v := range requests(pod, &pod.Spec.Containers[i]) {
			apps[n] += v
		}
	}
	for i := range pod.Spec.InitContainers {
		for n, v := range requests(pod, &pod.Spec.InitContainers[i]) {
			peak[n] = max(peak[n], v)
		}
	}
	for n, v := range apps {
		peak[n] = max(peak[n], v)
	}
	return peak
}

// Allocate implements topologymanager.HintProvider.
func (m *Manager) Allocate(pod *v1.Pod, c *v1.Container, affinity topologymanager.Hint) error {
	req := requests(pod, c)
	if m.static == nil || len(req) == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	uid := string(pod.UID)
	if blocks, ok := m.state.Entries[uid][c.Name]; ok {
		m.static.updateReuse(pod, c, blocks)
		return nil
	}
	mask, err := m.static.placement(m.state.Machine, pod, req, affinity)
	if err != nil {
		return err
	}
	machine := m.state.Machine.Clone()
	var blocks []state.Block
	for _, name := range sortedNames(req) {
		size := req[name]
		blocks = append(blocks, state.Block{NUMAAffinity: mask.IDs(), Type: name, Size: size})
		size -= min(size, m.static.reusable(pod, mask, name))
		take(machine, mask.IDs(), name, size)
	}
	m.static.updateReuse(pod, c, blocks)
	m.state.Machine = machine
	if m.state.Entries[uid] == nil {
		m.state.Entries[uid] = map[string][]state.Block{}
	}
	m.state.Entries[uid][c.Name] = blocks
	m.static.shrinkInitBlocks(m.state, pod, c, blocks)
	klog.InfoS("Memory allocated on NUMA nodes", "pod", klog.KObj(pod), "podUID", pod.UID, "container", c.Name, "numaNodes", mask)
	return m.state.Save(m.path)
}

func sortedNames(req map[v1.ResourceName]uint64) []v1.ResourceName {
	out := make([]v1.ResourceName, 0, len(req))
	for n := range req {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// PreCreateContainer pins the container's memory to its NUMA nodes.
func (m *Manager) PreCreateContainer(_ context.Context, pod *v1.Pod, c *v1.Container, cfg *runtimeapi.ContainerConfig) error {
	if m.static == nil || cfg.Linux == nil {
		return nil
	}
	nodes := m.NUMANodes(pod.UID, c.Name)
	if len(nodes) == 0 {
		return nil
	}
	if cfg.Linux.Resources == nil {
		cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{}
	}
	s := make([]string, len(nodes))
	for i, n := range nodes {
		s[i] = strconv.Itoa(n)
	}
	cfg.Linux.Resources.CpusetMems = strings.Join(s, ",")
	return nil
}

// PreStartContainer: the init containers before this one have finished,
// so their memory goes back (a sidecar's stays).
func (m *Manager) PreStartContainer(_ context.Context, pod *v1.Pod, c *v1.Container, _ string) error {
	if m.static == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	released := false
	for i := range pod.Spec.InitContainers {
		ic := &pod.Spec.InitContainers[i]
		if ic.Name == c.Name {
			break
		}
		if !podutil.IsRestartableInitContainer(ic) {
			released = m.releaseLocked(string(pod.UID), ic.Name) || released
		}
	}
	if released {
		return m.state.Save(m.path)
	}
	return nil
}

func (m *Manager) releaseLocked(pod, container string) bool {
	blocks, ok := m.state.Entries[pod][container]
	if !ok {
		return false
	}
	delete(m.state.Entries[pod], container)
	if len(m.state.Entries[pod]) == 0 {
		delete(m.state.Entries, pod)
	}
	give(m.state.Machine, blocks)
	return true
}

// RetainActive gives back the memory of every pod not active.
func (m *Manager) RetainActive(active []*v1.Pod) {
	if m.static == nil {
		return
	}
	keep := podutil.UIDs(active)
	m.mu.Lock()
	defer m.mu.Unlock()
	released := false
	for pod, cs := range m.state.Entries {
		if keep[types.UID(pod)] {
			continue
		}
		for name := range cs {
			released = m.releaseLocked(pod, name) || released
		}
		klog.InfoS("Released the memory of a pod no longer active", "podUID", pod)
	}
	if released {
		if err := m.state.Save(m.path); err != nil {
			klog.ErrorS(err, "Failed to write the memory manager state")
		}
	}
}

// NUMANodes are the nodes a container's memory is on.
func (m *Manager) NUMANodes(pod types.UID, container string) []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	var mask topologymanager.Mask
	for _, b := range m.state.Entries[string(pod)][container] {
		mask |= topologymanager.NewMask(b.NUMAAffinity...)
	}
	return mask.IDs()
}

// ContainerMemory are a container's blocks (the pod-resources API).
func (m *Manager) ContainerMemory(pod types.UID, container string) []state.Block {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]state.Block(nil), m.state.Entries[string(pod)][container]...)
}

// AllocatableMemory is each node's allocatable memory per type.
func (m *Manager) AllocatableMemory() []state.Block {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []state.Block
	for _, id := range m.state.Machine.NodeIDs() {
		n := m.state.Machine[id]
		for _, name := range sortedTypes(n.MemoryMap) {
			if t := n.MemoryMap[name]; t.Allocatable > 0 {
				out = append(out, state.Block{NUMAAffinity: []int{id}, Type: name, Size: t.Allocatable})
			}
		}
	}
	return out
}

func sortedTypes(m map[v1.ResourceName]*state.MemoryTable) []v1.ResourceName {
	out := make([]v1.ResourceName, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// ResizeInfeasible: under Static, a Guaranteed pod's memory stays where
// it was placed, as upstream without InPlacePodVerticalScalingExclusiveMemory.
func (m *Manager) ResizeInfeasible(desired, allocated *v1.Pod) string {
	if m.static == nil || podutil.QOSClass(desired) != v1.PodQOSGuaranteed || !podutil.RequestChanged(desired, allocated, v1.ResourceMemory) {
		return ""
	}
	return `Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "Static"`
}
