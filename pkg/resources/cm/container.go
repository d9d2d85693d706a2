package cm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/resources/numa"
)

// Swap behaviours, as memorySwap.swapBehavior names them ("" is NoSwap).
const (
	NoSwap      = "NoSwap"
	LimitedSwap = "LimitedSwap"
)

// Swap is how containers may swap.
type Swap struct {
	Behavior string
	// Unified: cgroup v2, where swap is limited by memory.swap.max.
	Unified bool
	// Available: the kernel accounts swap per cgroup (memory.swap.max on
	// cgroup v2, memory.memsw.* on v1); without it nothing is set.
	Available bool
	// MemoryBytes and SwapBytes are the node's memory and swap.
	MemoryBytes, SwapBytes int64
}

// DetectSwap reads, under a cgroup mount point (/sys/fs/cgroup), whether
// swap is accounted per cgroup, as upstream looks: memory.swap.max in a
// child cgroup on v2 (the root has none), memory/memory.memsw.limit_in_bytes
// on v1.
func DetectSwap(mount string, unified bool, behavior string, memoryBytes, swapBytes int64) (Swap, error) {
	switch behavior {
	case "", NoSwap, LimitedSwap:
	default:
		return Swap{}, fmt.Errorf("memorySwap.swapBehavior %q must be one of: \"\", %q or %q", behavior, LimitedSwap, NoSwap)
	}
	s := Swap{Behavior: behavior, Unified: unified, MemoryBytes: memoryBytes, SwapBytes: swapBytes}
	if unified {
		found, _ := filepath.Glob(filepath.Join(mount, "*", "memory.swap.max"))
		s.Available = len(found) > 0
	} else {
		_, err := os.Stat(filepath.Join(mount, "memory", "memory.memsw.limit_in_bytes"))
		s.Available = err == nil
	}
	if behavior == LimitedSwap && !unified {
		klog.InfoS("memorySwap.swapBehavior LimitedSwap is only possible on cgroup v2; containers get no swap, as upstream")
	}
	return s, nil
}

// limited says whether the container may swap: LimitedSwap on cgroup v2
// gives swap only to Burstable, non-critical pods' containers asking for
// memory below their limit, as upstream.
func (s Swap) limited(pod *v1.Pod, c *v1.Container) bool {
	if s.Behavior != LimitedSwap || !s.Available || !s.Unified || podutil.IsCritical(pod) || podutil.QOSClass(pod) != v1.PodQOSBurstable {
		return false
	}
	req, lim := c.Resources.Requests.Memory(), c.Resources.Limits.Memory()
	return !(req.IsZero() && lim.IsZero()) && req.Cmp(*lim) != 0
}

// LimitedSwapBytes is a Burstable container's swap under LimitedSwap:
// its share of the node's memory, of the node's swap.
func (s Swap) LimitedSwapBytes(memoryRequest int64) (int64, error) {
	if s.MemoryBytes <= 0 {
		return 0, fmt.Errorf("total node memory is 0")
	}
	if memoryRequest > s.MemoryBytes {
		return 0, fmt.Errorf("container request %d is larger than total node memory %d", memoryRequest, s.MemoryBytes)
	}
	return int64(float64(memoryRequest) / float64(s.MemoryBytes) * float64(s.SwapBytes)), nil
}

// apply sets the container's swap: its LimitedSwap share, or none. On
// cgroup v1 "none" is memory+swap equal to the memory limit.
func (s Swap) apply(pod *v1.Pod, c *v1.Container, r *runtimeapi.LinuxContainerResources) {
	if !s.Available {
		return
	}
	if !s.Unified {
		r.MemorySwapLimitInBytes = r.MemoryLimitInBytes
		return
	}
	swap := int64(0)
	if s.limited(pod, c) {
		b, err := s.LimitedSwapBytes(c.Resources.Requests.Memory().Value())
		if err != nil {
			klog.ErrorS(err, "Cannot calculate swap allocation amount; disallowing swap", "pod", klog.KObj(pod), "podUID", pod.UID, "container", c.Name)
		}
		swap = b
	}
	if r.Unified == nil {
		r.Unified = map[string]string{}
	}
	r.Unified["memory.swap.max"] = strconv.FormatInt(swap, 10)
}

// ContainerLimits are the cgroup limits a container gets that depend on
// the node: its huge pages per page size (none of a size it does not
// ask for), its swap, and how the OOM killer treats it. It is a runtime
// container hook.
type ContainerLimits struct {
	// HugePageSizes are the node's page sizes, in bytes.
	HugePageSizes []int64
	Swap          Swap
	// GroupOOMKill asks the kernel to kill every process of the container
	// when one is killed for lack of memory (memory.oom.group, cgroup v2
	// only), as upstream's kubelet asks unless singleProcessOOMKill: a
	// child killed alone would leave its container running as if nothing
	// had happened. The runtime has no default of its own: the kubelet is
	// the one that asks.
	GroupOOMKill bool
}

// GroupOOMKill says whether containers are killed whole on OOM: on
// cgroup v2 unless singleProcessOOMKill is true (the default there is
// false); never on cgroup v1, which has no such setting.
func GroupOOMKill(unified bool, singleProcessOOMKill *bool) bool {
	return unified && (singleProcessOOMKill == nil || !*singleProcessOOMKill)
}

// PreCreateContainer sets the container's huge page and swap limits.
func (l ContainerLimits) PreCreateContainer(_ context.Context, pod *v1.Pod, c *v1.Container, cfg *runtimeapi.ContainerConfig) error {
	if cfg.Linux == nil {
		return nil
	}
	if cfg.Linux.Resources == nil {
		cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{}
	}
	r := cfg.Linux.Resources
	for _, size := range l.HugePageSizes {
		limit := int64(0)
		if q, ok := c.Resources.Limits[numa.HugePageResource(size)]; ok {
			limit = q.Value()
		}
		r.HugepageLimits = append(r.HugepageLimits, &runtimeapi.HugepageLimit{PageSize: PageSizeName(size), Limit: uint64(limit)})
	}
	l.Swap.apply(pod, c, r)
	if l.GroupOOMKill {
		if r.Unified == nil {
			r.Unified = map[string]string{}
		}
		r.Unified["memory.oom.group"] = "1"
	}
	return nil
}

// PreStartContainer has nothing to do.
func (ContainerLimits) PreStartContainer(context.Context, *v1.Pod, *v1.Container, string) error {
	return nil
}

// PageSizeName is the kernel's name of a page size in the hugetlb
// controller's files (2MB, 1GB, 64KB).
func PageSizeName(bytes int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{30, "GB"}, {20, "MB"}, {10, "KB"}} {
		if bytes >= 1<<u.shift && bytes%(1<<u.shift) == 0 {
			return strconv.FormatInt(bytes>>u.shift, 10) + u.name
		}
	}
	return strconv.FormatInt(bytes, 10) + "B"
}

// hugePageLimits are a pod's huge page requests per page size name; a
// size it does not ask for is 0 (none may be used).
func hugePageLimits(sizes []int64, requests v1.ResourceList) map[string]int64 {
	if len(sizes) == 0 {
		return nil
	}
	out := map[string]int64{}
	for _, size := range sizes {
		q := requests[numa.HugePageResource(size)]
		out[PageSizeName(size)] = q.Value()
	}
	return out
}
