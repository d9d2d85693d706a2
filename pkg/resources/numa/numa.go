// Package numa reads the node's layout from sysfs: its online CPUs with
// the core, socket and NUMA node of each, the memory and huge pages of
// each NUMA node, and the machine's huge pages. The CPU, memory and
// topology managers place containers on it, and the node status reports
// huge pages from it.
//
// Everything is read under a root directory ("/" on a node), so tests
// describe a machine as a directory tree.
package numa

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/cpuset"
)

// CPUInfo places one CPU: its core (the lowest CPU ID of the core's
// threads, unique on the machine, as upstream numbers cores), socket
// and NUMA node.
type CPUInfo struct {
	Core, Socket, NUMANode int
}

// Node is one NUMA node: its CPUs, memory and huge pages.
type Node struct {
	ID          int
	CPUs        cpuset.CPUSet
	MemoryBytes int64
	// HugePages maps a page size in bytes to the number of pages the
	// node has.
	HugePages map[int64]int64
	// Distances are the relative distances to each node, by node ID
	// (the kernel's SLIT table: 10 to itself); nil if unknown.
	Distances []uint64
}

// Topology is the machine.
type Topology struct {
	CPUs  CPUDetails
	Nodes []Node
	// MemoryBytes is the machine's memory (MemTotal).
	MemoryBytes int64
	// HugePages maps a page size in bytes to the machine's pages of it.
	HugePages map[int64]int64
}

// Discover reads the machine under root.
func Discover(root string) (*Topology, error) {
	sys := filepath.Join(root, "sys", "devices", "system")
	online, err := readCPUSet(filepath.Join(sys, "cpu", "online"))
	if err != nil {
		return nil, fmt.Errorf("reading the online CPUs: %w", err)
	}
	t := &Topology{CPUs: CPUDetails{}}
	if t.MemoryBytes, err = memTotal(filepath.Join(root, "proc", "meminfo")); err != nil {
		return nil, err
	}
	if t.HugePages, err = hugePages(filepath.Join(root, "sys", "kernel", "mm", "hugepages")); err != nil {
		return nil, err
	}
	if err := t.readNodes(sys, online); err != nil {
		return nil, err
	}
	for _, cpu := range online.List() {
		info, err := readCPU(filepath.Join(sys, "cpu", fmt.Sprintf("cpu%d", cpu)), cpu)
		if err != nil {
			return nil, err
		}
		info.NUMANode = t.nodeOf(cpu)
		t.CPUs[cpu] = info
	}
	return t, nil
}

// readNodes reads the NUMA nodes; a kernel without NUMA has one node
// holding every CPU and all memory.
func (t *Topology) readNodes(sys string, online cpuset.CPUSet) error {
	ids, err := readCPUSet(filepath.Join(sys, "node", "online"))
	if errors.Is(err, os.ErrNotExist) {
		t.Nodes = []Node{{ID: 0, CPUs: online, MemoryBytes: t.MemoryBytes, HugePages: t.HugePages}}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the NUMA nodes: %w", err)
	}
	for _, id := range ids.List() {
		dir := filepath.Join(sys, "node", fmt.Sprintf("node%d", id))
		cpus, err := readCPUSet(filepath.Join(dir, "cpulist"))
		if err != nil {
			return fmt.Errorf("NUMA node %d: %w", id, err)
		}
		mem, err := nodeMemTotal(filepath.Join(dir, "meminfo"))
		if err != nil {
			return fmt.Errorf("NUMA node %d: %w", id, err)
		}
		hp, err := hugePages(filepath.Join(dir, "hugepages"))
		if err != nil {
			return fmt.Errorf("NUMA node %d: %w", id, err)
		}
		t.Nodes = append(t.Nodes, Node{ID: id, CPUs: cpus.Intersection(online), MemoryBytes: mem, HugePages: hp,
			Distances: readDistances(filepath.Join(dir, "distance"))})
	}
	return nil
}

func (t *Topology) nodeOf(cpu int) int {
	for _, n := range t.Nodes {
		if n.CPUs.Contains(cpu) {
			return n.ID
		}
	}
	return 0
}

func readCPU(dir string, cpu int) (CPUInfo, error) {
	socket, err := readInt(filepath.Join(dir, "topology", "physical_package_id"))
	if err != nil {
		return CPUInfo{}, fmt.Errorf("CPU %d: %w", cpu, err)
	}
	siblings, err := readCPUSet(filepath.Join(dir, "topology", "thread_siblings_list"))
	if err != nil || siblings.IsEmpty() {
		// Without the list, the CPU is a core of its own.
		siblings = cpuset.New(cpu)
	}
	return CPUInfo{Core: siblings.List()[0], Socket: socket}, nil
}

// NodeIDs lists the NUMA nodes' IDs, ascending.
func (t *Topology) NodeIDs() []int {
	ids := make([]int, len(t.Nodes))
	for i, n := range t.Nodes {
		ids[i] = n.ID
	}
	sort.Ints(ids)
	return ids
}

// Node returns the NUMA node with the ID.
func (t *Topology) Node(id int) (Node, bool) {
	for _, n := range t.Nodes {
		if n.ID == id {
			return n, true
		}
	}
	return Node{}, false
}

// CPUsPerCore is the number of threads of a core (hyperthreads).
func (t *Topology) CPUsPerCore() int {
	cores := t.CPUs.Cores().Size()
	if cores == 0 {
		return 0
	}
	return len(t.CPUs) / cores
}

// CPUsPerSocket is the number of CPUs of a socket.
func (t *Topology) CPUsPerSocket() int {
	sockets := t.CPUs.Sockets().Size()
	if sockets == 0 {
		return 0
	}
	return len(t.CPUs) / sockets
}

func readCPUSet(path string) (cpuset.CPUSet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return cpuset.New(), err
	}
	return cpuset.Parse(strings.TrimSpace(string(b)))
}

// readDistances reads a node's distance line; nil when unreadable.
func readDistances(path string) []uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []uint64
	for _, f := range strings.Fields(string(b)) {
		d, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return nil
		}
		out = append(out, d)
	}
	return out
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// memTotal reads MemTotal from /proc/meminfo.
func memTotal(path string) (int64, error) {
	return meminfoField(path, "MemTotal:", 0)
}

// nodeMemTotal reads a NUMA node's meminfo ("Node 0 MemTotal: ... kB").
func nodeMemTotal(path string) (int64, error) {
	return meminfoField(path, "MemTotal:", 2)
}

// meminfoField reads a "<name> <value> kB" line whose name is the field
// at index at.
func meminfoField(path, name string, at int) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < at+2 || fields[at] != name {
			continue
		}
		kb, err := strconv.ParseInt(fields[at+1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %s: %w", path, name, err)
		}
		return kb << 10, nil
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no %s line", path, name)
}

// hugePages reads a hugepages directory: one hugepages-<size>kB
// directory per page size, with its nr_hugepages. A missing directory
// means no huge pages.
func hugePages(dir string) (map[int64]int64, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return map[int64]int64{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[int64]int64{}
	for _, e := range entries {
		size, ok := strings.CutPrefix(e.Name(), "hugepages-")
		size, kb := strings.CutSuffix(size, "kB")
		n, err := strconv.ParseInt(size, 10, 64)
		if !ok || !kb || err != nil {
			continue
		}
		count, err := readInt(filepath.Join(dir, e.Name(), "nr_hugepages"))
		if err != nil {
			return nil, fmt.Errorf("huge pages of %skB: %w", size, err)
		}
		out[n<<10] = int64(count)
	}
	return out, nil
}

// HugePageResource is a page size's resource name (hugepages-2Mi).
func HugePageResource(pageBytes int64) v1.ResourceName {
	return v1.ResourceName(v1.ResourceHugePagesPrefix + resource.NewQuantity(pageBytes, resource.BinarySI).String())
}
