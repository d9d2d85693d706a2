package numa

import "k8s.io/utils/cpuset"

// CPUDetails maps CPU IDs to where they sit. The CPU manager keeps one
// of the free CPUs and asks it which cores, sockets and NUMA nodes they
// fill.
type CPUDetails map[int]CPUInfo

// KeepOnly is the details of the CPUs in cpus alone.
func (d CPUDetails) KeepOnly(cpus cpuset.CPUSet) CPUDetails {
	out := CPUDetails{}
	for cpu, info := range d {
		if cpus.Contains(cpu) {
			out[cpu] = info
		}
	}
	return out
}

// CPUs is every CPU of d.
func (d CPUDetails) CPUs() cpuset.CPUSet {
	ids := make([]int, 0, len(d))
	for cpu := range d {
		ids = append(ids, cpu)
	}
	return cpuset.New(ids...)
}

func (d CPUDetails) collect(keep func(CPUInfo) bool, value func(int, CPUInfo) int) cpuset.CPUSet {
	var ids []int
	for cpu, info := range d {
		if keep(info) {
			ids = append(ids, value(cpu, info))
		}
	}
	return cpuset.New(ids...)
}

func all(CPUInfo) bool { return true }

func in(ids []int, id int) bool {
	for _, v := range ids {
		if v == id {
			return true
		}
	}
	return false
}

// NUMANodes are the NUMA nodes of d's CPUs.
func (d CPUDetails) NUMANodes() cpuset.CPUSet {
	return d.collect(all, func(_ int, i CPUInfo) int { return i.NUMANode })
}

// Sockets are the sockets of d's CPUs.
func (d CPUDetails) Sockets() cpuset.CPUSet {
	return d.collect(all, func(_ int, i CPUInfo) int { return i.Socket })
}

// Cores are the cores of d's CPUs.
func (d CPUDetails) Cores() cpuset.CPUSet {
	return d.collect(all, func(_ int, i CPUInfo) int { return i.Core })
}

// CPUsInNUMANodes are d's CPUs in the NUMA nodes.
func (d CPUDetails) CPUsInNUMANodes(ids ...int) cpuset.CPUSet {
	return d.collect(func(i CPUInfo) bool { return in(ids, i.NUMANode) }, func(cpu int, _ CPUInfo) int { return cpu })
}

// CPUsInSockets are d's CPUs in the sockets.
func (d CPUDetails) CPUsInSockets(ids ...int) cpuset.CPUSet {
	return d.collect(func(i CPUInfo) bool { return in(ids, i.Socket) }, func(cpu int, _ CPUInfo) int { return cpu })
}

// CPUsInCores are d's CPUs in the cores.
func (d CPUDetails) CPUsInCores(ids ...int) cpuset.CPUSet {
	return d.collect(func(i CPUInfo) bool { return in(ids, i.Core) }, func(cpu int, _ CPUInfo) int { return cpu })
}

// CoresInNUMANodes are the cores of d's CPUs in the NUMA nodes.
func (d CPUDetails) CoresInNUMANodes(ids ...int) cpuset.CPUSet {
	return d.collect(func(i CPUInfo) bool { return in(ids, i.NUMANode) }, func(_ int, i CPUInfo) int { return i.Core })
}

// CoresInSockets are the cores of d's CPUs in the sockets.
func (d CPUDetails) CoresInSockets(ids ...int) cpuset.CPUSet {
	return d.collect(func(i CPUInfo) bool { return in(ids, i.Socket) }, func(_ int, i CPUInfo) int { return i.Core })
}

// SocketsInNUMANodes are the sockets of d's CPUs in the NUMA nodes.
func (d CPUDetails) SocketsInNUMANodes(ids ...int) cpuset.CPUSet {
	return d.collect(func(i CPUInfo) bool { return in(ids, i.NUMANode) }, func(_ int, i CPUInfo) int { return i.Socket })
}

// NUMANodesInSockets are the NUMA nodes of d's CPUs in the sockets.
func (d CPUDetails) NUMANodesInSockets(ids ...int) cpuset.CPUSet {
	return d.collect(func(i CPUInfo) bool { return in(ids, i.Socket) }, func(_ int, i CPUInfo) int { return i.NUMANode })
}
