package eviction

import (
	"cmp"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// Resources that are not API resource names: what inode and PID
// pressure reclaim.
const (
	resourceInodes v1.ResourceName = "inodes"
	resourcePIDs   v1.ResourceName = "pids"
)

// signalOrder is the order thresholds are acted on: memory first, as
// upstream does.
var signalOrder = []string{
	SignalMemoryAvailable, SignalNodeFsAvailable, SignalNodeFsInodesFree,
	SignalImageFsAvailable, SignalImageFsInodesFree, SignalPIDAvailable,
}

// resourceOf is what each signal is short of, as the message names it.
var resourceOf = map[string]v1.ResourceName{
	SignalMemoryAvailable:   v1.ResourceMemory,
	SignalNodeFsAvailable:   v1.ResourceEphemeralStorage,
	SignalImageFsAvailable:  v1.ResourceEphemeralStorage,
	SignalNodeFsInodesFree:  resourceInodes,
	SignalImageFsInodesFree: resourceInodes,
	SignalPIDAvailable:      resourcePIDs,
}

// podUsage is what a pod uses of each resource, with its containers'
// share of memory and disk (for the message).
type podUsage struct {
	total      map[v1.ResourceName]int64
	containers map[string]map[v1.ResourceName]int64
}

func usageByPod(s *statsapi.Summary) map[types.UID]podUsage {
	out := map[types.UID]podUsage{}
	for _, p := range s.Pods {
		u := podUsage{total: map[v1.ResourceName]int64{}, containers: map[string]map[v1.ResourceName]int64{}}
		if m := p.Memory; m != nil && m.WorkingSetBytes != nil {
			u.total[v1.ResourceMemory] = int64(*m.WorkingSetBytes)
		}
		if e := p.EphemeralStorage; e != nil {
			if e.UsedBytes != nil {
				u.total[v1.ResourceEphemeralStorage] = int64(*e.UsedBytes)
			}
			if e.InodesUsed != nil {
				u.total[resourceInodes] = int64(*e.InodesUsed)
			}
		}
		if ps := p.ProcessStats; ps != nil && ps.ProcessCount != nil {
			u.total[resourcePIDs] = int64(*ps.ProcessCount)
		}
		for _, c := range p.Containers {
			cu := map[v1.ResourceName]int64{}
			if m := c.Memory; m != nil && m.WorkingSetBytes != nil {
				cu[v1.ResourceMemory] = int64(*m.WorkingSetBytes)
			}
			if c.Rootfs != nil && c.Rootfs.UsedBytes != nil && c.Logs != nil && c.Logs.UsedBytes != nil {
				cu[v1.ResourceEphemeralStorage] = int64(*c.Rootfs.UsedBytes + *c.Logs.UsedBytes)
			}
			u.containers[c.Name] = cu
		}
		out[types.UID(p.PodRef.UID)] = u
	}
	return out
}

// requested is what the pod's containers ask for of r (init containers
// included, as upstream's ranking counts them).
func requested(pod *v1.Pod, r v1.ResourceName) int64 {
	var sum int64
	for _, cs := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, c := range cs {
			if q, ok := c.Resources.Requests[r]; ok {
				sum += q.Value()
			}
		}
	}
	return sum
}

func priority(pod *v1.Pod) int32 {
	if pod.Spec.Priority != nil {
		return *pod.Spec.Priority
	}
	return 0
}

// rank orders pods for eviction for the signal, as upstream does: for
// memory and disk, pods using more than they requested first, then the
// lower priority, then the larger use beyond the request; for PIDs, the
// lower priority, then the more processes. Pods without stats use
// nothing.
func rank(signal string, pods []*v1.Pod, usage map[types.UID]podUsage) {
	r := resourceOf[signal]
	over := func(p *v1.Pod) int64 { return usage[p.UID].total[r] - requested(p, r) }
	slices.SortStableFunc(pods, func(a, b *v1.Pod) int {
		if r != resourcePIDs {
			// exceeding its request sorts first (true before false)
			if c := -cmp.Compare(boolInt(over(a) > 0), boolInt(over(b) > 0)); c != 0 {
				return c
			}
		}
		if c := cmp.Compare(priority(a), priority(b)); c != 0 {
			return c
		}
		if r == resourcePIDs {
			return -cmp.Compare(usage[a.UID].total[r], usage[b.UID].total[r])
		}
		return -cmp.Compare(over(a), over(b))
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// message is upstream's eviction message: the resource the node is low
// on, the threshold and what is available, and each container using more
// than it requested.
func message(th threshold, r Reading, pod *v1.Pod, u podUsage) string {
	res := resourceOf[th.signal]
	msg := fmt.Sprintf("The node was low on resource: %s. Threshold quantity: %s, available: %s. ", res, quantity(res, th.min), quantity(res, r.Available))
	if res != v1.ResourceMemory && res != v1.ResourceEphemeralStorage {
		return msg
	}
	for _, cs := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, c := range cs {
			used, ok := u.containers[c.Name][res]
			req := c.Resources.Requests[res]
			if ok && used > req.Value() {
				msg += fmt.Sprintf("Container %s was using %s, request is %s, has larger consumption of %s. ", c.Name, quantity(res, uint64(used)), req.String(), res)
			}
		}
	}
	return msg
}

// quantity prints an amount as upstream's message does: bytes in binary
// units (rounded to Ki), counts as plain numbers.
func quantity(r v1.ResourceName, n uint64) string {
	if r == v1.ResourceMemory || r == v1.ResourceEphemeralStorage {
		q := resource.NewQuantity(int64(n), resource.BinarySI)
		if n >= 1024 {
			q = resource.NewQuantity(int64(n/1024)*1024, resource.BinarySI)
		}
		return q.String()
	}
	return resource.NewQuantity(int64(n), resource.DecimalSI).String()
}
