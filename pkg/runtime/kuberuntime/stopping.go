package kuberuntime

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/runtime/runtimegate"
)

// waiter is pod as it waits at a gate: in the order nodelet first saw it.
func waiter(pod *v1.Pod) runtimegate.Waiter {
	return runtimegate.Waiter{Seen: firstSeen(pod), UID: pod.UID}
}

// stopHold is how long a StopContainer call holds its slot.
const stopHold = time.Second

// firstSeen is when nodelet first saw the pod (the merge's annotation),
// else its creation time.
func firstSeen(pod *v1.Pod) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, pod.Annotations[podutil.ConfigFirstSeenAnnotationKey]); err == nil {
		return t
	}
	return pod.CreationTimestamp.Time
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
		// A zero time is a stop still running: it stays.
		if !t.IsZero() && now.After(t) {
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
