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
