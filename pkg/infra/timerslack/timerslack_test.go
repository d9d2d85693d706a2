package timerslack

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The tests run Widen in a child process (this test binary again): it
// changes every thread of the process that calls it.
const childEnv = "NODELET_TIMERSLACK_CHILD"

// report is what the child found, as JSON on its stdout.
type report struct {
	Res    Result
	Err    string
	Denied bool
	// Threads is how many threads the process had after Widen.
	Threads int
	// Before and After are every thread's slack, in ns; Later are those
	// of threads started after Widen returned.
	Before, After, Later []int64
}

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		child()
		return
	}
	os.Exit(m.Run())
}

func child() {
	var r report
	r.Before = slacks()
	res, err := Widen(time.Millisecond)
	r.Res = res
	if err != nil {
		r.Err, r.Denied = err.Error(), errors.Is(err, os.ErrPermission)
	}
	r.After = slacks()
	tasks, _ := os.ReadDir("/proc/self/task")
	r.Threads = len(tasks)
	r.Later = newThreadSlacks(4)
	_ = json.NewEncoder(os.Stdout).Encode(r)
}

// slacks reads every thread's timer slack (without CAP_SYS_NICE, only
// the calling thread's can be read).
func slacks() []int64 {
	tasks, _ := os.ReadDir("/proc/self/task")
	var out []int64
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/" + t.Name() + "/timerslack_ns")
		if err != nil {
			continue
		}
		v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		out = append(out, v)
	}
	return out
}

// newThreadSlacks makes the runtime start n threads (goroutines locked to
// their thread, all blocked at once) and reads each one's own slack.
func newThreadSlacks(n int) []int64 {
	var wg sync.WaitGroup
	out := make([]int64, n)
	hold := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // never unlocked: the thread exits with it
			v, _ := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
			out[i] = int64(v)
			<-hold
		}()
	}
	close(hold)
	wg.Wait()
	return out
}

// runChild runs the child, with its main thread's slack set to slack
// first when it is not 0 (a thread inherits its creator's slack).
func runChild(t *testing.T, slack time.Duration) report {
	t.Helper()
	var out []byte
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The child is forked from this thread, which keeps the slack set
		// here; it exits with the goroutine, as it stays locked.
		runtime.LockOSThread()
		if slack != 0 {
			if err = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(slack.Nanoseconds()), 0, 0, 0); err != nil {
				return
			}
		}
		cmd := exec.Command(os.Args[0], "-test.run", "^$")
		cmd.Env = append(os.Environ(), childEnv+"=1")
		out, err = cmd.Output()
	}()
	<-done
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	var r report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("child's report %q: %v", out, err)
	}
	return r
}

func all(vs []int64, want time.Duration) bool {
	for _, v := range vs {
		if v != want.Nanoseconds() {
			return false
		}
	}
	return len(vs) > 0
}

// Every thread gets the slack, and so does every thread started after;
// without CAP_SYS_NICE Widen says it was refused.
func TestWidenSetsEveryThread(t *testing.T) {
	r := runChild(t, 0)
	if !all(r.Before, KernelDefault) {
		t.Fatalf("the child's threads started with slacks %v, want the kernel's default everywhere", r.Before)
	}
	if r.Denied {
		// Unprivileged: refused for the other threads, and said so.
		if r.Res.Threads >= r.Threads {
			t.Errorf("refused, yet set %d threads of %d", r.Res.Threads, r.Threads)
		}
		t.Logf("without CAP_SYS_NICE: %s", r.Err)
		return
	}
	if r.Err != "" {
		t.Fatalf("Widen: %s", r.Err)
	}
	if !all(r.After, time.Millisecond) || len(r.After) != r.Threads || r.Res.Threads < len(r.Before) {
		t.Errorf("after Widen: slacks %v, %d threads set; want 1ms on all %d", r.After, r.Res.Threads, r.Threads)
	}
	if !all(r.Later, time.Millisecond) {
		t.Errorf("threads started after Widen have slacks %v, want 1ms", r.Later)
	}
}

// A slack the operator set (here by the parent, as systemd's
// TimerSlackNSec= does) is kept, and no thread is changed.
func TestWidenKeepsTheOperatorsSlack(t *testing.T) {
	const operators = 200 * time.Microsecond
	r := runChild(t, operators)
	if r.Err != "" {
		t.Fatalf("Widen: %s", r.Err)
	}
	if r.Res.Kept != operators || r.Res.Threads != 0 {
		t.Errorf("Widen returned %+v, want the operator's %v kept and no thread set", r.Res, operators)
	}
	if !all(r.Before, operators) || !all(r.After, operators) {
		t.Errorf("slacks before %v, after %v; want %v throughout", r.Before, r.After, operators)
	}
}
