package health

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testutil"

	testingclock "k8s.io/utils/clock/testing"
)

// TestUncheckedRuntimeStopsSyncingUntilChecked: before the first status
// check the runtime is not known to be ready; Run checks it at once.
func TestUncheckedRuntimeStopsSyncingUntilChecked(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	var calls atomic.Int32
	n := New(Options{Clock: clk, Runtime: func(context.Context) (error, error) {
		calls.Add(1)
		return nil, errors.New("cni config uninitialized")
	}})
	if err := n.SyncError(); err == nil || !strings.Contains(err.Error(), "may not have completed") {
		t.Fatalf("unchecked runtime: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- n.Run(ctx) }()
	testutil.WaitFor(t, "Run to check the runtime", func() bool { return n.SyncError() == nil })
	// The network is not ready: pods may sync (host-network ones need no
	// network), but the node is not Ready.
	if err := n.ReadyError(); err == nil || err.Error() != "cni config uninitialized" {
		t.Fatalf("ready with no network: %v", err)
	}
	// The next check comes a period later, not before.
	testutil.WaitFor(t, "Run to wait for the next period", clk.HasWaiters)
	if c := calls.Load(); c != 1 {
		t.Fatalf("%d runtime checks before the period passed, want 1", c)
	}
	clk.Step(DefaultRuntimeCheckPeriod)
	testutil.WaitFor(t, "the periodic check", func() bool { return calls.Load() >= 2 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestRuntimeAndPLEGGateSyncing: either one failing stops pod syncing and
// readiness; only the PLEG fails /healthz, since a runtime that is down is
// not nodelet being stuck.
func TestRuntimeAndPLEGGateSyncing(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	var plegErr error
	n := New(Options{Clock: clk, PLEG: func() error { return plegErr }})
	n.SetRuntime(errors.New("runtime down"), nil)
	if err := n.SyncError(); err == nil || err.Error() != "runtime down" {
		t.Fatalf("sync with the runtime down: %v", err)
	}
	if err := n.Healthz(); err != nil {
		t.Fatalf("healthz with the runtime down: %v", err)
	}
	n.SetRuntime(nil, nil)
	plegErr = errors.New("pleg was last seen active 4m0s ago")
	for name, err := range map[string]error{"sync": n.SyncError(), "healthz": n.Healthz(), "ready": n.ReadyError()} {
		if err != plegErr {
			t.Fatalf("%s with a stalled PLEG: %v", name, err)
		}
	}
}

// TestSyncLoopThreshold: a loop that does not iterate within the
// threshold (counted from New, for a loop that never starts) is unhealthy.
func TestSyncLoopThreshold(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	n := New(Options{Clock: clk})
	n.SetRuntime(nil, nil)
	clk.Step(DefaultSyncLoopThreshold)
	if err := n.Healthz(); err != nil {
		t.Fatalf("unhealthy at the threshold: %v", err)
	}
	clk.Step(time.Second)
	if err := n.ReadyError(); err == nil || !strings.Contains(err.Error(), "sync loop last completed an iteration 31s ago") {
		t.Fatalf("a loop that never started: %v", err)
	}
	n.SyncLoopIterated()
	if err := n.ReadyError(); err != nil {
		t.Fatalf("after an iteration: %v", err)
	}
}

// TestSyncLoopHandled: a handled event counts as an iteration, and its
// kind and length go to the observer.
func TestSyncLoopHandled(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	var seen []string
	n := New(Options{Clock: clk, ObserveSyncLoop: func(event string, took time.Duration) { seen = append(seen, fmt.Sprint(event, " ", took)) }})
	n.SetRuntime(nil, nil)
	clk.Step(DefaultSyncLoopThreshold + time.Second)
	n.SyncLoopHandled("housekeeping", 3*time.Millisecond)
	if err := n.ReadyError(); err != nil || fmt.Sprint(seen) != "[housekeeping 3ms]" {
		t.Fatalf("after a handled event: %v, observed %v", err, seen)
	}
}

// TestChecksCountForHealthAndReadiness: a failing component check (the
// container event watcher, say) fails both, naming the component.
func TestChecksCountForHealthAndReadiness(t *testing.T) {
	var watcherErr error
	n := New(Options{Clock: testingclock.NewFakeClock(time.Unix(1000, 0)),
		Checks: []Check{{Name: "container event watcher", Check: func() error { return watcherErr }}}})
	n.SetRuntime(nil, nil)
	if err := n.ReadyError(); err != nil {
		t.Fatal(err)
	}
	watcherErr = errors.New("stream down for 2m0s")
	for _, err := range []error{n.Healthz(), n.ReadyError()} {
		if err == nil || err.Error() != "container event watcher: stream down for 2m0s" {
			t.Fatalf("err %v", err)
		}
	}
}
