package kuberuntime

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	testingclock "k8s.io/utils/clock/testing"
)

// A sidecar's turn comes once the app containers and the sidecar
// declared after it have stopped; the wait counts in whole seconds
// against its grace period, and ends when the grace period does.
func TestSidecarTurns(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	pod := newPod(v1.RestartPolicyAlways, "app").sidecar("s1").sidecar("s2").pod
	running := map[string]bool{"app": true, "s1": true, "s2": true}

	order := newTurns(clk, pod, running)
	if got := order.wait("app", 30); got != 0 {
		t.Fatalf("the app waited %ds: it waits for nothing", got)
	}
	waited := make(chan int64)
	go func() { waited <- order.wait("s1", 30) }()
	waitForTimers(t, clk)
	clk.Step(3500 * time.Millisecond)
	order.stopped("app")
	select {
	case w := <-waited:
		t.Fatalf("s1's turn came after %ds, before s2 stopped", w)
	case <-time.After(50 * time.Millisecond):
	}
	order.stopped("s2")
	if w := <-waited; w != 3 {
		t.Fatalf("s1 waited %ds, want the 3 whole seconds", w)
	}

	// The grace period runs out first: the turn comes then.
	order = newTurns(clk, pod, running)
	go func() { waited <- order.wait("s2", 5) }()
	waitForTimers(t, clk)
	clk.Step(5 * time.Second)
	if w := <-waited; w != 5 {
		t.Fatalf("s2 waited %ds, want its whole grace period of 5", w)
	}
	// No grace left: no wait; a container not running is no one's wait.
	if w := newTurns(clk, pod, running).wait("s1", 0); w != 0 {
		t.Fatalf("waited %ds with no grace period", w)
	}
	if w := newTurns(clk, pod, map[string]bool{"s1": true}).wait("s1", 30); w != 0 {
		t.Fatalf("waited %ds for containers that are not running", w)
	}
}

func waitForTimers(t *testing.T, clk *testingclock.FakeClock) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("no wait began")
		}
		time.Sleep(time.Millisecond)
	}
}
