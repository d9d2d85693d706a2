//go:build integration

package devices

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// managersConfig configures the static CPU manager with CPU 0 reserved
// (this machine has two), the Static memory manager with the eviction
// threshold (100Mi, the default) reserved on NUMA node 0, and the
// topology manager aligning whole pods to one NUMA node.
const managersConfig = `cpuManagerPolicy: static
cpuManagerReconcilePeriod: 1s
reservedSystemCPUs: "0"
memoryManagerPolicy: Static
reservedMemory:
- numaNode: 0
  limits:
    memory: 100Mi
topologyManagerPolicy: single-numa-node
topologyManagerScope: pod
`

// TestCPUAndMemoryManagers: a Guaranteed pod of one whole CPU gets CPU 1
// alone (and NUMA node 0's memory), a BestEffort pod the shared pool
// (CPU 0); the assignment survives a SIGKILL of nodelet; once the
// Guaranteed pod is gone the shared pool grows back to both CPUs. The
// pod-resources API reports the exclusive CPU and the pinned memory.
func TestCPUAndMemoryManagers(t *testing.T) {
	ns := cl.Namespace(t)
	n := cl.StartNode(t, "managers", cd, managersConfig)
	pr := podResources(t, n)
	alloc, err := pr.GetAllocatableResources(context.Background(), &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(alloc.CpuIds) != "[1]" || len(alloc.Memory) == 0 {
		t.Errorf("GetAllocatableResources: cpus %v memory %v, want [1] and NUMA node 0's memory", alloc.CpuIds, alloc.Memory)
	}

	create(t, ns, pod("exclusive", n.NodeName, quantities("cpu", "1", "memory", "64Mi")))
	create(t, ns, pod("shared", n.NodeName, nil))
	cl.WaitPod(t, time.Minute, ns, "exclusive", testbed.PodRunning)
	cl.WaitPod(t, time.Minute, ns, "shared", testbed.PodRunning)
	checkExclusive := func(when string) {
		t.Helper()
		if got := allowed(t, n, ns, "exclusive"); got != "1 0" {
			t.Errorf("%s: the Guaranteed container's CPUs and memory nodes are %q, want 1 and 0", when, got)
		}
		c := containerResources(t, pr, ns, "exclusive")
		if fmt.Sprint(c.GetCpuIds()) != "[1]" || len(c.GetMemory()) != 1 || c.Memory[0].MemoryType != "memory" ||
			c.Memory[0].Size != 64<<20 || len(c.Memory[0].GetTopology().GetNodes()) != 1 || c.Memory[0].Topology.Nodes[0].ID != 0 {
			t.Errorf("%s: pod-resources List for the Guaranteed pod: %v", when, c)
		}
	}
	checkExclusive("at start")
	waitAllowed(t, n, ns, "shared", "0 0")
	if c := containerResources(t, pr, ns, "shared"); len(c.GetCpuIds()) != 0 || len(c.GetMemory()) != 0 {
		t.Errorf("pod-resources List for the BestEffort pod: %v, want no exclusive CPUs or memory", c)
	}

	before := containerStatus(t, ns, "exclusive")
	n.Kill()
	n.Start()
	waitAllocatableCPUs(t, pr)
	if after := containerStatus(t, ns, "exclusive"); after.ContainerID != before.ContainerID || after.RestartCount != 0 {
		t.Errorf("after the restart the container is %s (restarts %d), was %s", after.ContainerID, after.RestartCount, before.ContainerID)
	}
	checkExclusive("after a restart")

	deletePod(t, ns, "exclusive")
	waitAllowed(t, n, ns, "shared", "0-1 0")
}

// allowed is what the pod's main container may run on: its
// Cpus_allowed_list and Mems_allowed_list, which the cgroup's cpuset
// makes.
func allowed(t *testing.T, n *testbed.Nodelet, ns, name string) string {
	t.Helper()
	out := execMain(t, n, ns, name, "sh", "-c", "grep -E '^(Cpus|Mems)_allowed_list' /proc/self/status | cut -f2")
	return strings.Join(strings.Fields(out), " ")
}

func waitAllowed(t *testing.T, n *testbed.Nodelet, ns, name, want string) {
	t.Helper()
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		got := allowed(t, n, ns, name)
		return got == want, fmt.Sprintf("pod %s's CPUs and memory nodes: %q, want %q", name, got, want)
	})
}

// waitAllocatableCPUs waits for the restarted node's pod-resources API.
func waitAllocatableCPUs(t *testing.T, pr podresourcesapi.PodResourcesListerClient) {
	t.Helper()
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		r, err := pr.GetAllocatableResources(context.Background(), &podresourcesapi.AllocatableResourcesRequest{})
		return err == nil && len(r.GetCpuIds()) == 1, fmt.Sprintf("GetAllocatableResources: %v %v", r, err)
	})
}
