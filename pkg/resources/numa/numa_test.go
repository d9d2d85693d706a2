package numa_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/nodelet/nodelet/internal/numatest"
	"github.com/nodelet/nodelet/pkg/resources/numa"
)

// TestDiscoverReadsWhatSysfsShows: a two-socket machine with two NUMA
// nodes per socket and hyperthreads, written as sysfs shows it, reads
// back as the same topology.
func TestDiscoverReadsWhatSysfsShows(t *testing.T) {
	want := numatest.Machine(numatest.Shape{Sockets: 2, CoresPerSocket: 4, ThreadsPerCore: 2, NUMANodesPerSocket: 2,
		MemoryPerNode: 4 << 30, HugePagesPerNode: map[int64]int64{2 << 20: 8, 1 << 30: 1}})
	root := t.TempDir()
	if err := numatest.WriteSysfs(root, want); err != nil {
		t.Fatal(err)
	}
	got, err := numa.Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.CPUs, want.CPUs) {
		t.Errorf("CPUs %v, want %v", got.CPUs, want.CPUs)
	}
	if got.MemoryBytes != 16<<30 || got.HugePages[2<<20] != 32 || got.HugePages[1<<30] != 4 {
		t.Errorf("memory %d, huge pages %v", got.MemoryBytes, got.HugePages)
	}
	if len(got.Nodes) != 4 || got.Nodes[3].CPUs.String() != "6-7,14-15" || got.Nodes[3].MemoryBytes != 4<<30 || got.Nodes[3].HugePages[2<<20] != 8 {
		t.Errorf("nodes %+v", got.Nodes)
	}
	if got.CPUsPerCore() != 2 || got.CPUsPerSocket() != 8 {
		t.Errorf("CPUs per core %d, per socket %d", got.CPUsPerCore(), got.CPUsPerSocket())
	}
	if c := got.CPUs.CPUsInCores(got.CPUs[9].Core); c.String() != "1,9" {
		t.Errorf("core of CPU 9: %s", c)
	}
}

// TestDiscoverWithoutNUMA: a kernel without NUMA support shows no node
// directory; the machine is one node.
func TestDiscoverWithoutNUMA(t *testing.T) {
	m := numatest.Machine(numatest.Shape{Sockets: 1, CoresPerSocket: 2, ThreadsPerCore: 1, MemoryPerNode: 1 << 30})
	root := t.TempDir()
	if err := numatest.WriteSysfs(root, m); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(root, "sys", "devices", "system", "node")); err != nil {
		t.Fatal(err)
	}
	got, err := numa.Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Nodes) != 1 || got.Nodes[0].CPUs.String() != "0-1" || got.Nodes[0].MemoryBytes != 1<<30 {
		t.Fatalf("nodes %+v", got.Nodes)
	}
}

// TestDiscoverThisMachine: the real sysfs reads without error, and every
// online CPU is placed.
func TestDiscoverThisMachine(t *testing.T) {
	got, err := numa.Discover("/")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.CPUs) == 0 || len(got.Nodes) == 0 || got.MemoryBytes == 0 {
		t.Fatalf("topology %+v", got)
	}
}
