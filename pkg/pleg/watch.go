package pleg

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// EventRuntime is the part of the CRI runtime service the watcher uses:
// the event stream, and the container list for runtimes without one.
type EventRuntime interface {
	GetContainerEvents(ctx context.Context, in *runtimeapi.GetEventsRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[runtimeapi.ContainerEventResponse], error)
	ListContainers(ctx context.Context, in *runtimeapi.ListContainersRequest, opts ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error)
}

// WatcherOptions configure a Watcher.
type WatcherOptions struct {
	Runtime EventRuntime
	// Poll is how often running containers are listed on a runtime
	// without an event stream.
	Poll time.Duration
	// RequestTimeout bounds one list call.
	RequestTimeout time.Duration
	// StuckAfter is how long the watcher may go without a working stream
	// or a successful poll before it reports itself unhealthy.
	StuckAfter time.Duration
	Clock      clock.WithTicker
	// Notify is called soon after a container starts or stops.
	Notify func()
}

// reopenDelay spaces attempts to reopen a broken event stream.
const reopenDelay = time.Second

// Watcher tells the PLEG as soon as a container changes, so it relists at
// once instead of on its next tick. It follows the runtime's container
// event stream (CRI GetContainerEvents) where there is one; otherwise
// (containerd before 1.7) it lists the running containers every poll
// interval, which is far cheaper than a full relist, and notifies when
// that set changes. The relist stays the safety net either way.
type Watcher struct {
	o WatcherOptions

	mu sync.Mutex
	// ok is when the watcher last knew it was working: the stream opened
	// or delivered, or a poll succeeded.
	ok time.Time
	// streaming is true while an event stream is open.
	streaming bool
	lastErr   error
}

// NewWatcher returns a watcher; Run starts it.
func NewWatcher(o WatcherOptions) *Watcher {
	return &Watcher{o: o, ok: o.Clock.Now()}
}

// Healthy fails when the watcher has had neither an open stream nor a
// successful poll for StuckAfter: the runtime is not answering, or the
// watcher itself is wedged.
func (w *Watcher) Healthy() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.streaming {
		return nil
	}
	if since := w.o.Clock.Since(w.ok); since > w.o.StuckAfter {
		return fmt.Errorf("no container events and no successful poll for %v (threshold %v): %v", since.Round(time.Second), w.o.StuckAfter, w.lastErr)
	}
	return nil
}

func (w *Watcher) record(streaming bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.streaming = streaming
	if err == nil {
		w.ok = w.o.Clock.Now()
	}
	w.lastErr = err
}

// Run watches until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	for ctx.Err() == nil {
		err := w.stream(ctx)
		w.record(false, err)
		if ctx.Err() != nil {
			return
		}
		if status.Code(err) == codes.Unimplemented {
			klog.InfoS("The container runtime has no event stream; polling running containers instead", "interval", w.o.Poll)
			w.poll(ctx)
			return
		}
		klog.ErrorS(err, "Container event stream broke; relisting alone until it is reopened")
		select {
		case <-ctx.Done():
		case <-w.o.Clock.After(reopenDelay):
		}
	}
}

func (w *Watcher) stream(ctx context.Context) error {
	stream, err := w.o.Runtime.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		return err
	}
	// Open counts as working. A runtime without the method may only say so
	// at the first receive; Run then switches to polling.
	w.record(true, nil)
	first := true
	for {
		if _, err := stream.Recv(); err != nil {
			return err
		}
		if first {
			klog.InfoS("Watching the container runtime's event stream")
			first = false
		}
		w.record(true, nil)
		w.o.Notify()
	}
}

// poll notifies whenever the set of running containers changes.
func (w *Watcher) poll(ctx context.Context) {
	// The baseline is taken before the ticker starts, so a change made
	// after the first tick can be waited for is never in the baseline.
	last, err := w.running(ctx)
	w.record(false, err)
	t := w.o.Clock.NewTicker(w.o.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		cur, err := w.running(ctx)
		w.record(false, err)
		if err != nil {
			continue
		}
		if last != nil && !sameSet(last, cur) {
			w.o.Notify()
		}
		last = cur
	}
}

func (w *Watcher) running(ctx context.Context) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, w.o.RequestTimeout)
	defer cancel()
	resp, err := w.o.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}})
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(resp.GetContainers()))
	for _, c := range resp.GetContainers() {
		out[c.Id] = true
	}
	return out, nil
}

func sameSet(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}
