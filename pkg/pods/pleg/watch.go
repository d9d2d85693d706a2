package pleg

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	eventsapi "github.com/containerd/containerd/api/events"
	containerdevents "github.com/containerd/containerd/api/services/events/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
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

// TaskEvents is containerd's own event service, on the same socket as its
// CRI: containerd 1.6 has no CRI event stream, but publishes every task
// exit there.
type TaskEvents interface {
	Subscribe(ctx context.Context, in *containerdevents.SubscribeRequest, opts ...grpc.CallOption) (containerdevents.Events_SubscribeClient, error)
}

// WatcherOptions configure a Watcher.
type WatcherOptions struct {
	Runtime EventRuntime
	// Containerd is containerd's event service, nil for other runtimes.
	Containerd TaskEvents
	// Poll is how often running containers are listed on a runtime with
	// no event stream at all.
	Poll time.Duration
	// RequestTimeout bounds one list call.
	RequestTimeout time.Duration
	// StuckAfter is how long the watcher may go without a working stream
	// or a successful poll before it reports itself unhealthy.
	StuckAfter time.Duration
	Clock      clock.WithTicker
	// Notify is told the IDs of containers (or sandboxes) that exited.
	Notify func(ids ...string)
	// StreamBroke, if set, counts event streams that broke (a metric):
	// exits are then seen by the relist alone until the stream reopens.
	StreamBroke func()
}

// reopenDelay spaces attempts to reopen a broken event stream.
const reopenDelay = time.Second

// containerdNamespace is where containerd's CRI keeps its containers.
const containerdNamespace = "k8s.io"

// Watcher tells the PLEG as soon as a container exits, so it reads that
// pod at once instead of waiting for its next relist. It follows, in order
// of preference, the runtime's CRI container event stream
// (GetContainerEvents: containerd 2.x), containerd's own task-exit events
// (containerd 1.6), or, for a runtime with neither, the list of running
// containers every poll interval. The relist stays the safety net.
//
// Only exits are reported: nodelet starts and stops containers itself and
// reads their status when it does; an exit is what happens behind its back.
type Watcher struct {
	o WatcherOptions

	mu sync.Mutex
	// ok is when the watcher last knew it was working: a stream opened
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

// errNoStream classifies a runtime without the event stream asked for.
var errNoStream = errors.New("the runtime has no such event stream")

// Run watches until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	for _, s := range []struct {
		name   string
		stream func(context.Context) error
	}{{"CRI container events", w.criEvents}, {"containerd task events", w.taskEvents}} {
		if w.follow(ctx, s.name, s.stream) {
			return
		}
	}
	klog.InfoS("The container runtime has no event stream; polling running containers instead", "interval", w.o.Poll)
	w.poll(ctx)
}

// follow keeps one event stream open, reopening it when it breaks, until
// ctx ends (true) or the runtime turns out not to have it (false).
func (w *Watcher) follow(ctx context.Context, name string, stream func(context.Context) error) bool {
	for ctx.Err() == nil {
		err := stream(ctx)
		w.record(false, err)
		if ctx.Err() != nil {
			return true
		}
		if errors.Is(err, errNoStream) || status.Code(err) == codes.Unimplemented {
			return false
		}
		klog.ErrorS(err, "Container event stream broke; relisting alone until it is reopened", "stream", name)
		if w.o.StreamBroke != nil {
			w.o.StreamBroke()
		}
		select {
		case <-ctx.Done():
		case <-w.o.Clock.After(reopenDelay):
		}
	}
	return true
}

// criEvents follows CRI GetContainerEvents.
func (w *Watcher) criEvents(ctx context.Context) error {
	stream, err := w.o.Runtime.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		return err
	}
	// Open counts as working. A runtime without the method may only say so
	// at the first receive; Run then moves on.
	w.record(true, nil)
	first := true
	for {
		e, err := stream.Recv()
		if err != nil {
			return err
		}
		if first {
			klog.InfoS("Watching the container runtime's CRI event stream")
			first = false
		}
		w.record(true, nil)
		if e.ContainerEventType == runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT {
			w.o.Notify(e.ContainerId)
		}
	}
}

// taskEvents follows containerd's own /tasks/exit events.
func (w *Watcher) taskEvents(ctx context.Context) error {
	if w.o.Containerd == nil {
		return errNoStream
	}
	stream, err := w.o.Containerd.Subscribe(ctx, &containerdevents.SubscribeRequest{
		Filters: []string{fmt.Sprintf(`namespace==%q,topic=="/tasks/exit"`, containerdNamespace)},
	})
	if err != nil {
		return err
	}
	w.record(true, nil)
	first := true
	for {
		env, err := stream.Recv()
		if err != nil {
			return err
		}
		if first {
			klog.InfoS("Watching containerd's task exit events")
			first = false
		}
		w.record(true, nil)
		var exit eventsapi.TaskExit
		if err := proto.Unmarshal(env.GetEvent().GetValue(), &exit); err != nil {
			klog.V(2).InfoS("Undecodable containerd task event; relisting", "topic", env.GetTopic(), "err", err)
			w.o.Notify()
			continue
		}
		// An exec's exit (a probe, kubectl exec) is not the container's.
		if exit.ID == "" || exit.ID == exit.ContainerID {
			w.o.Notify(exit.ContainerID)
		}
	}
}

// poll reports the containers that left the running set.
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
		var gone []string
		for id := range last {
			if !cur[id] {
				gone = append(gone, id)
			}
		}
		if len(gone) > 0 {
			w.o.Notify(gone...)
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
