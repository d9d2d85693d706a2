package periodic

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

func TestRun(t *testing.T) {
	for _, immediately := range []bool{true, false} {
		clk := testingclock.NewFakeClock(time.Unix(0, 0))
		calls := make(chan struct{}, 10)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			Run(ctx, clk, time.Second, immediately, func(context.Context) { calls <- struct{}{} })
			close(done)
		}()
		if immediately {
			<-calls // the first call, before any tick
		}
		// The ticker exists once Run started (or made its first call).
		deadline := time.Now().Add(10 * time.Second)
		for !clk.HasWaiters() {
			if time.Now().After(deadline) {
				t.Fatal("Run made no ticker")
			}
			runtime.Gosched()
		}
		select {
		case <-calls:
			t.Fatalf("immediately=%v: called before the first tick", immediately)
		default:
		}
		clk.Step(time.Second)
		<-calls
		cancel()
		<-done
	}
}

// TestWaitStopped: the wait returns as soon as the goroutines have, and
// gives up on one that never returns once the bound has passed.
func TestWaitStopped(t *testing.T) {
	var running sync.WaitGroup
	release := make(chan struct{})
	running.Add(1)
	go func() {
		defer running.Done()
		<-release
	}()
	if WaitStopped(&running, 20*time.Millisecond, "test") {
		t.Fatal("reported stopped while a goroutine still runs")
	}
	close(release)
	if !WaitStopped(&running, time.Minute, "test") {
		t.Fatal("not stopped after the goroutine returned")
	}
}
