package testbed

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the kernel's USER_HZ, in which /proc reports CPU times.
const clockTicks = 100

// ProcessCPU returns the CPU time (user plus system) a process used so far.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces; the fields after it do not.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	var ticks int64
	for _, i := range []int{11, 12} { // utime, stime (fields 14 and 15)
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
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
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, err
	}
	var m Memory
	fields := map[string]*int64{"VmRSS:": &m.RSS, "RssAnon:": &m.Anon, "RssFile:": &m.File}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || fields[f[0]] == nil {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return Memory{}, err
		}
		*fields[f[0]] = kb << 10
	}
	if m.RSS == 0 {
		return Memory{}, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return m, nil
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

// CPUByCommand returns the CPU time used so far by every process on the
// machine, summed by command name (containerd, kube-apiserver, runc, …).
// Processes that ended meanwhile are not counted, so compare two
// snapshots only for long-lived processes, or read the difference as a
// lower bound.
func CPUByCommand() map[string]time.Duration {
	out := map[string]time.Duration{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		cpu, err := ProcessCPU(pid)
		if err != nil {
			continue
		}
		out[s[open+1:close]] += cpu
	}
	return out
}
