package kuberuntime

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// turns orders a pod's termination as upstream's kubelet does: every
// container is stopped at once (its preStop hook runs at once too), but a
// sidecar (restartable init container) is sent SIGTERM only once every
// regular container has stopped, and the sidecar declared after it: so
// sidecars stop in the reverse of their declaration, after the app, and
// the services they give (a proxy, a log shipper) outlive its shutdown.
// Its wait counts against its grace period.
type turns struct {
	clock clock.WithTicker
	mu    sync.Mutex
	// done closes when the named container has stopped (at once for one
	// not running).
	done map[string]chan struct{}
	// after are what the named container waits for before its turn.
	after map[string][]chan struct{}
}

// newTurns orders the termination of pod, whose containers named in
// running are running.
func newTurns(clk clock.WithTicker, pod *v1.Pod, running map[string]bool) *turns {
	t := &turns{clock: clk, done: map[string]chan struct{}{}, after: map[string][]chan struct{}{}}
	if pod == nil {
		return t
	}
	channel := func(name string) chan struct{} {
		ch := make(chan struct{})
		if !running[name] {
			close(ch)
		}
		t.done[name] = ch
		return ch
	}
	var regular []chan struct{}
	for _, c := range pod.Spec.Containers {
		regular = append(regular, channel(c.Name))
	}
	next := ""
	for i := len(pod.Spec.InitContainers) - 1; i >= 0; i-- {
		ic := &pod.Spec.InitContainers[i]
		channel(ic.Name)
		if !podutil.IsRestartableInitContainer(ic) {
			continue
		}
		after := append([]chan struct{}(nil), regular...)
		if next != "" {
			after = append(after, t.done[next])
		}
		t.after[ic.Name] = after
		next = ic.Name
	}
	return t
}

// unordered is the order of a container stopped on its own (a restart, a
// failed postStart hook): it waits for nothing.
var unordered = &turns{done: map[string]chan struct{}{}, after: map[string][]chan struct{}{}}

// wait blocks until the named container's turn, or until its grace period
// (seconds) has run out, and returns the whole seconds it waited (upstream
// truncates them too). A container with no grace left does not wait.
func (t *turns) wait(name string, grace int64) int64 {
	if grace <= 0 || len(t.after[name]) == 0 {
		return 0
	}
	start := t.clock.Now()
	timer := t.clock.NewTimer(time.Duration(grace) * time.Second)
	defer timer.Stop()
	for _, ch := range t.after[name] {
		select {
		case <-ch:
		case <-timer.C():
			return int64(t.clock.Since(start) / time.Second)
		}
	}
	return int64(t.clock.Since(start) / time.Second)
}

// stopped records that the named container has stopped (or failed to:
// those waiting for it then wait no more).
func (t *turns) stopped(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ch, ok := t.done[name]; ok {
		close(ch)
		delete(t.done, name)
	}
}
