package testbed

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/procfs"
)

// ProcessCPU returns the CPU time (user plus system) a process used so
// far, to the nanosecond where the kernel says: the sum of its threads'
// run time (/proc/<pid>/task/*/schedstat). /proc/<pid>/stat counts in
// 10 ms ticks, too coarse for an idle process over half a minute (0.004
// cores for 30 s is 12 ticks, each reading off by up to one). Threads
// that ended are not counted: Go ends a thread only when a goroutine
// locked to it exits, which nodelet never does.
func ProcessCPU(pid int) (time.Duration, error) {
	if d, err := threadsRunTime(pid); err == nil {
		return d, nil
	}
	st, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	return time.Duration(st.CPUTime() * float64(time.Second)), nil
}

// procStat reads /proc/<pid>/stat.
func procStat(pid int) (procfs.ProcStat, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return procfs.ProcStat{}, err
	}
	return p.Stat()
}

// threadsRunTime sums the nanoseconds each of its threads ran.
func threadsRunTime(pid int) (time.Duration, error) {
	threads, err := procfs.AllThreads(pid)
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, t := range threads {
		st, err := t.Schedstat()
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread ended meanwhile
		}
		if err != nil {
			return 0, err
		}
		sum += time.Duration(st.RunningNanoseconds)
	}
	return sum, nil
}

// Memory is a process's resident memory, in bytes.
type Memory struct {
	// RSS is all of it: Anon plus File plus shared memory.
	RSS int64
	// Anon is the heap, stacks and runtime structures; File is the
	// binary's and libraries' pages that were touched.
	Anon, File int64
}

// ProcessMemory reads a process's resident memory.
func ProcessMemory(pid int) (Memory, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return Memory{}, err
	}
	st, err := p.NewStatus()
	if err != nil {
		return Memory{}, err
	}
	if st.VmRSS == 0 {
		return Memory{}, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return Memory{RSS: int64(st.VmRSS), Anon: int64(st.RssAnon), File: int64(st.RssFile)}, nil
}

// MajorFaults reads how many page faults of a process had to read from
// the disk (a file-backed page not in the page cache).
func MajorFaults(pid int) (uint, error) {
	st, err := procStat(pid)
	return st.MajFlt, err
}

// CPUCores measures a process's average CPU use, in cores, over d.
func CPUCores(pid int, d time.Duration) (float64, error) {
	before, err := ProcessCPU(pid)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	time.Sleep(d) // the measurement window
	after, err := ProcessCPU(pid)
	if err != nil {
		return 0, err
	}
	return (after - before).Seconds() / time.Since(start).Seconds(), nil
}

// userHZ is the unit of /proc/<pid>/stat's times, fixed at 100 on Linux
// whatever the kernel's tick (procfs's CPUTime assumes it too).
const userHZ = 100

// Machine is the key under which CPUByCommand returns the whole
// machine's busy time (/proc/stat: user, system, interrupts), which
// counts the processes that ended meanwhile too.
const Machine = "(the machine)"

// System is the key under which CPUByCommand returns the part of a
// command's CPU time spent in the kernel on its behalf (its system time:
// its syscalls and page faults).
func System(comm string) string { return comm + " (system)" }

// CPUByCommand returns the CPU time used so far by every process on the
// machine, summed by command name (containerd, kube-apiserver, runc, …),
// and the machine's under Machine, and the system time of each under
// System(name). Processes that ended meanwhile are not
// counted by name (runc, the CNI plugins), so compare two snapshots by
// name only for long-lived processes, or read the difference as a lower
// bound.
func CPUByCommand() map[string]time.Duration {
	out := map[string]time.Duration{}
	if fs, err := procfs.NewDefaultFS(); err == nil {
		if st, err := fs.Stat(); err == nil {
			t := st.CPUTotal
			out[Machine] = time.Duration((t.User + t.Nice + t.System + t.IRQ + t.SoftIRQ + t.Steal) * float64(time.Second))
		}
	}
	procs, err := procfs.AllProcs()
	if err != nil {
		return out
	}
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil {
			continue // ended meanwhile
		}
		out[st.Comm] += time.Duration(st.CPUTime() * float64(time.Second))
		out[System(st.Comm)] += time.Duration(float64(st.STime) / userHZ * float64(time.Second))
	}
	return out
}
