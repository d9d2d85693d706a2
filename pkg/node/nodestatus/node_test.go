package nodestatus

import (
	"testing"

	"github.com/nodelet/nodelet/pkg/node/eviction"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestMeasure(t *testing.T) {
	m, err := Measure(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if m.CPUs < 1 || m.MemoryBytes < 1<<20 || m.EphemeralStorage < 1<<20 || m.KernelVersion == "" {
		t.Fatalf("measured %+v", m)
	}
}

func TestNodeAndAllocatable(t *testing.T) {
	m := Machine{CPUs: 4, MemoryBytes: 8 << 30, EphemeralStorage: 100 << 30}
	reserved, err := ParseReserved(map[string]string{"cpu": "500m", "memory": "1Gi"}, map[string]string{"cpu": "500m"})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := EvictionReserved(eviction.DefaultEvictionHard, Capacity(m, 110))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range ev {
		q := reserved[k]
		q.Add(v)
		reserved[k] = q
	}
	n := Node(Config{NodeName: "n1", MaxPods: 110, Reserved: reserved, Labels: map[string]string{"zone": "a"}, HostIPs: []string{"10.0.0.1"}}, m)
	a := n.Status.Allocatable
	wantMem := resource.MustParse("8Gi")
	wantMem.Sub(resource.MustParse("1Gi"))
	wantMem.Sub(resource.MustParse("100Mi"))
	if cpu := a[v1.ResourceCPU]; cpu.MilliValue() != 3000 {
		t.Errorf("cpu %s", cpu.String())
	}
	if mem := a[v1.ResourceMemory]; mem.Cmp(wantMem) != 0 {
		t.Errorf("memory %s, want %s", mem.String(), wantMem.String())
	}
	if st := a[v1.ResourceEphemeralStorage]; st.Value() != 90<<30 {
		t.Errorf("ephemeral storage %s", st.String())
	}
	if pods := a[v1.ResourcePods]; pods.Value() != 110 {
		t.Errorf("pods %s", pods.String())
	}
	if n.Labels[LabelHostname] != "n1" || n.Labels[LabelOS] != "linux" || n.Labels["zone"] != "a" || n.Labels[LabelArch] == "" {
		t.Errorf("labels %v", n.Labels)
	}
	if len(n.Status.Addresses) != 2 || n.Status.Addresses[0].Address != "10.0.0.1" {
		t.Errorf("addresses %v", n.Status.Addresses)
	}
	// Reserving more than there is leaves zero, not a negative amount.
	over := Allocatable(Capacity(m, 1), v1.ResourceList{v1.ResourceCPU: resource.MustParse("10")})
	if cpu := over[v1.ResourceCPU]; cpu.Sign() != 0 {
		t.Errorf("over-reserved cpu %s", cpu.String())
	}
}

// TestHugePagesCapacity: each page size is a resource of its bytes, and
// memory allocatable leaves the huge pages out, as upstream.
func TestHugePagesCapacity(t *testing.T) {
	m := Machine{CPUs: 2, MemoryBytes: 8 << 30, HugePages: map[int64]int64{2 << 20: 512, 1 << 30: 1}}
	n := Node(Config{NodeName: "n", MaxPods: 10, Reserved: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}}, m)
	for name, want := range map[v1.ResourceName]string{"hugepages-2Mi": "1Gi", "hugepages-1Gi": "1Gi"} {
		if q := n.Status.Capacity[name]; q.String() != want {
			t.Errorf("capacity %s = %s, want %s", name, q.String(), want)
		}
	}
	if q := n.Status.Allocatable[v1.ResourceMemory]; q.String() != "5Gi" {
		t.Errorf("memory allocatable %s, want 8Gi less 1Gi reserved and 2Gi of huge pages", q.String())
	}
}
