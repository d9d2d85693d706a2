package stats

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fscommon"
	"github.com/opencontainers/cgroups/manager"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Detail is what cAdvisor reports of a running container beyond the CRI's
// stats, read as cAdvisor reads it: from the container's cgroup (CPU time
// by mode, memory, block I/O, its limits) and its processes in /proc.
// nodelet has no cAdvisor, and upstream's node e2e ("ContainerMetrics
// should report container metrics") reads every one of these from
// /metrics/cadvisor.
type Detail struct {
	UserNanos, SystemNanos uint64
	// Memory, in bytes but Failcnt.
	Cache, MappedFile, MaxUsage, Failcnt, Swap uint64
	// Events of memory.events (cgroup v2; 0 on v1) and OOM kills.
	EventsHigh, EventsMax, OOMKills uint64
	// Block I/O by device, bytes and operations by operation (Read,
	// Write, Sync, Async, Discard, Total), as the kernel counts them.
	Disks []DiskIO
	// Processes, their threads, open files and sockets; ThreadsMax is
	// pids.max (0 without a limit); NoFileSoft is the first process's
	// soft limit of open files.
	Processes, Threads, FileDescriptors, Sockets, ThreadsMax, NoFileSoft uint64
	// The cgroup's settings; an unlimited value is 0, as cAdvisor
	// reports it.
	CPUPeriod, CPUShares, MemoryLimit, MemoryReservation, SwapLimit uint64
}

// DiskIO is one block device's I/O.
type DiskIO struct {
	Device       string
	Major, Minor uint64
	Bytes, Ops   map[string]uint64
}

// StatusRuntime is what Details asks the runtime: a container's status,
// verbose, for its process ID.
type StatusRuntime interface {
	ContainerStatus(ctx context.Context, in *runtimeapi.ContainerStatusRequest, opts ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error)
}

// Details reads containers' Details. A container's first process is
// asked of the runtime once and kept: it never changes.
type Details struct {
	runtime StatusRuntime
	// proc and sys are /proc and /sys (tests point them at fixtures).
	proc, sys string

	mu   sync.Mutex
	pids map[string]int
}

// NewDetails reads through the runtime, /proc and /sys.
func NewDetails(rt StatusRuntime) *Details {
	return &Details{runtime: rt, proc: "/proc", sys: "/sys", pids: map[string]int{}}
}

// Forget drops what is kept of containers not in live.
func (d *Details) Forget(live map[string]bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id := range d.pids {
		if !live[id] {
			delete(d.pids, id)
		}
	}
}

// Read reads one running container's Detail.
func (d *Details) Read(ctx context.Context, id string) (*Detail, error) {
	pid, err := d.pid(ctx, id)
	if err != nil {
		return nil, err
	}
	paths, err := d.cgroupPaths(pid)
	if err != nil {
		d.mu.Lock()
		delete(d.pids, id) // gone: ask again next time
		d.mu.Unlock()
		return nil, err
	}
	m, err := manager.NewWithPaths(&cgroups.Cgroup{Resources: &cgroups.Resources{SkipDevices: true}}, paths)
	if err != nil {
		return nil, err
	}
	st, err := m.GetStats()
	if err != nil {
		return nil, fmt.Errorf("container %s's cgroup: %w", id, err)
	}
	out := &Detail{}
	d.fromStats(out, st)
	d.settings(out, paths)
	d.processes(out, paths, pid)
	return out, nil
}

// pid is the container's first process, from its verbose status (the
// "info" JSON of containerd and CRI-O).
func (d *Details) pid(ctx context.Context, id string) (int, error) {
	d.mu.Lock()
	pid, ok := d.pids[id]
	d.mu.Unlock()
	if ok {
		return pid, nil
	}
	resp, err := d.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		return 0, err
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil || info.Pid <= 0 {
		return 0, fmt.Errorf("container %s: the runtime names no process (%v)", id, err)
	}
	d.mu.Lock()
	d.pids[id] = info.Pid
	d.mu.Unlock()
	return info.Pid, nil
}

// cgroupPaths are the directories of the process's cgroup: one per
// controller on cgroup v1, the unified one ("") on v2.
func (d *Details) cgroupPaths(pid int) (map[string]string, error) {
	byController, err := cgroups.ParseCgroupFile(filepath.Join(d.proc, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return nil, err
	}
	root := filepath.Join(d.sys, "fs", "cgroup")
	if p, ok := byController[""]; ok && len(byController) == 1 {
		return map[string]string{"": filepath.Join(root, p)}, nil
	}
	paths := map[string]string{}
	for _, c := range []string{"cpu", "cpuacct", "memory", "blkio", "pids"} {
		if p, ok := byController[c]; ok {
			if dir := filepath.Join(root, c, p); exists(dir) {
				paths[c] = dir
			}
		}
	}
	if paths["memory"] == "" {
		return nil, fmt.Errorf("process %d: no memory cgroup found", pid)
	}
	return paths, nil
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func (d *Details) fromStats(out *Detail, st *cgroups.Stats) {
	u := st.CpuStats.CpuUsage
	out.UserNanos, out.SystemNanos = u.UsageInUsermode, u.UsageInKernelmode
	m := st.MemoryStats
	out.Cache = first(m.Stats, "total_cache", "file")
	out.MappedFile = first(m.Stats, "total_mapped_file", "file_mapped")
	out.MaxUsage, out.Failcnt = m.Usage.MaxUsage, m.Usage.Failcnt
	if cgroups.IsCgroup2UnifiedMode() {
		out.Swap = m.SwapOnlyUsage.Usage
	} else if m.SwapUsage.Usage > m.Usage.Usage {
		out.Swap = m.SwapUsage.Usage - m.Usage.Usage
	}
	out.ThreadsMax = st.PidsStats.Limit
	disks := map[[2]uint64]*DiskIO{}
	add := func(entries []cgroups.BlkioStatEntry, bytes bool) {
		for _, e := range entries {
			k := [2]uint64{e.Major, e.Minor}
			io := disks[k]
			if io == nil {
				io = &DiskIO{Device: d.deviceName(e.Major, e.Minor), Major: e.Major, Minor: e.Minor, Bytes: map[string]uint64{}, Ops: map[string]uint64{}}
				disks[k] = io
			}
			if bytes {
				io.Bytes[e.Op] = e.Value
			} else {
				io.Ops[e.Op] = e.Value
			}
		}
	}
	add(st.BlkioStats.IoServiceBytesRecursive, true)
	add(st.BlkioStats.IoServicedRecursive, false)
	for _, io := range disks {
		out.Disks = append(out.Disks, *io)
	}
	slices.SortFunc(out.Disks, func(a, b DiskIO) int {
		return cmp.Or(cmp.Compare(a.Major, b.Major), cmp.Compare(a.Minor, b.Minor))
	})
}

// deviceName is a block device's /dev path, from /sys/dev/block, as
// cAdvisor labels it; "" when it cannot be read.
func (d *Details) deviceName(major, minor uint64) string {
	f, err := os.Open(filepath.Join(d.sys, "dev", "block", fmt.Sprintf("%d:%d", major, minor), "uevent"))
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if name, ok := strings.CutPrefix(sc.Text(), "DEVNAME="); ok {
			return "/dev/" + name
		}
	}
	return ""
}

// settings reads the cgroup's limits, and the memory events and OOM
// kills, which GetStats leaves out.
func (d *Details) settings(out *Detail, paths map[string]string) {
	if dir, ok := paths[""]; ok {
		out.CPUPeriod, out.CPUShares = cpuMaxPeriod(dir), sharesOfWeight(readUint(dir, "cpu.weight"))
		out.MemoryLimit, out.MemoryReservation, out.SwapLimit = limit(readUint(dir, "memory.max")), limit(readUint(dir, "memory.low")), limit(readUint(dir, "memory.swap.max"))
		events := keyed(dir, "memory.events")
		out.EventsHigh, out.EventsMax, out.OOMKills = events["high"], events["max"], events["oom_kill"]
		return
	}
	out.CPUPeriod, out.CPUShares = readUint(paths["cpu"], "cpu.cfs_period_us"), readUint(paths["cpu"], "cpu.shares")
	mem := paths["memory"]
	out.MemoryLimit, out.MemoryReservation = limit(readUint(mem, "memory.limit_in_bytes")), limit(readUint(mem, "memory.soft_limit_in_bytes"))
	out.SwapLimit = limit(readUint(mem, "memory.memsw.limit_in_bytes"))
	out.OOMKills = keyed(mem, "memory.oom_control")["oom_kill"]
}

// limit reports an unlimited value (the kernel's "max", or v1's page
// counter maximum) as 0, as cAdvisor does.
func limit(v uint64) uint64 {
	if v > 1<<62 {
		return 0
	}
	return v
}

func readUint(dir, file string) uint64 {
	if dir == "" {
		return 0
	}
	v, err := fscommon.GetCgroupParamUint(dir, file)
	if err != nil {
		return 0
	}
	return v
}

// keyed reads a flat "key value" file.
func keyed(dir, file string) map[string]uint64 {
	out := map[string]uint64{}
	s, err := cgroups.ReadFile(dir, file)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
				out[k] = n
			}
		}
	}
	return out
}

// cpuMaxPeriod is the period of cgroup v2's cpu.max ("max 100000").
func cpuMaxPeriod(dir string) uint64 {
	s, err := cgroups.ReadFile(dir, "cpu.max")
	if err != nil {
		return 0
	}
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0
	}
	n, _ := strconv.ParseUint(f[1], 10, 64)
	return n
}

// sharesOfWeight turns cgroup v2's cpu.weight back into v1 shares, as
// cAdvisor reports them (the inverse of the kubelet's conversion).
func sharesOfWeight(w uint64) uint64 {
	if w == 0 {
		return 0
	}
	return 2 + ((w-1)*262142)/9999
}

// processes counts the cgroup's processes and their threads, open files
// and sockets, and reads the first process's open-files limit.
func (d *Details) processes(out *Detail, paths map[string]string, first int) {
	dir := paths[""]
	if dir == "" {
		dir = paths["memory"]
	}
	pids, err := cgroups.GetAllPids(dir)
	if err != nil {
		return
	}
	out.Processes = uint64(len(pids))
	for _, pid := range pids {
		base := filepath.Join(d.proc, strconv.Itoa(pid))
		if tasks, err := os.ReadDir(filepath.Join(base, "task")); err == nil {
			out.Threads += uint64(len(tasks))
		}
		fds, err := os.ReadDir(filepath.Join(base, "fd"))
		if err != nil {
			continue
		}
		out.FileDescriptors += uint64(len(fds))
		for _, fd := range fds {
			if target, err := os.Readlink(filepath.Join(base, "fd", fd.Name())); err == nil && strings.HasPrefix(target, "socket:") {
				out.Sockets++
			}
		}
	}
	out.NoFileSoft = d.noFileSoft(first)
}

// noFileSoft reads "Max open files" of /proc/<pid>/limits.
func (d *Details) noFileSoft(pid int) uint64 {
	f, err := os.Open(filepath.Join(d.proc, strconv.Itoa(pid), "limits"))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Max open files"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				n, _ := strconv.ParseUint(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}
