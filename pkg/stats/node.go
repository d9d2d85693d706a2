package stats

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	mem, err := p.memory(now)
	if err != nil {
		return nil, err
	}
	n := &statsapi.NodeStats{
		NodeName:  p.o.NodeName,
		StartTime: metav1.NewTime(boot),
		CPU: &statsapi.CPUStats{Time: metav1.NewTime(now), UsageCoreNanoSeconds: &usage,
			UsageNanoCores: p.nanoCores("node", now, usage)},
		Memory: mem,
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
	f, err := os.Open(filepath.Join(p.o.ProcDir, "stat"))
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("node CPU: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) > 8 && fields[0] == "cpu":
			var ticks uint64
			// user nice system idle iowait irq softirq steal
			for i, f := range fields[1:9] {
				if i == 3 || i == 4 {
					continue
				}
				v, _ := strconv.ParseUint(f, 10, 64)
				ticks += v
			}
			usage = ticks * uint64(time.Second/userHZ)
		case len(fields) == 2 && fields[0] == "btime":
			s, _ := strconv.ParseInt(fields[1], 10, 64)
			boot = time.Unix(s, 0)
		}
	}
	return usage, boot, sc.Err()
}

// memory reports the node's memory as the kubelet does: the working set
// is what is in use minus the page cache the kernel could reclaim
// first (inactive file pages), and available is what is left of the
// total after it.
func (p *Provider) memory(now time.Time) (*statsapi.MemoryStats, error) {
	info, err := readKeyValues(filepath.Join(p.o.ProcDir, "meminfo"), 1024)
	if err != nil {
		return nil, fmt.Errorf("node memory: %w", err)
	}
	total, free := info["MemTotal"], info["MemFree"]
	usage := total - free
	ws := usage
	if inactive := info["Inactive(file)"]; inactive < ws {
		ws -= inactive
	}
	avail := total - ws
	rss := info["AnonPages"]
	m := &statsapi.MemoryStats{Time: metav1.NewTime(now), UsageBytes: &usage, WorkingSetBytes: &ws, AvailableBytes: &avail, RSSBytes: &rss}
	if vm, err := readKeyValues(filepath.Join(p.o.ProcDir, "vmstat"), 1); err == nil {
		faults, major := vm["pgfault"], vm["pgmajfault"]
		m.PageFaults, m.MajorPageFaults = &faults, &major
	}
	return m, nil
}

// readKeyValues reads "key: value [kB]" or "key value" lines, scaling the
// values by unit.
func readKeyValues(path string, unit uint64) (map[string]uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		v, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			continue
		}
		out[strings.TrimSuffix(fields[0], ":")] = v * unit
	}
	return out, nil
}

// hostNetwork reads the host's interfaces from /proc/net/dev; the default
// one is the interface of the default route.
func (p *Provider) hostNetwork(now time.Time) *statsapi.NetworkStats {
	b, err := os.ReadFile(filepath.Join(p.o.ProcDir, "net", "dev"))
	if err != nil {
		return nil
	}
	def := p.defaultInterface()
	out := &statsapi.NetworkStats{Time: metav1.NewTime(now)}
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		name = strings.TrimSpace(name)
		fields := strings.Fields(rest)
		if !ok || len(fields) < 11 || name == "lo" {
			continue
		}
		num := func(i int) *uint64 {
			v, _ := strconv.ParseUint(fields[i], 10, 64)
			return &v
		}
		// receive: bytes packets errs ...; transmit starts at field 8.
		i := statsapi.InterfaceStats{Name: name, RxBytes: num(0), RxErrors: num(2), TxBytes: num(8), TxErrors: num(10)}
		out.Interfaces = append(out.Interfaces, i)
		if name == def {
			out.InterfaceStats = i
		}
	}
	return out
}

func (p *Provider) defaultInterface() string {
	b, err := os.ReadFile(filepath.Join(p.o.ProcDir, "net", "route"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 1 && f[1] == "00000000" {
			return f[0]
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

// Signals measures what the node's pressure conditions are computed
// from: memory, the root directory's and the image filesystem's space
// and inodes, and processes. It leaves CPU alone, so the summary's CPU
// rates keep their own sampling.
func (p *Provider) Signals(ctx context.Context) (*statsapi.NodeStats, error) {
	now := p.o.Clock.Now()
	mem, err := p.memory(now)
	if err != nil {
		return nil, err
	}
	n := &statsapi.NodeStats{NodeName: p.o.NodeName, Memory: mem, Fs: p.dirFs("", p.o.RootDir), Rlimit: p.rlimit(now)}
	imageFs, err := p.imageFs(ctx)
	if err != nil {
		return nil, err
	}
	n.Runtime = &statsapi.RuntimeStats{ImageFs: imageFs}
	return n, nil
}
