// Package numatest describes machines for tests: a topology built from a
// shape, and the sysfs tree such a machine would show.
package numatest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/pkg/resources/numa"
)

// Shape is a machine: sockets of cores of threads, each socket split in
// NUMANodesPerSocket NUMA nodes (or, with SocketsPerNUMANode, several
// sockets per node), each node with MemoryPerNode bytes.
type Shape struct {
	Sockets, CoresPerSocket, ThreadsPerCore int
	NUMANodesPerSocket                      int
	SocketsPerNUMANode                      int
	MemoryPerNode                           int64
	// HugePagesPerNode maps a page size in bytes to each node's pages.
	HugePagesPerNode map[int64]int64
}

// Machine builds the topology of a shape. CPUs are numbered as Linux
// numbers them on such machines: the first thread of every core first,
// then the second threads (so core c's threads are c and c+cores).
func Machine(s Shape) *numa.Topology {
	if s.NUMANodesPerSocket == 0 {
		s.NUMANodesPerSocket = 1
	}
	cores := s.Sockets * s.CoresPerSocket
	t := &numa.Topology{CPUs: numa.CPUDetails{}, HugePages: map[int64]int64{}}
	nodeCPUs := map[int][]int{}
	for thread := 0; thread < s.ThreadsPerCore; thread++ {
		for core := 0; core < cores; core++ {
			cpu := thread*cores + core
			socket := core / s.CoresPerSocket
			node := socket*s.NUMANodesPerSocket + (core%s.CoresPerSocket)*s.NUMANodesPerSocket/s.CoresPerSocket
			if s.SocketsPerNUMANode > 1 {
				node = socket / s.SocketsPerNUMANode
			}
			t.CPUs[cpu] = numa.CPUInfo{Core: core, Socket: socket, NUMANode: node}
			nodeCPUs[node] = append(nodeCPUs[node], cpu)
		}
	}
	for id := 0; id < len(nodeCPUs); id++ {
		hp := map[int64]int64{}
		for size, n := range s.HugePagesPerNode {
			hp[size] = n
			t.HugePages[size] += n
		}
		// Distances as firmware reports them: 10 to itself, 11 within its
		// socket, 21 across sockets.
		dist := make([]uint64, len(nodeCPUs))
		for other := range dist {
			switch {
			case other == id:
				dist[other] = 10
			case t.CPUs[nodeCPUs[other][0]].Socket == t.CPUs[nodeCPUs[id][0]].Socket:
				dist[other] = 11
			default:
				dist[other] = 21
			}
		}
		t.Nodes = append(t.Nodes, numa.Node{ID: id, CPUs: cpuset.New(nodeCPUs[id]...), MemoryBytes: s.MemoryPerNode, HugePages: hp, Distances: dist})
		t.MemoryBytes += s.MemoryPerNode
	}
	return t
}

// WriteSysfs writes the files numa.Discover reads for t under root.
func WriteSysfs(root string, t *numa.Topology) error {
	sys := filepath.Join(root, "sys", "devices", "system")
	files := map[string]string{
		filepath.Join(sys, "cpu", "online"):    t.CPUs.CPUs().String(),
		filepath.Join(sys, "node", "online"):   cpuset.New(t.NodeIDs()...).String(),
		filepath.Join(root, "proc", "meminfo"): fmt.Sprintf("MemTotal:       %d kB\nMemFree:        1 kB\n", t.MemoryBytes>>10),
	}
	for cpu, info := range t.CPUs {
		dir := filepath.Join(sys, "cpu", fmt.Sprintf("cpu%d", cpu), "topology")
		files[filepath.Join(dir, "physical_package_id")] = fmt.Sprint(info.Socket)
		files[filepath.Join(dir, "core_id")] = fmt.Sprint(info.Core)
		files[filepath.Join(dir, "thread_siblings_list")] = t.CPUs.CPUsInCores(info.Core).String()
	}
	for _, n := range t.Nodes {
		dir := filepath.Join(sys, "node", fmt.Sprintf("node%d", n.ID))
		files[filepath.Join(dir, "cpulist")] = n.CPUs.String()
		files[filepath.Join(dir, "distance")] = strings.Trim(fmt.Sprint(n.Distances), "[]")
		files[filepath.Join(dir, "meminfo")] = fmt.Sprintf("Node %d MemTotal:       %d kB\nNode %d MemFree: 1 kB\n", n.ID, n.MemoryBytes>>10, n.ID)
		for size, count := range n.HugePages {
			files[filepath.Join(dir, "hugepages", fmt.Sprintf("hugepages-%dkB", size>>10), "nr_hugepages")] = fmt.Sprint(count)
		}
	}
	for size, count := range t.HugePages {
		files[filepath.Join(root, "sys", "kernel", "mm", "hugepages", fmt.Sprintf("hugepages-%dkB", size>>10), "nr_hugepages")] = fmt.Sprint(count)
	}
	for path, body := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(strings.TrimSpace(body)+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}
