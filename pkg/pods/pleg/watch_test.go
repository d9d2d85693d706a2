package pleg

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testutil"

	eventsapi "github.com/containerd/containerd/api/events"
	containerdevents "github.com/containerd/containerd/api/services/events/v1"
	apitypes "github.com/containerd/containerd/api/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"
)

// fakeEvents is a runtime with or without an event stream whose running
// containers the test sets.
type fakeEvents struct {
	mu      sync.Mutex
	running []string
	listErr error
	lists   int
	events  chan *runtimeapi.ContainerEventResponse // nil: Unimplemented
	openErr error
	opens   int
}

func (f *fakeEvents) GetContainerEvents(ctx context.Context, _ *runtimeapi.GetEventsRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[runtimeapi.ContainerEventResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opens++
	if f.openErr != nil {
		return nil, f.openErr
	}
	if f.events == nil {
		return nil, status.Error(codes.Unimplemented, "GetContainerEvents is not implemented")
	}
	return &stream{ctx: ctx, ch: f.events}, nil
}

func (f *fakeEvents) ListContainers(context.Context, *runtimeapi.ListContainersRequest, ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	if f.listErr != nil {
		return nil, f.listErr
	}
	resp := &runtimeapi.ListContainersResponse{}
	for _, id := range f.running {
		resp.Containers = append(resp.Containers, &runtimeapi.Container{Id: id})
	}
	return resp, nil
}

func (f *fakeEvents) set(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

func (f *fakeEvents) count(fn func() int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fn()
}

type stream struct {
	grpc.ClientStream
	ctx context.Context
	ch  chan *runtimeapi.ContainerEventResponse
}

func (s *stream) Recv() (*runtimeapi.ContainerEventResponse, error) {
	select {
	case e, ok := <-s.ch:
		if !ok {
			return nil, status.Error(codes.Unavailable, "stream closed")
		}
		return e, nil
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

func newWatcher(rt *fakeEvents) (*Watcher, *testingclock.FakeClock, chan string) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	notified := make(chan string, 10)
	w := NewWatcher(WatcherOptions{Runtime: rt, Poll: 100 * time.Millisecond, RequestTimeout: time.Second,
		StuckAfter: time.Minute, Clock: clk, Notify: func(ids ...string) { notified <- strings.Join(ids, ",") }})
	return w, clk, notified
}

func TestWatcherPollsWithoutAnEventStream(t *testing.T) {
	rt := &fakeEvents{running: []string{"a"}}
	w, clk, notified := newWatcher(rt)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)

	lists := func() int { return rt.count(func() int { return rt.lists }) }
	testutil.WaitFor(t, "the baseline list", func() bool { return lists() == 1 && clk.HasWaiters() })
	// Nothing changed: a poll (proved by the list count) notifies nothing.
	clk.Step(100 * time.Millisecond)
	testutil.WaitFor(t, "the second poll", func() bool { return lists() == 2 })
	rt.set(func() { rt.running = nil })
	clk.Step(100 * time.Millisecond)
	testutil.WaitFor(t, "the third poll", func() bool { return lists() == 3 })
	select {
	case ids := <-notified:
		if ids != "a" {
			t.Fatalf("notified %q, want the container that stopped", ids)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no notification after a container stopped")
	}
	select {
	case ids := <-notified:
		t.Fatalf("notified %q more: the unchanged poll notified too", ids)
	default:
	}
	if err := w.Healthy(); err != nil {
		t.Fatal(err)
	}

	// The runtime stops answering: after StuckAfter the watcher says so.
	rt.set(func() { rt.listErr = errors.New("connection refused") })
	for i := 0; i < 11; i++ {
		n := lists()
		clk.Step(6 * time.Second)
		testutil.WaitFor(t, "a failed poll", func() bool { return lists() > n })
	}
	if err := w.Healthy(); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("healthy after a minute of failed polls: %v", err)
	}
}

func TestWatcherUsesTheEventStream(t *testing.T) {
	rt := &fakeEvents{events: make(chan *runtimeapi.ContainerEventResponse, 10)}
	w, clk, notified := newWatcher(rt)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	// A start is nodelet's own doing: not reported; the stop is.
	rt.events <- &runtimeapi.ContainerEventResponse{ContainerId: "c0", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT}
	rt.events <- &runtimeapi.ContainerEventResponse{ContainerId: "c1", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT}
	select {
	case ids := <-notified:
		if ids != "c1" {
			t.Fatalf("notified %q, want c1", ids)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no notification after a stop event")
	}
	if n := rt.count(func() int { return rt.lists }); n != 0 {
		t.Fatalf("polled %d times although the runtime streams events", n)
	}
	// An open stream is healthy however quiet it is.
	clk.Step(time.Hour)
	if err := w.Healthy(); err != nil {
		t.Fatal(err)
	}
}

func TestWatcherReportsABrokenStream(t *testing.T) {
	rt := &fakeEvents{events: make(chan *runtimeapi.ContainerEventResponse)}
	w, clk, _ := newWatcher(rt)
	var broke atomic.Int32
	w.o.StreamBroke = func() { broke.Add(1) }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	opens := func() int { return rt.count(func() int { return rt.opens }) }
	testutil.WaitFor(t, "the stream to open", func() bool { return opens() == 1 })
	// The stream breaks and every reopen fails.
	rt.set(func() {
		close(rt.events)
		rt.events = make(chan *runtimeapi.ContainerEventResponse)
		rt.openErr = status.Error(codes.Unavailable, "connection refused")
	})
	for opens() < 62 {
		testutil.WaitFor(t, "a reopen wait", clk.HasWaiters)
		n := opens()
		clk.Step(reopenDelay)
		testutil.WaitFor(t, "a reopen", func() bool { return opens() > n })
	}
	if err := w.Healthy(); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("healthy after a minute without a stream: %v", err)
	}
	// Every break and failed reopen is counted (the metric).
	if n := broke.Load(); n < 61 {
		t.Fatalf("%d broken streams counted, want one per failed attempt (61+)", n)
	}
	// Reopened: healthy again, and never polled meanwhile.
	rt.set(func() { rt.openErr = nil })
	testutil.WaitFor(t, "a reopen wait", clk.HasWaiters)
	clk.Step(reopenDelay)
	testutil.WaitFor(t, "the stream to reopen", func() bool { return w.Healthy() == nil })
	if n := rt.count(func() int { return rt.lists }); n != 0 {
		t.Fatalf("polled %d times with a broken stream", n)
	}
}

// fakeTasks is containerd's event service.
type fakeTasks struct {
	ch      chan *apitypes.Envelope
	filters []string
}

func (f *fakeTasks) Subscribe(ctx context.Context, in *containerdevents.SubscribeRequest, _ ...grpc.CallOption) (containerdevents.Events_SubscribeClient, error) {
	f.filters = in.Filters
	return &envStream{ctx: ctx, ch: f.ch}, nil
}

type envStream struct {
	grpc.ClientStream
	ctx context.Context
	ch  chan *apitypes.Envelope
}

func (s *envStream) Recv() (*apitypes.Envelope, error) {
	select {
	case e := <-s.ch:
		return e, nil
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

func taskExit(t *testing.T, container, id string) *apitypes.Envelope {
	b, err := proto.Marshal(&eventsapi.TaskExit{ContainerID: container, ID: id, ExitStatus: 1})
	if err != nil {
		t.Fatal(err)
	}
	return &apitypes.Envelope{Namespace: "k8s.io", Topic: "/tasks/exit", Event: &anypb.Any{TypeUrl: "containerd.events.TaskExit", Value: b}}
}

// TestWatcherFollowsContainerdTaskExits: without a CRI event stream
// (containerd 1.6) the watcher follows containerd's own task exits, never
// polls, and ignores the exits of execs.
func TestWatcherFollowsContainerdTaskExits(t *testing.T) {
	rt := &fakeEvents{}
	tasks := &fakeTasks{ch: make(chan *apitypes.Envelope, 10)}
	w, clk, notified := newWatcher(rt)
	w.o.Containerd = tasks
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	tasks.ch <- taskExit(t, "c1", "exec-1") // a probe's exec ended
	tasks.ch <- taskExit(t, "c1", "c1")     // the container itself
	select {
	case ids := <-notified:
		if ids != "c1" {
			t.Fatalf("notified %q, want c1", ids)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no notification after a task exit")
	}
	select {
	case ids := <-notified:
		t.Fatalf("notified %q more: an exec's exit counted", ids)
	default:
	}
	if got := strings.Join(tasks.filters, ";"); got != `namespace=="k8s.io",topic=="/tasks/exit"` {
		t.Fatalf("filters %s", got)
	}
	if n := rt.count(func() int { return rt.lists }); n != 0 {
		t.Fatalf("polled %d times with an event stream", n)
	}
	clk.Step(time.Hour)
	if err := w.Healthy(); err != nil {
		t.Fatal(err)
	}
}
