package memorymanager

import (
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/resources/memorymanager/state"
	"github.com/nodelet/nodelet/pkg/resources/numa"
	"github.com/nodelet/nodelet/pkg/resources/topologymanager"
)

func isMemoryResource(name v1.ResourceName) bool {
	return name == v1.ResourceMemory || strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix)
}

// defaultMachine is the machine with nothing allocated: each node's
// memory and huge pages less what reservedMemory keeps for the system
// (huge pages are not regular memory).
func defaultMachine(topo *numa.Topology, reserved map[int]map[v1.ResourceName]uint64) state.NUMANodeMap {
	m := state.NUMANodeMap{}
	for _, n := range topo.Nodes {
		ns := &state.NUMANodeState{MemoryMap: map[v1.ResourceName]*state.MemoryTable{}, Cells: []int{n.ID}}
		var huge uint64
		for size, count := range n.HugePages {
			name := numa.HugePageResource(size)
			total := uint64(size) * uint64(count)
			ns.MemoryMap[name] = table(total, reserved[n.ID][name])
			huge += total
		}
		mem := table(uint64(n.MemoryBytes), reserved[n.ID][v1.ResourceMemory])
		mem.Allocatable -= min(huge, mem.Allocatable)
		mem.Free = mem.Allocatable
		ns.MemoryMap[v1.ResourceMemory] = mem
		m[n.ID] = ns
	}
	return m
}

func table(total, reserved uint64) *state.MemoryTable {
	alloc := total - min(reserved, total)
	return &state.MemoryTable{TotalMemSize: total, SystemReserved: reserved, Allocatable: alloc, Free: alloc}
}

// requests are the container's memory and huge page requests, for the
// memory manager to place: only a Guaranteed pod's, without pod-level
// resources (as upstream without PodLevelResourceManagers).
func requests(pod *v1.Pod, c *v1.Container) map[v1.ResourceName]uint64 {
	if podutil.QOSClass(pod) != v1.PodQOSGuaranteed || pod.Spec.Resources != nil {
		return nil
	}
	out := map[v1.ResourceName]uint64{}
	for name, q := range c.Resources.Requests {
		if isMemoryResource(name) {
			out[name] = uint64(q.Value())
		}
	}
	return out
}

// static is upstream's Static memory manager policy.
type static struct {
	topo *numa.Topology
	// reuse: memory of the pod being admitted that its finished init
	// containers leave to the next containers, by NUMA mask and type.
	reuse map[string]map[topologymanager.Mask]map[v1.ResourceName]uint64
}

// hints lists the node sets whose allocatable memory could hold the
// request and whose free memory (with what the pod may reuse) holds it
// now; a node serves single-node or multi-node allocations, never both.
// The fewest nodes that could ever hold it are preferred.
func (p *static) hints(machine state.NUMANodeMap, pod *v1.Pod, req map[v1.ResourceName]uint64) map[string][]topologymanager.Hint {
	ids := machine.NodeIDs()
	narrowest := len(ids)
	out := map[string][]topologymanager.Hint{}
	topologymanager.IterateMasks(ids, func(mask topologymanager.Mask) {
		nodes := mask.IDs()
		free, alloc := sums(machine, nodes)
		for name, size := range req {
			if alloc[name] < size {
				return
			}
		}
		narrowest = min(narrowest, mask.Count())
		if !groupable(machine, nodes) {
			return
		}
		for name, size := range req {
			if free[name]+p.reusable(pod, mask, name) < size {
				return
			}
		}
		for name := range req {
			out[string(name)] = append(out[string(name)], topologymanager.Hint{NUMANodes: mask})
		}
	})
	for name, hs := range out {
		for i := range hs {
			out[name][i].Preferred = hs[i].NUMANodes.Count() == narrowest
		}
	}
	return out
}

func sums(machine state.NUMANodeMap, nodes []int) (free, alloc map[v1.ResourceName]uint64) {
	free, alloc = map[v1.ResourceName]uint64{}, map[v1.ResourceName]uint64{}
	for _, id := range nodes {
		for name, t := range machine[id].MemoryMap {
			free[name] += t.Free
			alloc[name] += t.Allocatable
		}
	}
	return free, alloc
}

// groupable: the nodes may serve one allocation together. A node in use
// serves either single-node allocations or those of exactly one group.
func groupable(machine state.NUMANodeMap, nodes []int) bool {
	if len(nodes) == 1 {
		return len(machine[nodes[0]].Cells) <= 1
	}
	for _, id := range nodes {
		n := machine[id]
		if n.NumberOfAssignments > 0 && (len(n.Cells) == 1 || !sameGroup(n.Cells, nodes)) {
			return false
		}
	}
	return true
}

func sameGroup(a, b []int) bool {
	a, b = append([]int(nil), a...), append([]int(nil), b...)
	sort.Ints(a)
	sort.Ints(b)
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (p *static) reusable(pod *v1.Pod, mask topologymanager.Mask, name v1.ResourceName) uint64 {
	return p.reuse[string(pod.UID)][mask][name]
}

// best is the preferred hint on the fewest nodes.
func best(hints []topologymanager.Hint) (topologymanager.Hint, bool) {
	var b topologymanager.Hint
	for _, h := range hints {
		switch {
		case b.NUMANodes == 0:
			b = h
		case h.Preferred && !b.Preferred:
			b = h
		case h.Preferred == b.Preferred && (h.NUMANodes.Count() < b.NUMANodes.Count() || (h.NUMANodes.Count() == b.NUMANodes.Count() && h.NUMANodes < b.NUMANodes)):
			b = h
		}
	}
	return b, b.NUMANodes != 0
}

// placement is where the container's memory goes: the topology manager's
// affinity, extended to the smallest set holding it that includes the
// affinity, or without one the best hint.
func (p *static) placement(machine state.NUMANodeMap, pod *v1.Pod, req map[v1.ResourceName]uint64, affinity topologymanager.Hint) (topologymanager.Mask, error) {
	hint := affinity
	if hint.NUMANodes == 0 {
		h, ok := best(p.hints(machine, pod, req)[string(v1.ResourceMemory)])
		if !ok {
			h, ok = best(firstList(p.hints(machine, pod, req)))
		}
		if !ok {
			return 0, fmt.Errorf("[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available")
		}
		if !h.Preferred && affinity.Preferred {
			return 0, fmt.Errorf("[memorymanager] failed to find the default preferred hint")
		}
		hint = h
	}
	if !fits(machine, hint.NUMANodes.IDs(), req) {
		var within []topologymanager.Hint
		for _, h := range firstList(p.hints(machine, pod, req)) {
			if h.NUMANodes&hint.NUMANodes == hint.NUMANodes {
				within = append(within, h)
			}
		}
		ext, ok := best(within)
		if !ok {
			return 0, fmt.Errorf("[memorymanager] failed to find NUMA nodes to extend the current topology hint")
		}
		if !ext.Preferred && hint.Preferred {
			return 0, fmt.Errorf("[memorymanager] failed to find the extended preferred hint")
		}
		hint = ext
	}
	if !groupable(machine, hint.NUMANodes.IDs()) {
		return 0, fmt.Errorf("[memorymanager] preferred hint violates NUMA node allocation")
	}
	return hint.NUMANodes, nil
}

// firstList is the hints of regular memory, or of the one type asked.
func firstList(h map[string][]topologymanager.Hint) []topologymanager.Hint {
	if l, ok := h[string(v1.ResourceMemory)]; ok {
		return l
	}
	for _, l := range h {
		return l
	}
	return nil
}

func fits(machine state.NUMANodeMap, nodes []int, req map[v1.ResourceName]uint64) bool {
	free, _ := sums(machine, nodes)
	for name, size := range req {
		if free[name] < size {
			return false
		}
	}
	return true
}

// take reserves size bytes of a type on the nodes, filling them in order,
// and groups the nodes.
func take(machine state.NUMANodeMap, nodes []int, name v1.ResourceName, size uint64) {
	for _, id := range nodes {
		n := machine[id]
		n.NumberOfAssignments++
		n.Cells = append([]int(nil), nodes...)
		t := n.MemoryMap[name]
		if size == 0 || t == nil || t.Free == 0 {
			continue
		}
		got := min(size, t.Free)
		t.Reserved += got
		t.Free -= got
		size -= got
	}
}

// give returns blocks to the nodes; a node no longer used leaves its
// group.
func give(machine state.NUMANodeMap, blocks []state.Block) {
	for _, b := range blocks {
		size := b.Size
		for _, id := range b.NUMAAffinity {
			n := machine[id]
			if n == nil {
				continue
			}
			n.NumberOfAssignments--
			if n.NumberOfAssignments <= 0 {
				n.NumberOfAssignments, n.Cells = 0, []int{id}
			}
			t := n.MemoryMap[b.Type]
			if size == 0 || t == nil || t.Reserved == 0 {
				continue
			}
			back := min(size, t.Reserved)
			t.Free += back
			t.Reserved -= back
			size -= back
		}
	}
}

// updateReuse: a regular init container's blocks may be reused by the
// containers after it; what an app container takes is used up.
func (p *static) updateReuse(pod *v1.Pod, c *v1.Container, blocks []state.Block) {
	uid := string(pod.UID)
	for k := range p.reuse {
		if k != uid {
			delete(p.reuse, k)
		}
	}
	if regularInit(pod, c) {
		if p.reuse[uid] == nil {
			p.reuse[uid] = map[topologymanager.Mask]map[v1.ResourceName]uint64{}
		}
		for _, b := range blocks {
			mask := topologymanager.NewMask(b.NUMAAffinity...)
			if p.reuse[uid][mask] == nil {
				p.reuse[uid][mask] = map[v1.ResourceName]uint64{}
			}
			p.reuse[uid][mask][b.Type] = max(p.reuse[uid][mask][b.Type], b.Size)
		}
		return
	}
	for _, b := range blocks {
		mask := topologymanager.NewMask(b.NUMAAffinity...)
		if r := p.reuse[uid][mask][b.Type]; r != 0 {
			p.reuse[uid][mask][b.Type] = r - min(r, b.Size)
		}
	}
}

func regularInit(pod *v1.Pod, c *v1.Container) bool {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == c.Name {
			return !podutil.IsRestartableInitContainer(&pod.Spec.InitContainers[i])
		}
	}
	return false
}

// shrinkInitBlocks: memory a container reused from the init containers
// before it is no longer counted to them, so the pod's blocks add up to
// what it holds.
func (p *static) shrinkInitBlocks(s *state.State, pod *v1.Pod, c *v1.Container, blocks []state.Block) {
	uid := string(pod.UID)
	for _, cb := range blocks {
		size := cb.Size
		for i := range pod.Spec.InitContainers {
			ic := &pod.Spec.InitContainers[i]
			if ic.Name == c.Name || size == 0 {
				break
			}
			if podutil.IsRestartableInitContainer(ic) {
				continue
			}
			ib := s.Entries[uid][ic.Name]
			for j := range ib {
				if ib[j].Size == 0 || ib[j].Type != cb.Type || topologymanager.NewMask(ib[j].NUMAAffinity...) != topologymanager.NewMask(cb.NUMAAffinity...) {
					continue
				}
				cut := min(size, ib[j].Size)
				ib[j].Size -= cut
				size -= cut
			}
		}
	}
}
