package stats

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// userHZ is the unit of /proc/stat's CPU times; Linux fixes it at 100
// for user space whatever the kernel's tick.
const userHZ = 100

// nodeStats measures the machine from /proc: CPU and memory as the
// node's root cgroup would, network on the host's interfaces, and the
// filesystem holding the root directory.
func (p *Provider) nodeStats(onlyCPUAndMemory bool) (*statsapi.NodeStats, error) {
	now := p.o.Clock.Now()
	usage, boot, err := p.procStat()
	if err != nil {
		return nil, err
	}
	mem, swap, err := p.memory(now)
	if err != nil {
		return nil, err
	}
	n := &statsapi.NodeStats{
		NodeName:  p.o.NodeName,
		StartTime: metav1.NewTime(boot),
		CPU: &statsapi.CPUStats{Time: metav1.NewTime(now), UsageCoreNanoSeconds: &usage,
			UsageNanoCores: p.nanoCores("node", now, usage)},
		Memory: mem,
		Swap:   swap,
	}
	if onlyCPUAndMemory {
		return n, nil
	}
	n.Fs = p.dirFs("", p.o.RootDir)
	n.Network = p.hostNetwork(now)
	n.Rlimit = p.rlimit(now)
	return n, nil
}

// procStat reads the node's cumulative CPU time in use (everything but
// idle and iowait) and its boot time.
func (p *Provider) procStat() (usage uint64, boot time.Time, err error) {
	st, err := p.proc.Stat()
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("node CPU: %w", err)
	}
	c := st.CPUTotal
	// procfs gives seconds; back to the kernel's ticks, so no rounding
	// error accumulates in a counter that only grows.
	ticks := math.Round((c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal) * userHZ)
	return uint64(ticks) * uint64(time.Second/userHZ), time.Unix(int64(st.BootTime), 0), nil
}

// memory reports the node's memory as the kubelet does: the working set
// is what is in use minus the page cache the kernel could reclaim
// first (inactive file pages), and available is what is left of the
// total after it. Swap is what the swap areas hold and have left.
func (p *Provider) memory(now time.Time) (*statsapi.MemoryStats, *statsapi.SwapStats, error) {
	info, err := p.proc.Meminfo()
	if err != nil {
		return nil, nil, fmt.Errorf("node memory: %w", err)
	}
	total, free := deref(info.MemTotalBytes), deref(info.MemFreeBytes)
	usage := total - free
	ws := usage
	if inactive := deref(info.InactiveFileBytes); inactive < ws {
		ws -= inactive
	}
	avail := total - ws
	rss := deref(info.AnonPagesBytes)
	m := &statsapi.MemoryStats{Time: metav1.NewTime(now), UsageBytes: &usage, WorkingSetBytes: &ws, AvailableBytes: &avail, RSSBytes: &rss}
	if faults, major, err := p.pageFaults(); err == nil {
		m.PageFaults, m.MajorPageFaults = &faults, &major
	}
	swapFree := deref(info.SwapFreeBytes)
	swapUsed := deref(info.SwapTotalBytes) - min(swapFree, deref(info.SwapTotalBytes))
	return m, &statsapi.SwapStats{Time: metav1.NewTime(now), SwapAvailableBytes: &swapFree, SwapUsageBytes: &swapUsed}, nil
}

func deref(v *uint64) uint64 {
	if v == nil {
		return 0
	}
	return *v
}

// pageFaults reads the node's page faults from /proc/vmstat (which procfs
// does not parse).
func (p *Provider) pageFaults() (faults, major uint64, err error) {
	b, err := os.ReadFile(filepath.Join(p.o.ProcDir, "vmstat"))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, v, _ := strings.Cut(line, " ")
		switch name {
		case "pgfault":
			faults, err = strconv.ParseUint(v, 10, 64)
		case "pgmajfault":
			major, err = strconv.ParseUint(v, 10, 64)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/vmstat %s: %w", name, err)
		}
	}
	return faults, major, nil
}

// hostNetwork reads the host's interfaces; the default one is the
// interface of the default route.
func (p *Provider) hostNetwork(now time.Time) *statsapi.NetworkStats {
	dev, err := p.proc.NetDev()
	if err != nil {
		return nil
	}
	def := p.defaultInterface()
	out := &statsapi.NetworkStats{Time: metav1.NewTime(now)}
	names := make([]string, 0, len(dev))
	for name := range dev {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if name == "lo" {
			continue
		}
		d := dev[name]
		i := statsapi.InterfaceStats{Name: name, RxBytes: &d.RxBytes, RxErrors: &d.RxErrors, TxBytes: &d.TxBytes, TxErrors: &d.TxErrors}
		out.Interfaces = append(out.Interfaces, i)
		if name == def {
			out.InterfaceStats = i
		}
	}
	return out
}

func (p *Provider) defaultInterface() string {
	routes, err := p.proc.NetRoute()
	if err != nil {
		return ""
	}
	for _, r := range routes {
		if r.Destination == 0 {
			return r.Iface
		}
	}
	return ""
}

// rlimit reports the node's process limit and how many processes exist.
func (p *Provider) rlimit(now time.Time) *statsapi.RlimitStats {
	r := &statsapi.RlimitStats{Time: metav1.NewTime(now)}
	if b, err := os.ReadFile(filepath.Join(p.o.ProcDir, "sys", "kernel", "pid_max")); err == nil {
		if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			r.MaxPID = &v
		}
	}
	if entries, err := os.ReadDir(p.o.ProcDir); err == nil {
		var n int64
		for _, e := range entries {
			if _, err := strconv.Atoi(e.Name()); err == nil {
				n++
			}
		}
		r.NumOfRunningProcesses = &n
	}
	return r
}

// statFs reports the capacity, free and used space of the filesystem
// holding path.
func statFs(path string, at time.Time) (*statsapi.FsStats, error) {
	var s syscall.Statfs_t
	if err := syscall.Statfs(path, &s); err != nil {
		return nil, err
	}
	bsize := uint64(s.Bsize)
	capacity, avail := s.Blocks*bsize, s.Bavail*bsize
	used := (s.Blocks - s.Bfree) * bsize
	inodes, free := s.Files, s.Ffree
	inodesUsed := inodes - free
	return &statsapi.FsStats{Time: metav1.NewTime(at), CapacityBytes: &capacity, AvailableBytes: &avail, UsedBytes: &used,
		Inodes: &inodes, InodesFree: &free, InodesUsed: &inodesUsed}, nil
}

// allocated is the space a file takes on disk, which for sparse files
// and small files differs from its size.
func allocated(info os.FileInfo) uint64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Blocks) * 512
	}
	return uint64(info.Size())
}
