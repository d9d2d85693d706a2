// Package runtimegate decides how many of the runtime calls that start and
// stop pods run at once, and in which order they wait.
//
// The runtime has a knee: below it, more calls in flight finish more pods
// per second; past it, a CPU-bound runtime only makes every call slower
// (and, with contention, finishes fewer), while the pods admitted last
// hold back the ones that came first. The knee depends on the node (about
// 2-4 calls on a 2-core VM, tens on a 32-core server) and on what else
// runs, so it is not a constant: the limit is found while the runtime
// runs, by the gradient of each call's latency against the latency of the
// same call on an idle runtime, as Netflix's concurrency-limits (gradient)
// and TCP Vegas do with round-trip times:
//
//	no queueing (latency ≈ idle latency)   → limit grows by q√limit
//	queueing (latency = r × idle latency)  → limit × 1/r + q√limit
//
// At a CPU-bound knee K the latency is limit/K × idle, so the limit
// settles at K + q√limit: enough to keep the runtime busy, not enough to
// push the early pods back. q (queueFactor) is above 1 because a real
// runtime's calls each span several processes: on a node of few cores a
// single call already uses most of them, its latency grows from the
// second call in flight on, and yet the runtime finishes more calls a
// second up to a few more (on the 2-core development VM: latency ×3 at 3
// calls, while 4 calls finish 10% more pods a second than 3). Waiting
// calls are admitted in the order their pods were first seen (Gate).
package runtimegate

import (
	"math"
	"time"
)

// Kind names a kind of call whose latency is compared only with its own
// kind: a sandbox takes longer than a container start.
type Kind string

const (
	Sandbox   Kind = "sandbox"
	Container Kind = "container"
	// SandboxStop and ContainerStop are stops, which the stop gate counts.
	SandboxStop   Kind = "sandbox-stop"
	ContainerStop Kind = "container-stop"
)

const (
	// smoothing is how far a round of observations (one per call in
	// flight) moves the limit towards its target: the runtime's
	// latencies are noisy.
	smoothing = 2.0
	// minGradient bounds how much one observation can cut.
	minGradient = 0.25
	// recentWeight is the weight of the latest call in the smoothed
	// latency.
	recentWeight = 0.25
	// tolerance is how much slower than the fastest seen the runtime's
	// calls may be before that counts as queueing: the same call varies
	// (a min of many is below their mean).
	tolerance = 1.1
	// queueFactor weighs the queue a limit keeps (q in the package
	// doc): 1.3 brings the development VM's limit from 3 to between 3
	// and 4, where its floor is best, and keeps every simulated knee
	// within its bounds (1.4 takes a 110-pod burst at a knee of 32 past
	// 1.2 times the best p50).
	queueFactor = 1.3
)

// Gradient is the limit and what it learned. It is not safe for
// concurrent use (Gate serialises it).
type Gradient struct {
	limit    float64
	min, max float64
	// idle is the latency of each kind of call on an idle runtime: the
	// least seen, or the latest of a call that ran alone (the runtime may
	// have got slower since the least was seen).
	idle map[Kind]time.Duration
	// recent is each kind's latency, smoothed: one slow call is noise.
	recent map[Kind]float64
}

// NewGradient starts at initial, kept within [lo, hi].
func NewGradient(initial, lo, hi int) *Gradient {
	lo = max(lo, 1)
	hi = max(hi, lo)
	return &Gradient{limit: clamp(float64(initial), float64(lo), float64(hi)),
		min: float64(lo), max: float64(hi), idle: map[Kind]time.Duration{}, recent: map[Kind]float64{}}
}

// Limit is how many calls may be in flight.
func (g *Gradient) Limit() int { return int(math.Round(g.limit)) }

// Observe takes one call's latency. inflight is how many calls were in
// flight as it ended (itself included), alone says no other call ran
// while it did.
func (g *Gradient) Observe(kind Kind, took time.Duration, inflight int, alone bool) {
	if took <= 0 {
		return
	}
	idle, known := g.idle[kind]
	if !known || took < idle || alone {
		g.idle[kind], idle = took, took
	}
	recent, seen := g.recent[kind]
	if !seen {
		recent = float64(took)
	}
	recent += recentWeight * (float64(took) - recent)
	g.recent[kind] = recent
	gradient := clamp(tolerance*float64(idle)/recent, minGradient, 1)
	target := g.limit*gradient + queueFactor*math.Sqrt(g.limit)
	if target > g.limit && float64(inflight)*2 < g.limit {
		// Half the slots idle: the demand, not the runtime, was the
		// limit, which says nothing about a higher one.
		return
	}
	// Each call in flight reports once per round of calls: move a round's
	// worth of smoothing over a limit's worth of reports, or a high limit
	// would run far ahead of the latencies that follow from it.
	step := min(smoothing/g.limit, 1)
	g.limit = clamp(g.limit+(target-g.limit)*step, g.min, g.max)
}

func clamp(v, lo, hi float64) float64 { return math.Min(math.Max(v, lo), hi) }
