// Package timerslack widens the kernel's timer slack for nodelet's
// threads, so that the Go runtime's short sleeps wake the CPU less often.
//
// The kernel lets a sleeping thread's timer fire up to its timer slack
// late, so that wake-ups group together; a thread's slack is 50 µs
// unless someone sets it. The Go runtime's system monitor (sysmon, one
// thread of every Go program) sleeps 20 µs at a time while any goroutine
// runs, up to 10 ms once it has found nothing to do for 50 sleeps, and
// it is woken by the first system call after the process was idle. On
// the development VM, where a context switch is dear, sysmon's sleeps and
// wake-ups were a fifth of nodelet's CPU, idle and under bursts alike
// (perf, docs/performance.md). With a slack of 1 ms each of its short
// sleeps lasts about a millisecond instead of 70 µs, so it wakes up to
// ten times less often; any other timer of nodelet fires up to 1 ms late,
// which nothing of a node agent notices.
//
// A thread inherits its creator's slack, so once every thread has it,
// every later one has it too. A slack other than the kernel's default is
// the operator's (systemd's TimerSlackNSec=, or prctl in a wrapper) and
// is kept. Setting another thread's slack takes CAP_SYS_NICE; without it
// (an unprivileged test run) Widen says so, and the slack stays as it was.
package timerslack

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// KernelDefault is the timer slack the kernel gives a thread nobody set
// one for.
const KernelDefault = 50 * time.Microsecond

// Result says what Widen did.
type Result struct {
	// Threads is how many threads' slack Widen set.
	Threads int
	// Kept is the operator's slack, when Widen found one and kept it.
	Kept time.Duration
}

// Widen sets the timer slack of every thread of the process to slack,
// unless the calling thread's is not the kernel's default: then the
// process runs with its operator's slack, which Widen keeps.
func Widen(slack time.Duration) (Result, error) {
	cur, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		return Result{}, fmt.Errorf("reading the timer slack: %w", err)
	}
	if time.Duration(cur) != KernelDefault {
		return Result{Kept: time.Duration(cur)}, nil
	}
	var res Result
	// A thread created during a pass by one not yet set starts with the
	// default: passes go on until one finds every thread set.
	for pass := 0; pass < 5; pass++ {
		n, err := setAll(slack)
		res.Threads += n
		if err != nil || n == 0 {
			return res, err
		}
	}
	return res, nil
}

// setAll sets slack on each thread of the process that has another, and
// returns how many it set.
func setAll(slack time.Duration) (int, error) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, fmt.Errorf("listing the threads: %w", err)
	}
	want := strconv.FormatInt(slack.Nanoseconds(), 10)
	set := 0
	for _, t := range tasks {
		// /proc/<tid> is the thread's own view (/proc/self/task/<tid>
		// has no timerslack_ns).
		path := "/proc/" + t.Name() + "/timerslack_ns"
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread exited
		}
		if err != nil {
			return set, fmt.Errorf("reading thread %s's timer slack: %w", t.Name(), err)
		}
		if strings.TrimSpace(string(b)) == want {
			continue
		}
		switch err := os.WriteFile(path, []byte(want), 0); {
		case err == nil:
			set++
		case !errors.Is(err, os.ErrNotExist): // not the thread exiting
			return set, fmt.Errorf("setting thread %s's timer slack: %w", t.Name(), err)
		}
	}
	return set, nil
}
