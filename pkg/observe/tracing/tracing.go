// Package tracing exports each pod's start, and then its termination, as
// one OpenTelemetry trace each (the KubeletConfiguration's tracing field),
// over OTLP/gRPC: a root span for the pod, a span for every step of its
// timeline under it (waits, syncs, volumes, sandbox, pulls, containers,
// hooks, probes, until Ready), and the CRI calls a sync makes as children
// of that sync's span.
//
// A pod's trace goes through these states:
//
//	            first step          Ready step
//	(none) ------------------> starting ---------> running
//	                              |                   |
//	                              +--- termination ---+
//	                              v      begins
//	                         terminating --- terminated ---> (none)
//
// Steps reach the tracer from the timeline (Observe) once they ended,
// with their own times; syncs and termination are spans live for their
// duration (InstrumentSyncer), so the CRI calls made with their context
// become their children. A step is a child of the sync under way if it
// began within it, else of the root. Steps of a running pod (after
// Ready, before termination) belong to no trace.
//
// Spans are batched and exported in the background: a slow or stalled
// collector costs dropped spans, never a blocked sync.
package tracing

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-base/tracing"
	tracingapi "k8s.io/component-base/tracing/api/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/observe/timeline"
	"github.com/nodelet/nodelet/pkg/pods/podsources"
)

// instrumentation names the spans' tracer.
const instrumentation = "github.com/nodelet/nodelet/pkg/observe/tracing"

// Options configure a Tracer.
type Options struct {
	// Config is the KubeletConfiguration's tracing; nil turns tracing
	// off.
	Config   *tracingapi.TracingConfiguration
	NodeName string
	Version  string
	Clock    clock.PassiveClock
}

// Provider is where spans go: an OpenTelemetry TracerProvider that
// flushes on Shutdown.
type Provider interface {
	trace.TracerProvider
	Shutdown(context.Context) error
}

// Tracer makes the pods' traces.
type Tracer struct {
	provider Provider
	tracer   trace.Tracer
	clock    clock.PassiveClock
	// on is false when tracing is off: nothing is wrapped or recorded.
	on bool

	mu   sync.Mutex
	pods map[types.UID]*podTrace
}

// New builds the tracer the configuration asks for.
func New(ctx context.Context, o Options) (*Tracer, error) {
	if o.Config == nil {
		return newTracer(nil, o.Clock), nil
	}
	p, err := tracing.NewProvider(ctx, o.Config, nil, []resource.Option{resource.WithAttributes(
		attribute.String("service.name", "nodelet"),
		attribute.String("service.version", o.Version),
		attribute.String("host.name", o.NodeName),
	)})
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	klog.InfoS("Tracing pod starts and terminations over OTLP/gRPC", "endpoint", ptr.Deref(o.Config.Endpoint, "localhost:4317"),
		"samplingRatePerMillion", ptr.Deref(o.Config.SamplingRatePerMillion, 0))
	return newTracer(p, o.Clock), nil
}

// newTracer returns a tracer exporting to p, or one that is off if p is
// nil.
func newTracer(p Provider, clk clock.PassiveClock) *Tracer {
	t := &Tracer{provider: p, clock: clk, on: p != nil, pods: map[types.UID]*podTrace{}}
	if p == nil {
		t.tracer = noop.NewTracerProvider().Tracer(instrumentation)
	} else {
		t.tracer = p.Tracer(instrumentation)
	}
	return t
}

// shutdownWait bounds the flush of the last spans when nodelet stops.
const shutdownWait = 5 * time.Second

// Run keeps the exporter until ctx ends, then flushes what is batched
// (for at most shutdownWait).
func (t *Tracer) Run(ctx context.Context) error {
	<-ctx.Done()
	if !t.on {
		return nil
	}
	stop, cancel := context.WithTimeout(context.Background(), shutdownWait)
	defer cancel()
	if err := t.provider.Shutdown(stop); err != nil {
		klog.InfoS("Tracing: the last spans were not exported", "err", err)
	}
	return nil
}

// phase is where a pod's trace is.
type phase int

const (
	starting phase = iota
	running
	terminating
)

// podTrace is one pod's trace under way.
type podTrace struct {
	phase phase
	root  trace.Span
	ctx   context.Context // the root's
	attrs []attribute.KeyValue
	// live is the sync (or termination call) under way, if any, and when
	// it began.
	live      context.Context
	liveStart time.Time
}

func podAttributes(pod *v1.Pod) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("k8s.pod.name", pod.Name),
		attribute.String("k8s.namespace.name", pod.Namespace),
		attribute.String("k8s.pod.uid", string(pod.UID)),
	}
}

// begin opens a pod's trace of the phase (starting or terminating) at
// the time. Call with mu held.
func (t *Tracer) begin(pod *v1.Pod, ph phase, at time.Time) *podTrace {
	name := "pod start"
	if ph == terminating {
		name = "pod termination"
	}
	attrs := podAttributes(pod)
	ctx, root := t.tracer.Start(context.Background(), name, trace.WithNewRoot(), trace.WithTimestamp(at),
		trace.WithAttributes(attrs...))
	p := &podTrace{phase: ph, root: root, ctx: ctx, attrs: attrs}
	t.pods[pod.UID] = p
	return p
}

// podOutcome notes how a start that never became Ready ended.
func podOutcome(s string) attribute.KeyValue { return attribute.String("nodelet.outcome", s) }

// sampled reports whether the trace records anything.
func (p *podTrace) sampled() bool { return p.root.SpanContext().IsSampled() }

// opensStart lists the steps that begin a pod's start: its source
// delivering it, and the first sync's "seen".
func opensStart(s timeline.Step) bool {
	return (s.Kind == instrument.KindMerge && s.Name == podsources.ADD.String()) || s.Kind == instrument.KindSource
}

// leftSource is the step of a pod leaving its source: a start under way
// ends there (a pod that was never admitted has no termination), and a
// termination, if any, opens its own trace.
func leftSource(s timeline.Step) bool {
	return s.Kind == instrument.KindMerge && s.Name == podsources.REMOVE.String()
}

// liveKinds are the steps InstrumentSyncer makes live spans of.
var liveKinds = map[instrument.Kind]bool{instrument.KindSync: true, instrument.KindTerminating: true, instrument.KindTerminated: true}

// Observe makes a span of a pod's timeline step (timeline.Options.Observe).
func (t *Tracer) Observe(pod *v1.Pod, s timeline.Step) {
	if !t.on || liveKinds[s.Kind] {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pods[pod.UID]
	if p == nil {
		if !opensStart(s) {
			return
		}
		p = t.begin(pod, starting, s.Start)
	}
	if leftSource(s) && p.phase != terminating {
		if p.phase == starting {
			t.stepSpan(p, s)
			p.root.SetAttributes(podOutcome("left its source before it was ready"))
			p.root.End(trace.WithTimestamp(s.End))
		}
		delete(t.pods, pod.UID)
		return
	}
	if p.phase == running {
		return
	}
	if p.sampled() {
		t.stepSpan(p, s)
	}
	if s.Kind == instrument.KindReady && p.phase == starting {
		p.root.End(trace.WithTimestamp(s.End))
		p.phase = running
	}
}

// stepSpan records a step that ended as a span of the pod's trace. Call
// with mu held.
func (t *Tracer) stepSpan(p *podTrace, s timeline.Step) {
	parent := p.ctx
	if p.live != nil && !s.Start.Before(p.liveStart) {
		parent = p.live
	}
	attrs := append(p.attrs[:len(p.attrs):len(p.attrs)], attribute.String("nodelet.step.kind", string(s.Kind)))
	if s.Detail != "" {
		attrs = append(attrs, attribute.String("nodelet.step.detail", s.Detail))
	}
	_, span := t.tracer.Start(parent, string(s.Kind)+" "+s.Name, trace.WithTimestamp(s.Start), trace.WithAttributes(attrs...))
	if s.Outcome != "ok" && s.Outcome != "" {
		span.SetStatus(codes.Error, s.Outcome)
	}
	span.End(trace.WithTimestamp(s.End))
}
