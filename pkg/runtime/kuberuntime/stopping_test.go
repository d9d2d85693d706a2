package kuberuntime

import (
	"fmt"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

var gateNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

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

// TestConcurrentStopsStayExpected: a stop that begins while another runs
// leaves the running one marked. (Each begin used to drop every running
// stop's mark: in a burst of deletions the exits nodelet caused were
// taken for news, and each pod was read again up to five times.)
func TestConcurrentStopsStayExpected(t *testing.T) {
	clk := testingclock.NewFakeClock(gateNow)
	m := &Manager{stopping: newStopping(clk)}
	doneA := m.stopping.begin("a")
	clk.Step(time.Millisecond)
	doneB := m.stopping.begin("b")
	if got := fmt.Sprint(m.Unexpected([]string{"a", "b"})); got != "[]" {
		t.Fatalf("unexpected %s while both stops run", got)
	}
	doneA()
	clk.Step(stoppingLinger + time.Second)
	m.stopping.begin("c")
	if got := fmt.Sprint(m.Unexpected([]string{"a", "b", "c"})); got != "[a]" {
		t.Fatalf("unexpected %s once a's linger is over and b, c still run: want [a]", got)
	}
	doneB()
}
