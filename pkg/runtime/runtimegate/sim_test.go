package runtimegate

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"time"
)

// A simulated runtime: calls share its capacity (processor sharing), as a
// CPU-bound runtime shares its cores. Up to the knee every call runs at
// full speed; past it the capacity stays at the knee, less what each call
// past it costs in contention, shared by all.
type simRuntime struct {
	knee float64
	// contention is the capacity lost per call past the knee, as a
	// fraction.
	contention float64
	// work is a call's length on an idle runtime, by kind.
	work map[Kind]float64
	// jitter varies each call's work by up to ± this fraction.
	jitter float64
}

func newSimRuntime(knee float64) simRuntime {
	return simRuntime{knee: knee, contention: 0.01, jitter: 0.2,
		work: map[Kind]float64{Sandbox: 0.3, Container: 0.2}}
}

// rate is how fast each of n calls in flight progresses.
func (r simRuntime) rate(n int) float64 {
	if float64(n) <= r.knee {
		return 1
	}
	return r.knee / (1 + r.contention*(float64(n)-r.knee)) / float64(n)
}

// simCall is a call in flight or waiting.
type simCall struct {
	pod    int
	kind   Kind
	left   float64
	ticket ticket
}

// simResult is what a burst of pods saw: when each was running, in
// seconds after the burst arrived.
type simResult struct {
	running    []float64
	finalLimit int
}

func (s simResult) all() float64 { return slices.Max(s.running) }
func (s simResult) quantile(q float64) float64 {
	sorted := slices.Clone(s.running)
	slices.Sort(sorted)
	return sorted[int(math.Ceil(q*float64(len(sorted))))-1]
}

// simulate runs a burst of pods, each a sandbox then a container, through
// the counter on the runtime: the calls wait in the pods' arrival order,
// as at the Gate. With warm, one pod runs alone first, as a node's first
// pod does.
func simulate(r simRuntime, c *counter, pods int, warm bool, seed int64) simResult {
	rnd := rand.New(rand.NewSource(seed))
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := 0.0
	at := func() time.Time { return epoch.Add(time.Duration(now * float64(time.Second))) }
	call := func(pod int, kind Kind) *simCall {
		return &simCall{pod: pod, kind: kind, left: r.work[kind] * (1 + r.jitter*(2*rnd.Float64()-1))}
	}
	run := func(first, n int) []float64 {
		start := now
		running := make([]float64, n)
		var waiting, inflight []*simCall
		for p := first; p < first+n; p++ {
			waiting = append(waiting, call(p, Sandbox))
		}
		for {
			for c.free() && len(waiting) > 0 {
				w := waiting[0]
				waiting = waiting[1:]
				w.ticket = c.admit(at())
				inflight = append(inflight, w)
			}
			if len(inflight) == 0 {
				return running
			}
			rate := r.rate(len(inflight))
			dt := math.Inf(1)
			for _, f := range inflight {
				dt = math.Min(dt, f.left/rate)
			}
			now += dt
			var still []*simCall
			for _, f := range inflight {
				if f.left -= rate * dt; f.left > 1e-12 {
					still = append(still, f)
					continue
				}
				c.end(f.ticket, f.kind, at())
				if f.kind == Sandbox {
					// Waits in arrival order, before later pods' sandboxes.
					next := call(f.pod, Container)
					i, _ := slices.BinarySearchFunc(waiting, next, func(a, b *simCall) int { return a.pod - b.pod })
					waiting = slices.Insert(waiting, i, next)
				} else {
					running[f.pod-first] = now - start
				}
			}
			inflight = still
		}
	}
	if warm {
		run(-1, 1)
	}
	return simResult{running: run(0, pods), finalLimit: c.limit.Limit()}
}

func fixed(limit int) *counter { return &counter{limit: NewGradient(limit, limit, limit)} }

func adaptive(initial int) *counter { return &counter{limit: NewGradient(initial, 1, DefaultMax)} }

// best is the best of every fixed limit on the runtime: the fastest
// all-running, and separately the lowest p50 and p99.
func best(r simRuntime, pods int, seed int64) (all, p50, p99 float64, at [3]int) {
	all, p50, p99 = math.Inf(1), math.Inf(1), math.Inf(1)
	for l := 1; l <= 128; l++ {
		res := simulate(r, fixed(l), pods, true, seed)
		if v := res.all(); v < all {
			all, at[0] = v, l
		}
		if v := res.quantile(0.5); v < p50 {
			p50, at[1] = v, l
		}
		if v := res.quantile(0.99); v < p99 {
			p99, at[2] = v, l
		}
	}
	return all, p50, p99, at
}

func (s simResult) String() string {
	return fmt.Sprintf("all %.2fs p50 %.2fs p99 %.2fs limit %d", s.all(), s.quantile(0.5), s.quantile(0.99), s.finalLimit)
}
