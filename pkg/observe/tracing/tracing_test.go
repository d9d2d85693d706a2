package tracing

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/observe/timeline"
	"github.com/nodelet/nodelet/pkg/pods/podsources"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

var t0 = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

// bed is the composition the node builds: the timeline observed by the
// tracer, and the pod workers' syncer wrapped by both, over a fake syncer
// that takes the time it is told and makes CRI calls through the
// tracer's interceptor.
type bed struct {
	clock     *testingclock.FakeClock
	spans     *tracetest.SpanRecorder
	tracer    *Tracer
	steps     *timeline.Recorder
	observers []instrument.SyncObserver
	fake      *fakeSyncer
	statuses  map[types.UID]v1.PodStatus
	// outgoing are the traceparent headers the CRI calls carried.
	outgoing []string
}

func newBed(t *testing.T, sampler sdktrace.Sampler) *bed {
	b := &bed{clock: testingclock.NewFakeClock(t0), spans: tracetest.NewSpanRecorder(), statuses: map[types.UID]v1.PodStatus{}}
	p := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b.spans), sdktrace.WithSampler(sampler))
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	b.tracer = newTracer(p, b.clock)
	b.steps = timeline.New(timeline.Options{Clock: b.clock, KeepFinished: 10, Observe: b.tracer.Observe})
	// As the root lists them: the timeline, then the tracer.
	b.observers = []instrument.SyncObserver{b.steps.Syncs(b), b.tracer.Syncs()}
	b.fake = &fakeSyncer{b: b}
	return b
}

func (b *bed) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	s, ok := b.statuses[uid]
	return s, ok
}

// cri makes a CRI call through the interceptor, taking d.
func (b *bed) cri(ctx context.Context, method string, d time.Duration, fail error) error {
	return b.tracer.UnaryClientInterceptor()(ctx, method, nil, nil, nil, func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		if md, ok := metadata.FromOutgoingContext(ctx); ok && len(md["traceparent"]) > 0 {
			b.outgoing = append(b.outgoing, md["traceparent"][0])
		}
		b.clock.Step(d)
		return fail
	})
}

// fakeSyncer plays a pod's life from its annotations: "script" lists,
// per sync, what it does ("sandbox", "image", "container", "running",
// "ready", "fail").
type fakeSyncer struct {
	b     *bed
	syncs map[types.UID]int
}

func (f *fakeSyncer) SyncPod(ctx context.Context, pod *v1.Pod) error {
	if f.syncs == nil {
		f.syncs = map[types.UID]int{}
	}
	scripts := strings.Split(pod.Annotations["script"], ";")
	n := f.syncs[pod.UID]
	f.syncs[pod.UID]++
	if n >= len(scripts) {
		f.b.clock.Step(10 * time.Millisecond)
		return nil
	}
	var err error
	for _, act := range strings.Split(scripts[n], ",") {
		switch act {
		case "sandbox":
			end := f.b.steps.Begin(pod, instrument.KindSandbox, "attempt 0")
			_ = f.b.cri(ctx, "/runtime.v1.RuntimeService/RunPodSandbox", 300*time.Millisecond, nil)
			end(nil, "")
		case "image":
			end := f.b.steps.Begin(pod, instrument.KindImage, "busybox")
			_ = f.b.cri(ctx, "/runtime.v1.ImageService/ImageStatus", time.Millisecond, nil)
			_ = f.b.cri(ctx, "/runtime.v1.ImageService/PullImage", 2*time.Second, status.Error(codes.Unavailable, "registry down"))
			err = errors.New("ErrImagePull: registry down")
			end(err, "")
		case "container":
			end := f.b.steps.Begin(pod, instrument.KindContainer, "main")
			_ = f.b.cri(ctx, "/runtime.v1.RuntimeService/CreateContainer", 50*time.Millisecond, nil)
			_ = f.b.cri(ctx, "/runtime.v1.RuntimeService/StartContainer", 40*time.Millisecond, nil)
			end(nil, "")
		case "running":
			f.b.statuses[pod.UID] = v1.PodStatus{Phase: v1.PodRunning}
		case "ready":
			f.b.statuses[pod.UID] = v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}}
		}
	}
	f.b.clock.Step(5 * time.Millisecond)
	return err
}

func (f *fakeSyncer) SyncTerminatingPod(ctx context.Context, pod *v1.Pod) error {
	end := f.b.steps.Begin(pod, instrument.KindKill, "main")
	_ = f.b.cri(ctx, "/runtime.v1.RuntimeService/StopContainer", time.Second, nil)
	end(nil, "")
	_ = f.b.cri(ctx, "/runtime.v1.RuntimeService/StopPodSandbox", 100*time.Millisecond, nil)
	return nil
}

func (f *fakeSyncer) SyncTerminatedPod() error {
	f.b.clock.Step(20 * time.Millisecond)
	return nil
}

// pod is a pod its source delivers now.
func (b *bed) pod(name, script string) *v1.Pod {
	return testPod(name, script, b.clock.Now())
}

func testPod(name, script string, seen time.Time) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name + "-uid"),
		Annotations: map[string]string{"script": script, podutil.ConfigSourceAnnotationKey: "api",
			podutil.ConfigFirstSeenAnnotationKey: seen.Format(time.RFC3339Nano)}}}
}

func (b *bed) merge(pod *v1.Pod, op podsources.Op) {
	b.steps.Begin(pod, instrument.KindMerge, op.String())(nil, "from source api")
}

func (b *bed) sync(t *testing.T, pod *v1.Pod) {
	t.Helper()
	b.clock.Step(100 * time.Millisecond)
	_ = instrument.Run(context.Background(), b.observers, instrument.Call{Stage: instrument.SyncPod, Pod: pod, UpdateType: "sync"},
		func(ctx context.Context) error { return b.fake.SyncPod(ctx, pod) })
}

func (b *bed) terminate(t *testing.T, pod *v1.Pod) {
	t.Helper()
	b.clock.Step(time.Second)
	grace := int64(30)
	err := instrument.Run(context.Background(), b.observers, instrument.Call{Stage: instrument.SyncTerminatingPod, Pod: pod, UpdateType: "kill", GracePeriod: &grace},
		func(ctx context.Context) error { return b.fake.SyncTerminatingPod(ctx, pod) })
	if err != nil {
		t.Fatal(err)
	}
	err = instrument.Run(context.Background(), b.observers, instrument.Call{Stage: instrument.SyncTerminatedPod, Pod: pod, UpdateType: "kill"},
		func(context.Context) error { return b.fake.SyncTerminatedPod() })
	if err != nil {
		t.Fatal(err)
	}
}

// The pods' traces, played through the node's composition, match
// testdata/traces.txt: a start that fails a pull and then becomes Ready
// (its later syncs and probes untraced), its termination as a second
// trace, a pod that left its source before it was admitted, and a pod
// terminated while starting.
func TestGoldenTraces(t *testing.T) {
	b := newBed(t, sdktrace.AlwaysSample())
	web := b.pod("web", "sandbox,image;container,running;ready")
	b.merge(web, podsources.ADD)
	for range 4 {
		b.sync(t, web)
	}
	b.steps.Begin(web, instrument.KindProbe, "Readiness main")(errors.New("failed 3 times"), "") // after Ready: untraced
	b.terminate(t, web)
	b.merge(web, podsources.REMOVE) // after its termination: nothing left to end

	rejected := b.pod("rejected", "")
	b.merge(rejected, podsources.ADD)
	b.clock.Step(time.Second)
	b.merge(rejected, podsources.REMOVE)

	job := b.pod("job", "sandbox,container,running")
	b.merge(job, podsources.ADD)
	b.sync(t, job)
	b.terminate(t, job)

	testutil.Golden(t, filepath.Join("testdata", "traces.txt"), render(b.spans.Ended()))
	if len(b.outgoing) != 12 || !strings.HasPrefix(b.outgoing[0], "00-") {
		t.Errorf("traceparent sent with %d CRI calls: %v", len(b.outgoing), b.outgoing)
	}
	if n := len(b.tracer.pods); n != 0 {
		t.Errorf("%d pods' traces kept after they ended", n)
	}
}

// render prints each trace as a tree (CRI calls are children of the
// sync they were made in, beside the steps that made them): span name, start after the root's,
// duration, status and the pod's attributes on the root.
func render(spans []sdktrace.ReadOnlySpan) string {
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Parent().IsValid() {
			children[s.Parent().SpanID()] = append(children[s.Parent().SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	byStart := func(a, b sdktrace.ReadOnlySpan) int {
		if c := a.StartTime().Compare(b.StartTime()); c != 0 {
			return c
		}
		return strings.Compare(a.Name(), b.Name())
	}
	slices.SortFunc(roots, byStart)
	var out strings.Builder
	var walk func(s sdktrace.ReadOnlySpan, origin time.Time, depth int)
	walk = func(s sdktrace.ReadOnlySpan, origin time.Time, depth int) {
		line := fmt.Sprintf("%s%s +%v %v", strings.Repeat("  ", depth), s.Name(), s.StartTime().Sub(origin), s.EndTime().Sub(s.StartTime()))
		if s.Status().Code != 0 {
			line += fmt.Sprintf(" [%s: %s]", s.Status().Code, s.Status().Description)
		}
		for _, a := range s.Attributes() {
			if depth == 0 || a.Key == "rpc.grpc.status_code" {
				line += fmt.Sprintf(" %s=%s", a.Key, a.Value.Emit())
			}
		}
		out.WriteString(line + "\n")
		kids := children[s.SpanContext().SpanID()]
		slices.SortFunc(kids, byStart)
		for _, k := range kids {
			if k.SpanContext().TraceID() != s.SpanContext().TraceID() {
				panic("a child in another trace")
			}
			walk(k, origin, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, r.StartTime(), 0)
		out.WriteString("\n")
	}
	return out.String()
}

// An unsampled pod records nothing and leaves nothing behind; its CRI
// calls carry no trace.
func TestUnsampled(t *testing.T) {
	b := newBed(t, sdktrace.NeverSample())
	web := b.pod("web", "sandbox,container,running,ready")
	b.merge(web, podsources.ADD)
	b.sync(t, web)
	b.terminate(t, web)
	if n := len(b.spans.Started()); n != 0 || len(b.outgoing) != 0 {
		t.Fatalf("%d spans, %d traceparents", n, len(b.outgoing))
	}
	// The pod went through (the fake syncer ran its CRI calls).
	if st, _ := b.GetPodStatus(web.UID); !podutil.IsPodReady(st) || len(b.tracer.pods) != 0 {
		t.Fatalf("status %+v, traces kept %d", st, len(b.tracer.pods))
	}
}

// Off, nothing is observed: a sync runs with its own context, and a CRI call
// in a sampled context (another component's) passes untouched.
func TestOff(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	tr, err := New(context.Background(), Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx0 := context.Background()
	if ctx, _ := tr.Syncs().ObserveSync(ctx0, instrument.Call{Stage: instrument.SyncPod, Pod: testPod("a", "", t0), UpdateType: "create"}); ctx != ctx0 {
		t.Fatal("a sync's context changed while tracing is off")
	}
	spans := tracetest.NewSpanRecorder()
	ctx, span := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("t").Start(context.Background(), "other")
	called := false
	err = tr.UnaryClientInterceptor()(ctx, "/runtime.v1.RuntimeService/Version", nil, nil, nil, func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		_, hasMD := metadata.FromOutgoingContext(ctx)
		called = !hasMD
		return nil
	})
	span.End()
	if err != nil || !called || len(spans.Ended()) != 1 {
		t.Fatalf("err %v, called without metadata %v, spans %d", err, called, len(spans.Ended()))
	}
	tr.Observe(testPod("web", "", t0), timeline.Step{Kind: instrument.KindSource, Start: t0, End: t0})
	if len(tr.pods) != 0 {
		t.Fatal("a step observed while tracing is off")
	}
}
