package runtimegate

import (
	"container/heap"
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Options configure a Gate.
type Options struct {
	// Name says what the gate admits ("start" or "stop"), for its metric.
	Name string
	// Initial is the limit before anything was observed; 0 for the
	// machine's core count.
	Initial int
	// Max bounds the limit; 0 for DefaultMax.
	Max   int
	Clock clock.Clock
}

// DefaultMax bounds the limit: past a few hundred calls in flight no
// runtime is faster, and requests start to time out.
const DefaultMax = 256

// Gate admits calls up to the Gradient's limit, the earliest-seen pod
// first, so a burst's pods finish one after another in the order they
// arrived instead of all at the end. It holds no lock while a caller
// waits.
type Gate struct {
	clock clock.Clock
	name  string

	mu      sync.Mutex
	count   counter
	waiting waiters
}

// counter is the gate's bookkeeping without the waiting, which the
// simulated runtimes drive directly.
type counter struct {
	// name is the gate's, for its log lines.
	name     string
	limit    *Gradient
	inflight int
	// grants counts admissions: a call during which it did not move,
	// admitted with nothing else in flight, ran alone.
	grants uint64
}

// ticket is one admitted call.
type ticket struct {
	start  time.Time
	grants uint64
	alone  bool
}

func (c *counter) free() bool { return c.inflight < c.limit.Limit() }

func (c *counter) admit(now time.Time) ticket {
	c.inflight++
	c.grants++
	return ticket{start: now, grants: c.grants, alone: c.inflight == 1}
}

// end counts a call out; with a kind, its latency counts towards the
// limit.
func (c *counter) end(t ticket, kind Kind, now time.Time) {
	if kind != "" {
		before := c.limit.Limit()
		c.limit.Observe(kind, now.Sub(t.start), c.inflight, t.alone && c.grants == t.grants)
		if after := c.limit.Limit(); after != before {
			klog.V(4).InfoS("Runtime call limit changed", "gate", c.name, "limit", after, "was", before, "inflight", c.inflight)
		}
	}
	c.inflight--
}

// New returns a gate with nothing in flight.
func New(o Options) *Gate {
	if o.Initial <= 0 {
		o.Initial = runtime.NumCPU()
	}
	if o.Max <= 0 {
		o.Max = DefaultMax
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Name == "" {
		o.Name = "start"
	}
	return &Gate{clock: o.Clock, name: o.Name, count: counter{name: o.Name, limit: NewGradient(o.Initial, 1, o.Max)}}
}

// Waiter says who asks for a slot.
type Waiter struct {
	// Seen is when the pod was first seen; earlier pods go first.
	Seen time.Time
	UID  types.UID
	// Background work (garbage collection) comes after every pod's.
	Background bool
}

// Slot is one admitted call. Exactly one of Done, Release or HoldFor
// gives it back.
type Slot struct {
	g       *Gate
	ticket  ticket
	release sync.Once
}

// Limit is the current limit.
func (g *Gate) Limit() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.count.limit.Limit()
}

// Acquire waits for a slot. It fails only when ctx ends first.
func (g *Gate) Acquire(ctx context.Context, who Waiter) (*Slot, error) {
	g.mu.Lock()
	if g.count.free() && len(g.waiting) == 0 {
		s := g.grant()
		g.mu.Unlock()
		return s, nil
	}
	w := &queued{Waiter: who, ready: make(chan *Slot, 1)}
	heap.Push(&g.waiting, w)
	g.mu.Unlock()
	select {
	case s := <-w.ready:
		return s, nil
	case <-ctx.Done():
		g.mu.Lock()
		if w.index >= 0 {
			heap.Remove(&g.waiting, w.index)
			g.mu.Unlock()
			return nil, ctx.Err()
		}
		g.mu.Unlock()
		// Granted as ctx ended: pass the slot on.
		(<-w.ready).Release()
		return nil, ctx.Err()
	}
}

// grant admits one call. Call with g.mu held.
func (g *Gate) grant() *Slot {
	return &Slot{g: g, ticket: g.count.admit(g.clock.Now())}
}

// Done gives the slot back and counts the call's latency towards the
// limit: kind is what it did. A call that failed should Release (or pass
// no kind) instead: its latency says nothing about the runtime's load.
func (s *Slot) Done(kind Kind) {
	s.release.Do(func() { s.g.put(s, kind) })
}

// Release gives the slot back without counting the call.
func (s *Slot) Release() {
	s.release.Do(func() { s.g.put(s, "") })
}

// End gives the slot back after a call of the kind that returned err:
// counted if it succeeded, not if it failed.
func (s *Slot) End(kind Kind, err error) {
	if err != nil {
		kind = ""
	}
	s.Done(kind)
}

// HoldFor gives the slot back when the call ends or after hold, whichever
// comes first, and returns the function that ends the call (as End): a
// container stop that takes longer is waiting for the container to exit,
// not working, and must not keep other pods' calls out. One that
// outlasted hold is not counted: its length was the container's, not the
// runtime's.
func (s *Slot) HoldFor(hold time.Duration, kind Kind) func(err error) {
	done := make(chan struct{})
	go func() {
		select {
		case <-s.g.clock.After(hold):
			s.Release()
		case <-done:
		}
	}()
	return func(err error) {
		close(done)
		s.End(kind, err)
	}
}

func (g *Gate) put(s *Slot, kind Kind) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.count.end(s.ticket, kind, g.clock.Now())
	for g.count.free() && len(g.waiting) > 0 {
		w := heap.Pop(&g.waiting).(*queued)
		w.index = -1
		w.ready <- g.grant()
	}
}

type queued struct {
	Waiter
	ready chan *Slot
	index int // in the heap; -1 once granted
}

// waiters is a min-heap: pods before background work, then by first
// sighting, then UID.
type waiters []*queued

func (h waiters) Len() int { return len(h) }
func (h waiters) Less(i, j int) bool {
	if h[i].Background != h[j].Background {
		return !h[i].Background
	}
	if !h[i].Seen.Equal(h[j].Seen) {
		return h[i].Seen.Before(h[j].Seen)
	}
	return h[i].UID < h[j].UID
}
func (h waiters) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *waiters) Push(x any) {
	w := x.(*queued)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *waiters) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return w
}

// Collector serves the limit as nodelet_runtime_<name>_limit (upstream
// has no such gauge: its limit is a constant).
func (g *Gate) Collector() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "nodelet", Subsystem: "runtime", Name: g.name + "_limit",
		Help: "How many runtime calls of the kind (start: sandboxes and containers started; stop: stopped) may run at once, as learned from their latencies.",
	}, func() float64 { return float64(g.Limit()) })
}
