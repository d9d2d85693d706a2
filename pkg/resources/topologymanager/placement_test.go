package topologymanager_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/internal/numatest"
	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/pkg/pods/admission"
	"github.com/nodelet/nodelet/pkg/resources/cpumanager"
	"github.com/nodelet/nodelet/pkg/resources/memorymanager"
	"github.com/nodelet/nodelet/pkg/resources/numa"
	"github.com/nodelet/nodelet/pkg/resources/topologymanager"
)

// placementCase is a machine, the managers' configuration, and pods
// admitted one after the other.
type placementCase struct {
	name  string
	shape numatest.Shape
	// reservedCPUs are reservedSystemCPUs; reservedMemory is reserved on
	// NUMA node 0 (and is the node's whole memory reservation).
	reservedCPUs, reservedMemory string
	policy, scope                string
	cpuOptions, topologyOptions  map[string]string
	pods                         []placementPod
}

// placementPod is a Guaranteed pod unless a container's cpu is
// fractional; "-" departs the pod of that name instead.
type placementPod struct {
	name       string
	containers []string // "cpu/memory", "cpu/memory/hugepages-2Mi"
}

const gib = int64(1) << 30

var placementCases = []placementCase{
	{
		name:         "this machine: 1 socket, 2 cores, 1 NUMA node",
		shape:        numatest.Shape{Sockets: 1, CoresPerSocket: 2, ThreadsPerCore: 1, MemoryPerNode: 24 * gib},
		reservedCPUs: "0", reservedMemory: "100Mi", policy: topologymanager.PolicySingleNUMANode, scope: topologymanager.ScopeContainer,
		pods: []placementPod{
			{"exclusive", []string{"1/64Mi"}},
			{"second", []string{"1/64Mi"}},
			{"burstable", []string{"500m/64Mi"}},
			{"-exclusive", nil},
			{"second", []string{"1/64Mi"}},
		},
	},
	{
		name:         "2 sockets of 3 cores of 2 threads, a NUMA node each (4Gi)",
		shape:        numatest.Shape{Sockets: 2, CoresPerSocket: 3, ThreadsPerCore: 2, MemoryPerNode: 4 * gib},
		reservedCPUs: "0", reservedMemory: "512Mi", policy: topologymanager.PolicySingleNUMANode, scope: topologymanager.ScopeContainer,
		pods: []placementPod{
			{"four", []string{"4/1Gi"}},
			{"six", []string{"6/1Gi"}},
			{"two", []string{"2/3Gi"}},
			{"too-much-memory", []string{"1/4Gi"}},
			{"-four", nil},
			{"five", []string{"5/1Gi"}},
		},
	},
	{
		name:         "the same machine, restricted",
		shape:        numatest.Shape{Sockets: 2, CoresPerSocket: 3, ThreadsPerCore: 2, MemoryPerNode: 4 * gib},
		reservedCPUs: "0", reservedMemory: "512Mi", policy: topologymanager.PolicyRestricted, scope: topologymanager.ScopeContainer,
		pods: []placementPod{
			{"eight", []string{"8/1Gi"}},
			{"memory-of-both", []string{"1/5Gi"}},
		},
	},
	{
		name:         "the same machine, best-effort",
		shape:        numatest.Shape{Sockets: 2, CoresPerSocket: 3, ThreadsPerCore: 2, MemoryPerNode: 4 * gib},
		reservedCPUs: "0", reservedMemory: "512Mi", policy: topologymanager.PolicyBestEffort, scope: topologymanager.ScopeContainer,
		pods: []placementPod{
			{"eight", []string{"8/1Gi"}},
			{"memory-of-both", []string{"1/5Gi"}},
		},
	},
	{
		name:         "pod scope: two containers on one node",
		shape:        numatest.Shape{Sockets: 2, CoresPerSocket: 3, ThreadsPerCore: 2, MemoryPerNode: 4 * gib},
		reservedCPUs: "0", reservedMemory: "512Mi", policy: topologymanager.PolicySingleNUMANode, scope: topologymanager.ScopePod,
		pods: []placementPod{
			{"pair", []string{"2/1Gi", "2/1Gi"}},
			{"pair-too-big", []string{"4/1Gi", "4/1Gi"}},
		},
	},
	{
		name:         "full-pcpus-only",
		shape:        numatest.Shape{Sockets: 2, CoresPerSocket: 3, ThreadsPerCore: 2, MemoryPerNode: 4 * gib},
		reservedCPUs: "0,6", reservedMemory: "512Mi", policy: topologymanager.PolicyBestEffort, scope: topologymanager.ScopeContainer,
		cpuOptions: map[string]string{cpumanager.OptionFullPCPUsOnly: "true"},
		pods: []placementPod{
			{"odd", []string{"3/1Gi"}},
			{"even", []string{"4/1Gi"}},
		},
	},
	{
		name:         "4 NUMA nodes on 2 sockets (node 0 reserved), best-effort",
		shape:        numatest.Shape{Sockets: 2, CoresPerSocket: 4, ThreadsPerCore: 1, NUMANodesPerSocket: 2, MemoryPerNode: 2 * gib},
		reservedCPUs: "0-1", reservedMemory: "256Mi", policy: topologymanager.PolicyBestEffort, scope: topologymanager.ScopeContainer,
		pods: []placementPod{{"two-nodes-wide", []string{"3/3Gi"}}},
	},
	{
		name:         "the same, prefer-closest-numa-nodes: two nodes of one socket",
		shape:        numatest.Shape{Sockets: 2, CoresPerSocket: 4, ThreadsPerCore: 1, NUMANodesPerSocket: 2, MemoryPerNode: 2 * gib},
		reservedCPUs: "0-1", reservedMemory: "256Mi", policy: topologymanager.PolicyBestEffort, scope: topologymanager.ScopeContainer,
		topologyOptions: map[string]string{topologymanager.OptionPreferClosestNUMANodes: "true"},
		pods:            []placementPod{{"two-nodes-wide", []string{"3/3Gi"}}},
	},
	{
		name: "huge pages: 2 nodes of 8 2Mi pages each",
		shape: numatest.Shape{Sockets: 2, CoresPerSocket: 2, ThreadsPerCore: 1, MemoryPerNode: 2 * gib,
			HugePagesPerNode: map[int64]int64{2 << 20: 8}},
		reservedCPUs: "0", reservedMemory: "256Mi", policy: topologymanager.PolicySingleNUMANode, scope: topologymanager.ScopeContainer,
		pods: []placementPod{
			{"pages", []string{"1/256Mi/12Mi"}},
			{"more-pages", []string{"1/256Mi/12Mi"}},
			{"too-many-pages", []string{"1/256Mi/12Mi"}},
		},
	},
}

// TestPlacements is the golden table of the resource managers together,
// as admission runs them: the topology manager merges the CPU and
// memory managers' hints, then each allocates. For each pod: admitted or
// refused (reason), each container's exclusive CPUs and memory NUMA
// nodes, and the shared pool after it.
func TestPlacements(t *testing.T) {
	var out strings.Builder
	for _, tc := range placementCases {
		fmt.Fprintf(&out, "== %s\n   reserved CPUs %s, %s of node 0; topology %s, scope %s", tc.name, tc.reservedCPUs, tc.reservedMemory, tc.policy, tc.scope)
		for k, v := range tc.cpuOptions {
			fmt.Fprintf(&out, ", %s=%s", k, v)
		}
		for k, v := range tc.topologyOptions {
			fmt.Fprintf(&out, ", %s=%s", k, v)
		}
		out.WriteString("\n")
		runPlacements(t, tc, &out)
	}
	testutil.Golden(t, "testdata/placements.txt", out.String())
}

func runPlacements(t *testing.T, tc placementCase, out *strings.Builder) {
	t.Helper()
	topo := numatest.Machine(tc.shape)
	reserved, err := cpuset.Parse(tc.reservedCPUs)
	testutil.Must(t, err)
	mem := resource.MustParse(tc.reservedMemory)
	cpus, err := cpumanager.New(cpumanager.Options{Policy: cpumanager.PolicyStatic, PolicyOptions: tc.cpuOptions, Topology: topo,
		Reserved: reserved, NumReserved: reserved.Size(), RootDir: t.TempDir(), ReconcilePeriod: time.Second,
		Clock: testingclock.NewFakeClock(time.Now())})
	testutil.Must(t, err)
	memory, err := memorymanager.New(memorymanager.Options{Policy: memorymanager.PolicyStatic, Topology: topo, RootDir: t.TempDir(),
		Reserved:        []kubeletv1beta1.MemoryReservation{{NumaNode: 0, Limits: v1.ResourceList{v1.ResourceMemory: mem}}},
		NodeReservation: v1.ResourceList{v1.ResourceMemory: mem}})
	testutil.Must(t, err)
	mgr, err := topologymanager.New(topologymanager.Options{Policy: tc.policy, Scope: tc.scope, PolicyOptions: tc.topologyOptions,
		Topology: topo, Providers: []topologymanager.HintProvider{cpus, memory}})
	testutil.Must(t, err)
	var active []*v1.Pod
	for _, pp := range tc.pods {
		if gone, ok := strings.CutPrefix(pp.name, "-"); ok {
			for i, p := range active {
				if p.Name == gone {
					active = append(active[:i], active[i+1:]...)
					break
				}
			}
			cpus.RetainActive(active)
			memory.RetainActive(active)
			fmt.Fprintf(out, "%-16s gone; shared pool %s\n", gone, cpus.SharedPool())
			continue
		}
		pod := placementPodSpec(pp)
		if v := mgr.Admit(admission.Attributes{Pod: pod}); !v.Admitted() {
			fmt.Fprintf(out, "%-16s %s refused: %s: %s\n", pp.name, strings.Join(pp.containers, " "), v.Reason, v.Message)
			// A refused pod is not active: what it was given goes back.
			cpus.RetainActive(active)
			memory.RetainActive(active)
			continue
		}
		active = append(active, pod)
		fmt.Fprintf(out, "%-16s %s admitted:", pp.name, strings.Join(pp.containers, " "))
		for _, c := range pod.Spec.Containers {
			fmt.Fprintf(out, " %s cpus %s memory on %s;", c.Name, orNone(cpus.ExclusiveCPUs(pod.UID, c.Name)), nodes(memory.NUMANodes(pod.UID, c.Name)))
		}
		fmt.Fprintf(out, " shared pool %s\n", cpus.SharedPool())
	}
}

func placementPodSpec(pp placementPod) *v1.Pod {
	p := &v1.Pod{}
	p.Name, p.Namespace, p.UID = pp.name, "ns", types.UID(pp.name)
	for i, spec := range pp.containers {
		parts := strings.Split(spec, "/")
		r := v1.ResourceList{v1.ResourceCPU: resource.MustParse(parts[0]), v1.ResourceMemory: resource.MustParse(parts[1])}
		if len(parts) > 2 {
			r[numa.HugePageResource(2<<20)] = resource.MustParse(parts[2])
		}
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: fmt.Sprintf("c%d", i+1),
			Resources: v1.ResourceRequirements{Requests: r, Limits: r}})
	}
	return p
}

func orNone(s cpuset.CPUSet) string {
	if s.IsEmpty() {
		return "shared"
	}
	return s.String()
}

func nodes(ids []int) string {
	if len(ids) == 0 {
		return "any"
	}
	return cpuset.New(ids...).String()
}
