package runtimegate

import (
	"fmt"
	"math"
	"testing"
)

// The limit finds each simulated runtime's knee from a start at half or
// twice it (a machine's core count is near the knee of a CPU-bound
// runtime, not on it): a burst of 500 pods is all running within 10% of
// the best fixed limit for that runtime, its p50 within 20% of the best
// p50 and its p99 within 10% of the best p99, and the limit ends at or
// above the knee but short of twice it. A burst of 110 pods is over in a
// few rounds of calls at a knee of 32, so a start away from the knee costs
// it more.
func TestGradientFindsTheKnee(t *testing.T) {
	for _, knee := range []float64{2, 8, 32} {
		for _, pods := range []int{110, 500} {
			for seed := int64(1); seed <= 3; seed++ {
				r := newSimRuntime(knee)
				all, p50, p99, at := best(r, pods, seed)
				t.Logf("knee %v, %d pods, seed %d: best fixed: all %.2fs (limit %d), p50 %.2fs (limit %d), p99 %.2fs (limit %d)", knee, pods, seed, all, at[0], p50, at[1], p99, at[2])
				for _, initial := range []int{int(knee) / 2, int(knee), int(knee) * 2} {
					t.Run(fmt.Sprintf("knee=%v/pods=%d/seed=%d/initial=%d", knee, pods, seed, initial), func(t *testing.T) {
						got := simulate(r, adaptive(initial), pods, true, seed)
						ratios := [3]float64{got.all() / all, got.quantile(0.5) / p50, got.quantile(0.99) / p99}
						t.Logf("adaptive: %v: ×%.2f ×%.2f ×%.2f", got, ratios[0], ratios[1], ratios[2])
						bound := [3]float64{1.10, 1.20, 1.10}
						switch {
						case pods == 110 && initial == int(knee):
							bound = [3]float64{1.15, 1.20, 1.15}
						case pods == 110:
							// The first round runs at the start's limit
							// whatever it is: no latency is known before
							// its calls end.
							bound = [3]float64{1.35, 1.50, 1.35}
						}
						for i, name := range []string{"all running", "p50", "p99"} {
							if ratios[i] > bound[i] {
								t.Errorf("%s ×%.2f the best fixed limit's, want ≤ ×%.2f", name, ratios[i], bound[i])
							}
						}
						if hi := 1.5*knee + 2*math.Sqrt(knee) + 1; pods == 500 && (float64(got.finalLimit) < knee || float64(got.finalLimit) > hi) {
							t.Errorf("limit %d after the burst, want within [%v, %.0f]", got.finalLimit, knee, hi)
						}
					})
				}
			}
		}
	}
}

// A runtime that gets slower (its knee falls from 8 to 2, as when the
// node's pods start using its cores) brings the limit down: the next burst
// is as good as if the limit had started there.
func TestGradientFollowsASlowerRuntime(t *testing.T) {
	c := adaptive(8)
	simulate(newSimRuntime(8), c, 500, true, 1)
	before := c.limit.Limit()
	slow := newSimRuntime(2)
	all, p50, _, _ := best(slow, 500, 2)
	got := simulate(slow, c, 500, false, 2)
	t.Logf("limit %d after the fast runtime, then %v (best fixed all %.2fs, p50 %.2fs)", before, got, all, p50)
	if before < 8 {
		t.Fatalf("limit %d on the fast runtime", before)
	}
	if got.all()/all > 1.10 || got.quantile(0.5)/p50 > 1.2 || got.finalLimit > 6 {
		t.Errorf("on the slower runtime: %v; best fixed all %.2fs, p50 %.2fs", got, all, p50)
	}
}

// Pods that arrive one at a time never fill the slots: the limit stays
// where it was, since no observation says more would help, or hurt.
func TestGradientHoldsWithoutDemand(t *testing.T) {
	c := adaptive(4)
	r := newSimRuntime(32)
	for i := int64(0); i < 100; i++ {
		simulate(r, c, 1, false, i)
	}
	if got := c.limit.Limit(); got != 4 {
		t.Fatalf("limit %d after 100 single pods, want the initial 4", got)
	}
	// The calls were counted: every one ran alone and set the idle latency.
	if c.grants != 200 || c.limit.idle[Sandbox] == 0 || c.limit.idle[Container] == 0 {
		t.Fatalf("grants %d, idle %v", c.grants, c.limit.idle)
	}
}
