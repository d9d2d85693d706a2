package runtimegate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testutil"
)

var gateNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func pod(uid string, seen time.Duration) Waiter {
	return Waiter{Seen: gateNow.Add(seen), UID: types.UID(uid)}
}

func waiting(g *Gate) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiting)
}

func inflight(g *Gate) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.count.inflight
}

// With the slots taken, waiters are admitted in the order their pods were
// first seen, not the order they asked, so a burst's first pods are not
// held behind its last.
func TestGateAdmitsEarliestSeenFirst(t *testing.T) {
	g := New(Options{Initial: 1, Max: 1})
	ctx := context.Background()
	hold, err := g.Acquire(ctx, pod("first", 0))
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 3)
	for _, w := range []struct {
		uid string
		at  time.Duration
	}{{"late", 3 * time.Second}, {"early", time.Second}, {"middle", 2 * time.Second}} {
		go func() {
			s, err := g.Acquire(ctx, pod(w.uid, w.at))
			if err != nil {
				order <- err.Error()
				return
			}
			order <- w.uid
			s.Release()
		}()
	}
	testutil.WaitFor(t, "three waiters", func() bool { return waiting(g) == 3 })
	hold.Release()
	if got := fmt.Sprint(<-order, " ", <-order, " ", <-order); got != "early middle late" {
		t.Fatalf("admitted %s", got)
	}
	testutil.WaitFor(t, "the last slot back", func() bool { return inflight(g) == 0 })
}

// A cancelled waiter leaves the queue and never holds a slot.
func TestGateWaiterGivesUpWithItsContext(t *testing.T) {
	g := New(Options{Initial: 1, Max: 1})
	hold, _ := g.Acquire(context.Background(), pod("a", 0))
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() {
		_, err := g.Acquire(ctx, pod("b", 0))
		errs <- err
	}()
	testutil.WaitFor(t, "a waiter", func() bool { return waiting(g) == 1 })
	cancel()
	if err := <-errs; err != context.Canceled {
		t.Fatalf("err %v", err)
	}
	hold.Release()
	if n, w := inflight(g), waiting(g); n != 0 || w != 0 {
		t.Fatalf("in flight %d, waiting %d", n, w)
	}
}

// A stop that outlasts its hold gives its slot to the next pod while it
// goes on waiting, and ending it later frees nothing twice.
func TestGateStopHoldsItsSlotBriefly(t *testing.T) {
	clk := testingclock.NewFakeClock(gateNow)
	g := New(Options{Initial: 1, Max: 1, Clock: clk})
	s, err := g.Acquire(context.Background(), pod("slow", 0))
	if err != nil {
		t.Fatal(err)
	}
	end := s.HoldFor(time.Second, ContainerStop)
	next := make(chan struct{})
	go func() {
		if s, err := g.Acquire(context.Background(), pod("next", time.Second)); err == nil {
			s.Release()
		}
		close(next)
	}()
	testutil.WaitFor(t, "a waiter", func() bool { return waiting(g) == 1 })
	testutil.WaitFor(t, "the hold's timer", clk.HasWaiters)
	clk.Step(time.Second)
	<-next
	end(nil)
	if n := inflight(g); n != 0 {
		t.Fatalf("%d in flight, want 0", n)
	}
	// It outlasted its hold: its length is not the runtime's.
	if _, counted := g.count.limit.idle[ContainerStop]; counted {
		t.Fatal("a stop that outlasted its hold was counted")
	}
	// One that ends within its hold is.
	s, _ = g.Acquire(context.Background(), pod("quick", 0))
	end = s.HoldFor(time.Second, ContainerStop)
	testutil.WaitFor(t, "the hold's timer", clk.HasWaiters)
	clk.Step(100 * time.Millisecond)
	end(nil)
	if idle := g.count.limit.idle[ContainerStop]; idle != 100*time.Millisecond {
		t.Fatalf("a stop within its hold counted as %v", idle)
	}
}

// Garbage collection waiting first still goes after a pod that asks later.
func TestGateBackgroundWaitsForPods(t *testing.T) {
	g := New(Options{Initial: 1, Max: 1})
	ctx := context.Background()
	hold, _ := g.Acquire(ctx, pod("a", 0))
	order := make(chan string, 2)
	go func() {
		s, _ := g.Acquire(ctx, Waiter{Background: true})
		order <- "gc"
		s.Release()
	}()
	testutil.WaitFor(t, "the collector waiting", func() bool { return waiting(g) == 1 })
	go func() {
		s, _ := g.Acquire(ctx, pod("late", time.Hour))
		order <- "pod"
		s.Release()
	}()
	testutil.WaitFor(t, "the pod waiting", func() bool { return waiting(g) == 2 })
	hold.Release()
	if got := <-order + " " + <-order; got != "pod gc" {
		t.Fatalf("admitted %s", got)
	}
}

// Done counts a call's latency, Release does not. Here the gate learns
// that a call alone takes a second, then that n at once take n seconds
// each (a runtime whose knee is 1): the limit comes down from 8 to where
// that knee settles (3.6 with a queueFactor of 1.3).
func TestGateCountsWhatDoneReports(t *testing.T) {
	clk := testingclock.NewFakeClock(gateNow)
	g := New(Options{Initial: 8, Clock: clk})
	ctx := context.Background()
	s, _ := g.Acquire(ctx, pod("a", 0))
	clk.Step(time.Second)
	s.Done(Container)
	if idle := g.count.limit.idle[Container]; idle != time.Second {
		t.Fatalf("idle latency %v after a call alone", idle)
	}
	// Released without counting: a failed call's latency means nothing.
	s, _ = g.Acquire(ctx, pod("b", 0))
	clk.Step(time.Hour)
	s.Release()
	if g.count.limit.recent[Container] != float64(time.Second) {
		t.Fatalf("a released call was counted: %v", g.count.limit.recent)
	}
	// Ended with an error: not counted either.
	s, _ = g.Acquire(ctx, pod("c", 0))
	clk.Step(time.Hour)
	s.End(Container, errors.New("runtime error"))
	if g.count.limit.recent[Container] != float64(time.Second) || g.count.inflight != 0 {
		t.Fatalf("a failed call was counted (%v) or kept its slot (%d)", g.count.limit.recent, g.count.inflight)
	}
	for round := 0; round < 10; round++ {
		n := g.Limit()
		slots := make([]*Slot, n)
		for i := range slots {
			slots[i], _ = g.Acquire(ctx, pod(fmt.Sprint(i), 0))
		}
		clk.Step(time.Duration(n) * time.Second)
		for _, s := range slots {
			s.Done(Container)
		}
	}
	// A knee of 1 settles where limit = tolerance + queueFactor·√limit.
	root := (queueFactor + math.Sqrt(queueFactor*queueFactor+4*tolerance)) / 2
	if got, want := g.Limit(), int(math.Ceil(root*root)); got > want {
		t.Fatalf("limit %d on a runtime whose knee is 1, want at most %d", got, want)
	}
}
