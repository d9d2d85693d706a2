// Package health holds the node's verdicts on itself: whether the
// container runtime and its network are ready (the last runtime status
// check), whether the sync loop is iterating, and whether the components
// that watch the runtime (the PLEG, the container event watcher) are
// stuck.
//
// Three readers ask three questions:
//
//	the sync loop        SyncError:  may pods be synced? (runtime, PLEG)
//	/healthz             Healthz:    is nodelet alive? (loop, PLEG, checks)
//	the Node's Ready     ReadyError: all of the above, and the network
//
// It is built before all of them and written by the sync loop (which
// reports each iteration) and by its own Run (the periodic runtime status
// check), so no component waits for another to exist to learn the node's
// health.
package health

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/infra/periodic"
)

// DefaultSyncLoopThreshold bounds a sync loop iteration. The loop's own
// work is in memory (the slow parts of housekeeping run elsewhere), so an
// iteration is normally milliseconds; the sync tick starts one every
// second even when nothing happens.
const DefaultSyncLoopThreshold = 30 * time.Second

// DefaultRuntimeCheckPeriod is how often the runtime's status is asked.
const DefaultRuntimeCheckPeriod = 5 * time.Second

// Check names a component and says whether it is stuck.
type Check struct {
	Name  string
	Check func() error
}

// Options configure a Node.
type Options struct {
	Clock clock.WithTicker
	// Runtime asks the container runtime for its status: whether it is
	// ready, and whether its pod network is.
	Runtime            func(ctx context.Context) (runtimeErr, networkErr error)
	RuntimeCheckPeriod time.Duration
	// SyncLoopThreshold is how long the sync loop may go without
	// completing an iteration before /healthz fails and the node is not
	// Ready: a loop that does nothing must not look alive.
	SyncLoopThreshold time.Duration
	// PLEG is the pod lifecycle event generator's health: a stalled PLEG
	// stops pod syncing as well as failing /healthz.
	PLEG func() error
	// Checks are further components whose failure makes /healthz fail
	// and the node not Ready (the container event watcher).
	Checks []Check
	// ObserveSyncLoop, if set, is told how long the sync loop took to
	// handle each event, and which kind it was (for metrics).
	ObserveSyncLoop func(event string, took time.Duration)
}

// Node is the node's health.
type Node struct {
	o Options

	mu         sync.RWMutex
	checked    bool
	runtimeErr error
	networkErr error

	// syncLoop is when the sync loop last completed an iteration (or,
	// before the first, when the Node was built: a loop that never
	// starts is as stuck as one that stops).
	syncLoop atomic.Int64
}

// New returns the node's health, not yet checked.
func New(o Options) *Node {
	if o.SyncLoopThreshold == 0 {
		o.SyncLoopThreshold = DefaultSyncLoopThreshold
	}
	if o.RuntimeCheckPeriod == 0 {
		o.RuntimeCheckPeriod = DefaultRuntimeCheckPeriod
	}
	if o.PLEG == nil {
		o.PLEG = func() error { return nil }
	}
	n := &Node{o: o}
	n.syncLoop.Store(o.Clock.Now().UnixNano())
	return n
}

// Run checks the runtime at once and then periodically, until ctx ends.
func (n *Node) Run(ctx context.Context) error {
	n.checkRuntime(ctx)
	periodic.Run(ctx, n.o.Clock, n.o.RuntimeCheckPeriod, false, n.checkRuntime)
	return nil
}

func (n *Node) checkRuntime(ctx context.Context) {
	runtimeErr, networkErr := n.o.Runtime(ctx)
	if runtimeErr != nil {
		klog.ErrorS(runtimeErr, "Container runtime is not healthy")
	}
	if networkErr != nil {
		klog.V(2).InfoS("Container runtime network is not ready", "err", networkErr)
	}
	n.SetRuntime(runtimeErr, networkErr)
}

// SetRuntime records the outcome of a runtime status check.
func (n *Node) SetRuntime(runtimeErr, networkErr error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.checked, n.runtimeErr, n.networkErr = true, runtimeErr, networkErr
}

// NetworkError is non-nil while the runtime's pod network is not ready.
func (n *Node) NetworkError() error {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.networkErr
}

// SyncError is non-nil while pods must not be synced: the runtime is
// unchecked, unreachable or not ready, or the PLEG has stalled.
func (n *Node) SyncError() error {
	n.mu.RLock()
	checked, err := n.checked, n.runtimeErr
	n.mu.RUnlock()
	if !checked {
		return errors.New("container runtime status check may not have completed yet")
	}
	if err != nil {
		return err
	}
	return n.o.PLEG()
}

// SyncLoopIterated records that the sync loop is alive.
func (n *Node) SyncLoopIterated() { n.syncLoop.Store(n.o.Clock.Now().UnixNano()) }

// SyncLoopHandled records that the sync loop handled an event of the
// kind, in took.
func (n *Node) SyncLoopHandled(event string, took time.Duration) {
	n.SyncLoopIterated()
	if n.o.ObserveSyncLoop != nil {
		n.o.ObserveSyncLoop(event, took)
	}
}

// Healthz reports whether the sync loop, the PLEG and the other checked
// components are alive.
func (n *Node) Healthz() error {
	last := time.Unix(0, n.syncLoop.Load())
	if since := n.o.Clock.Since(last); since > n.o.SyncLoopThreshold {
		return fmt.Errorf("sync loop last completed an iteration %v ago; threshold is %v", since.Round(time.Second), n.o.SyncLoopThreshold)
	}
	if err := n.o.PLEG(); err != nil {
		return err
	}
	for _, c := range n.o.Checks {
		if err := c.Check(); err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
	}
	return nil
}

// ReadyError says why the node is not ready to run pods (the runtime, its
// network, the PLEG, the sync loop or another checked component is
// unhealthy), or nil.
func (n *Node) ReadyError() error {
	if err := n.SyncError(); err != nil {
		return err
	}
	if err := n.Healthz(); err != nil {
		return err
	}
	return n.NetworkError()
}
