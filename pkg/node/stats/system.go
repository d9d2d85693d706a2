package stats

import (
	"time"

	"github.com/opencontainers/cgroups"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// CgroupReader reads a cgroup's statistics from the kernel (cm.CgroupStats).
type CgroupReader func(name string) (*cgroups.Stats, error)

// systemContainers are the node's system containers, as upstream's
// summary reports them: nodelet's own cgroup ("kubelet"), the runtime's
// and the system's ("runtime", "misc") when named, and the pods' ("pods",
// the kubepods cgroup), each with its CPU and memory. One that cannot be
// read is left out, and logged.
func (p *Provider) systemContainers(now time.Time) []statsapi.ContainerStats {
	names := map[string]string{}
	if p.o.SystemContainers != nil {
		names = p.o.SystemContainers()
	}
	if p.o.PodsCgroup != "" {
		names[statsapi.SystemContainerPods] = p.o.PodsCgroup
	}
	if len(names) == 0 || p.o.ReadCgroup == nil {
		return nil
	}
	var out []statsapi.ContainerStats
	for name, cgroup := range names {
		st, err := p.o.ReadCgroup(cgroup)
		if err != nil {
			klog.V(4).InfoS("Cannot read a system container's cgroup", "container", name, "cgroup", cgroup, "err", err)
			continue
		}
		out = append(out, p.systemContainer(name, st, now))
	}
	return out
}

func (p *Provider) systemContainer(name string, st *cgroups.Stats, now time.Time) statsapi.ContainerStats {
	t := metav1.NewTime(now)
	usage := st.CpuStats.CpuUsage.TotalUsage
	cpu := &statsapi.CPUStats{Time: t, UsageCoreNanoSeconds: &usage, UsageNanoCores: p.nanoCores("system/"+name, now, usage)}
	m := st.MemoryStats
	memUsage := m.Usage.Usage
	// The working set is usage less the inactive file pages, as cAdvisor
	// counts it (total_ on cgroup v1, where the stats are hierarchical).
	inactive := first(m.Stats, "total_inactive_file", "inactive_file")
	ws := memUsage - min(inactive, memUsage)
	rss := first(m.Stats, "total_rss", "anon")
	faults, major := first(m.Stats, "total_pgfault", "pgfault"), first(m.Stats, "total_pgmajfault", "pgmajfault")
	mem := &statsapi.MemoryStats{Time: t, UsageBytes: &memUsage, WorkingSetBytes: &ws, RSSBytes: &rss, PageFaults: &faults, MajorPageFaults: &major}
	if limit := m.Usage.Limit; name == statsapi.SystemContainerPods && limit > 0 && limit < 1<<62 {
		avail := limit - min(ws, limit)
		mem.AvailableBytes = &avail
	}
	return statsapi.ContainerStats{Name: name, StartTime: metav1.NewTime(p.bootTime(now)), CPU: cpu, Memory: mem}
}

func first(m map[string]uint64, keys ...string) uint64 {
	for _, k := range keys {
		if v, ok := m[k]; ok {
			return v
		}
	}
	return 0
}

// bootTime is when the node booted, the start of the system containers
// (which live as long as the node); now when it cannot be read.
func (p *Provider) bootTime(now time.Time) time.Time {
	if _, boot, err := p.procStat(); err == nil {
		return boot
	}
	return now
}
