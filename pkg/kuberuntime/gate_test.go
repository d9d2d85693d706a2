package kuberuntime

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testutil"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/podutil"
)

var gateNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func seenPod(uid string, seen time.Time) *v1.Pod {
	p := &v1.Pod{}
	p.UID = types.UID(uid)
	p.Annotations = map[string]string{podutil.ConfigFirstSeenAnnotationKey: seen.Format(time.RFC3339Nano)}
	return p
}

// TestStartGateAdmitsEarliestSeenFirst: with the slots taken, waiters are
// admitted in the order their pods were first seen, not the order they
// asked, so a burst's first pods are not held behind its last.
func TestStartGateAdmitsEarliestSeenFirst(t *testing.T) {
	g := newStartGate(1)
	ctx := context.Background()
	hold, err := g.acquire(ctx, seenPod("first", gateNow))
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 3)
	for _, w := range []struct {
		uid string
		at  time.Duration
	}{{"late", 3 * time.Second}, {"early", time.Second}, {"middle", 2 * time.Second}} {
		go func() {
			release, err := g.acquire(ctx, seenPod(w.uid, gateNow.Add(w.at)))
			if err != nil {
				order <- err.Error()
				return
			}
			order <- w.uid
			release()
		}()
	}
	// All three wait before the slot is given back.
	testutil.WaitFor(t, "the condition", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.waiting) == 3 })
	hold()
	got := fmt.Sprint(<-order, " ", <-order, " ", <-order)
	if got != "early middle late" {
		t.Fatalf("admitted %s", got)
	}
	// The last one gives its slot back.
	testutil.WaitFor(t, "the condition", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.free == 1 })
}

// TestStartGateWaiterGivesUpWithItsContext: a cancelled waiter leaves
// the queue and never holds a slot.
func TestStartGateWaiterGivesUpWithItsContext(t *testing.T) {
	g := newStartGate(1)
	hold, _ := g.acquire(context.Background(), seenPod("a", gateNow))
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() {
		_, err := g.acquire(ctx, seenPod("b", gateNow))
		errs <- err
	}()
	testutil.WaitFor(t, "the condition", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.waiting) == 1 })
	cancel()
	if err := <-errs; err != context.Canceled {
		t.Fatalf("err %v", err)
	}
	hold()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.free != 1 || len(g.waiting) != 0 {
		t.Fatalf("free %d, waiting %d", g.free, len(g.waiting))
	}
}

// TestStartGateStopHoldsItsSlotBriefly: a stop that outlasts its hold
// gives its slot to the next pod while it goes on waiting.
func TestStartGateStopHoldsItsSlotBriefly(t *testing.T) {
	clk := testingclock.NewFakeClock(gateNow)
	g := newStartGate(1)
	release, err := g.acquireFor(context.Background(), seenPod("slow", gateNow), stopHold, clk)
	if err != nil {
		t.Fatal(err)
	}
	next := make(chan struct{})
	go func() {
		r, err := g.acquire(context.Background(), seenPod("next", gateNow.Add(time.Second)))
		if err == nil {
			r()
		}
		close(next)
	}()
	testutil.WaitFor(t, "the condition", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.waiting) == 1 })
	testutil.WaitFor(t, "the condition", clk.HasWaiters)
	clk.Step(stopHold)
	<-next
	// The slow stop ends later: releasing again frees nothing twice.
	release()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.free != 1 {
		t.Fatalf("%d slots free, want 1", g.free)
	}
}

// TestStartGateBackgroundWaitsForPods: garbage collection waiting first
// still goes after a pod that asks later.
func TestStartGateBackgroundWaitsForPods(t *testing.T) {
	g := newStartGate(1)
	ctx := context.Background()
	hold, _ := g.acquire(ctx, seenPod("a", gateNow))
	order := make(chan string, 2)
	go func() {
		r, _ := g.acquireBackground(ctx)
		order <- "gc"
		r()
	}()
	testutil.WaitFor(t, "the condition", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.waiting) == 1 })
	go func() {
		r, _ := g.acquire(ctx, seenPod("late", gateNow.Add(time.Hour)))
		order <- "pod"
		r()
	}()
	testutil.WaitFor(t, "the condition", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.waiting) == 2 })
	hold()
	if got := <-order + " " + <-order; got != "pod gc" {
		t.Fatalf("admitted %s", got)
	}
}

// TestUnexpectedLeavesOutWhatNodeletStops: exits of containers nodelet is
// stopping (or stopped a moment ago) are not news; others are.
func TestUnexpectedLeavesOutWhatNodeletStops(t *testing.T) {
	clk := testingclock.NewFakeClock(gateNow)
	m := &Manager{stopping: newStopping(clk)}
	done := m.stopping.begin("stopping")
	if got := fmt.Sprint(m.Unexpected([]string{"stopping", "crashed"})); got != "[crashed]" {
		t.Fatalf("unexpected %s during the stop", got)
	}
	done()
	clk.Step(stoppingLinger)
	if got := fmt.Sprint(m.Unexpected([]string{"stopping"})); got != "[]" {
		t.Fatalf("unexpected %s just after the stop", got)
	}
	clk.Step(time.Second)
	if got := fmt.Sprint(m.Unexpected([]string{"stopping"})); got != "[stopping]" {
		t.Fatalf("unexpected %s long after the stop: a later exit is news", got)
	}
}
