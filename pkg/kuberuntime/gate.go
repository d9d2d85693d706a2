package kuberuntime

import (
	"container/heap"
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/podutil"
)

// MaxParallelPodStarts caps how many of the runtime calls that start or
// stop things (RunPodSandbox, CreateContainer with StartContainer,
// StopContainer for its first second, StopPodSandbox) run at once.
//
// On a small node the runtime is CPU-bound: starting 30 pods straight
// through CRI on the 2-core development VM takes about 11 s whether one or
// thirty are in flight (BenchmarkFloorParallelism), but with thirty in
// flight every pod finishes near the end, while with a few in flight, in
// arrival order, the first pods are running after a second. Image pulls,
// postStart hooks and everything else that waits rather than works are
// not capped.
const MaxParallelPodStarts = 4

// stopHold is how long a StopContainer call holds its slot.
const stopHold = time.Second

// startGate admits starting calls MaxParallelPodStarts at a time, the
// earliest-seen pod first, so a burst's pods finish one after another in
// the order they arrived instead of all at the end. It holds no lock while
// a caller waits.
type startGate struct {
	mu      sync.Mutex
	free    int
	waiting waiters
}

func newStartGate(slots int) *startGate { return &startGate{free: slots} }

type waiter struct {
	// background waiters (garbage collection) come after every pod's.
	background bool
	seen       time.Time
	uid        types.UID
	ready      chan struct{}
	index      int // in the heap; -1 once granted
}

// acquire waits for a slot for pod and returns the function that gives it
// back. It fails only when ctx ends first.
func (g *startGate) acquire(ctx context.Context, pod *v1.Pod) (func(), error) {
	return g.wait(ctx, &waiter{seen: firstSeen(pod), uid: pod.UID})
}

// acquireBackground waits for a slot for background work (removing what
// garbage collection found), which no pod's start or stop waits behind:
// at a burst's end the runtime's removals would otherwise slow every stop.
func (g *startGate) acquireBackground(ctx context.Context) (func(), error) {
	return g.wait(ctx, &waiter{background: true})
}

func (g *startGate) wait(ctx context.Context, w *waiter) (func(), error) {
	g.mu.Lock()
	if g.free > 0 && len(g.waiting) == 0 {
		g.free--
		g.mu.Unlock()
		return g.release, nil
	}
	w.ready = make(chan struct{})
	heap.Push(&g.waiting, w)
	g.mu.Unlock()
	select {
	case <-w.ready:
		return g.release, nil
	case <-ctx.Done():
		g.mu.Lock()
		granted := w.index < 0
		if !granted {
			heap.Remove(&g.waiting, w.index)
		}
		g.mu.Unlock()
		if granted { // granted as ctx ended: pass the slot on
			g.release()
		}
		return nil, ctx.Err()
	}
}

// acquireFor waits for a slot and holds it for at most hold: a stop that
// takes longer is waiting for a container to exit, not working, and must
// not keep other pods' calls out.
func (g *startGate) acquireFor(ctx context.Context, pod *v1.Pod, hold time.Duration, clk clock.Clock) (func(), error) {
	release, err := g.acquire(ctx, pod)
	if err != nil {
		return nil, err
	}
	var once sync.Once
	done := make(chan struct{})
	go func() {
		select {
		case <-clk.After(hold):
			once.Do(release)
		case <-done:
		}
	}()
	return func() {
		close(done)
		once.Do(release)
	}, nil
}

// release hands the slot to the earliest waiter, or frees it.
func (g *startGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.waiting) == 0 {
		g.free++
		return
	}
	w := heap.Pop(&g.waiting).(*waiter)
	w.index = -1
	close(w.ready)
}

// firstSeen is when nodelet first saw the pod (the merge's annotation),
// else its creation time.
func firstSeen(pod *v1.Pod) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, pod.Annotations[podutil.ConfigFirstSeenAnnotationKey]); err == nil {
		return t
	}
	return pod.CreationTimestamp.Time
}

// waiters is a min-heap: pods before background work, then by first
// sighting, then UID.
type waiters []*waiter

func (h waiters) Len() int { return len(h) }
func (h waiters) Less(i, j int) bool {
	if h[i].background != h[j].background {
		return !h[i].background
	}
	if !h[i].seen.Equal(h[j].seen) {
		return h[i].seen.Before(h[j].seen)
	}
	return h[i].uid < h[j].uid
}
func (h waiters) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *waiters) Push(x any) {
	w := x.(*waiter)
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

// stopping remembers the containers and sandboxes nodelet is stopping (and
// for a moment after), so the exit watcher can tell an exit nodelet caused,
// whose status the stopping worker reads itself, from one behind its back.
type stopping struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	until map[string]time.Time
}

// stoppingLinger covers an exit event delivered just after the stop call
// returned.
const stoppingLinger = 5 * time.Second

func newStopping(clk clock.PassiveClock) *stopping {
	return &stopping{clock: clk, until: map[string]time.Time{}}
}

// begin marks id as being stopped; the returned function marks the stop
// done (the mark then lingers briefly).
func (s *stopping) begin(id string) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	for k, t := range s.until {
		if now.After(t) {
			delete(s.until, k)
		}
	}
	s.until[id] = time.Time{} // open-ended while the call runs
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.until[id] = s.clock.Now().Add(stoppingLinger)
	}
}

func (s *stopping) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.until[id]
	return ok && (t.IsZero() || !s.clock.Now().After(t))
}
