package cpumanager

import (
	"fmt"
	"sort"

	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/pkg/resources/numa"
)

// takeByTopology picks n of the available CPUs, packed as upstream's
// static policy packs them (its topology-aware best fit): whole NUMA
// nodes and sockets first when the request fills them (the larger of the
// two levels first), then whole cores, then single threads, filling
// partly used cores and the fullest sockets first. Packing keeps the
// remaining free CPUs in whole cores and nodes for later requests.
func takeByTopology(topo *numa.Topology, available cpuset.CPUSet, n int) (cpuset.CPUSet, error) {
	a := &accumulator{topo: topo, free: topo.CPUs.KeepOnly(available), need: n, result: cpuset.New()}
	if a.need <= 0 {
		return a.result, nil
	}
	if a.need > len(a.free) {
		return cpuset.New(), fmt.Errorf("not enough cpus available to satisfy request: requested=%d, available=%d", n, available.Size())
	}
	// NUMA nodes span sockets on some machines, sockets span NUMA nodes
	// on others: the larger unit goes first.
	nodesFirst := topo.CPUs.Sockets().Size() >= topo.CPUs.NUMANodes().Size()
	if nodesFirst {
		a.takeWhole(a.sortedNodes(), topo.CPUs.CPUsInNUMANodes, a.free.CPUsInNUMANodes)
		a.takeWhole(a.sortedSockets(), topo.CPUs.CPUsInSockets, a.free.CPUsInSockets)
	} else {
		a.takeWhole(a.sortedSockets(), topo.CPUs.CPUsInSockets, a.free.CPUsInSockets)
		a.takeWhole(a.sortedNodes(), topo.CPUs.CPUsInNUMANodes, a.free.CPUsInNUMANodes)
	}
	a.takeWhole(a.sortedCores(), topo.CPUs.CPUsInCores, a.free.CPUsInCores)
	for _, cpu := range a.sortedCPUs() {
		if a.need <= 0 {
			break
		}
		a.take(cpuset.New(cpu))
	}
	if a.need > 0 {
		return cpuset.New(), fmt.Errorf("failed to allocate cpus")
	}
	return a.result, nil
}

type accumulator struct {
	topo   *numa.Topology
	free   numa.CPUDetails
	need   int
	result cpuset.CPUSet
}

func (a *accumulator) take(cpus cpuset.CPUSet) {
	a.result = a.result.Union(cpus)
	a.free = a.free.KeepOnly(a.free.CPUs().Difference(cpus))
	a.need -= cpus.Size()
}

// takeWhole takes each unit (node, socket or core) in order whose CPUs
// are all free, while the request needs at least a whole one.
func (a *accumulator) takeWhole(units []int, all, free func(...int) cpuset.CPUSet) {
	for _, u := range units {
		whole := all(u)
		if a.need >= whole.Size() && free(u).Size() == whole.Size() {
			a.take(whole)
		}
	}
}

// order sorts ids by how many free CPUs each holds, fewest first (the
// fullest are filled first), then by ID.
func (a *accumulator) order(ids []int, free func(...int) cpuset.CPUSet) []int {
	sort.Slice(ids, func(i, j int) bool {
		ni, nj := free(ids[i]).Size(), free(ids[j]).Size()
		if ni != nj {
			return ni < nj
		}
		return ids[i] < ids[j]
	})
	return ids
}

func (a *accumulator) sortedNodes() []int {
	if a.topo.CPUs.Sockets().Size() >= a.topo.CPUs.NUMANodes().Size() {
		return a.order(a.free.NUMANodes().List(), a.free.CPUsInNUMANodes)
	}
	var out []int
	for _, s := range a.sortedSockets() {
		out = append(out, a.order(a.free.NUMANodesInSockets(s).List(), a.free.CPUsInNUMANodes)...)
	}
	return out
}

func (a *accumulator) sortedSockets() []int {
	if a.topo.CPUs.Sockets().Size() < a.topo.CPUs.NUMANodes().Size() {
		return a.order(a.free.Sockets().List(), a.free.CPUsInSockets)
	}
	var out []int
	for _, n := range a.sortedNodes() {
		out = append(out, a.order(a.free.SocketsInNUMANodes(n).List(), a.free.CPUsInSockets)...)
	}
	return out
}

// sortedCores orders cores within the lower of the two levels, itself
// ordered.
func (a *accumulator) sortedCores() []int {
	var out []int
	if a.topo.CPUs.Sockets().Size() >= a.topo.CPUs.NUMANodes().Size() {
		for _, s := range a.sortedSockets() {
			out = append(out, a.order(a.free.CoresInSockets(s).List(), a.free.CPUsInCores)...)
		}
		return out
	}
	for _, n := range a.sortedNodes() {
		out = append(out, a.order(a.free.CoresInNUMANodes(n).List(), a.free.CPUsInCores)...)
	}
	return out
}

func (a *accumulator) sortedCPUs() []int {
	var out []int
	for _, c := range a.sortedCores() {
		out = append(out, a.free.CPUsInCores(c).List()...)
	}
	return out
}
