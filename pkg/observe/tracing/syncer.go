package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// Syncs is the observer of the pod workers' calls that traces them: each
// sync of a starting pod, and each call of its termination, is a span of
// the pod's trace live while it runs, and the call's context carries it,
// so the CRI calls under it are its children. Off, it observes nothing.
func (t *Tracer) Syncs() instrument.SyncObserver { return syncs{t} }

type syncs struct{ t *Tracer }

func (s syncs) ObserveSync(ctx context.Context, c instrument.Call) (context.Context, func(error)) {
	if !s.t.on {
		return ctx, func(error) {}
	}
	var (
		end  func(err error, last bool)
		last bool
	)
	switch c.Stage {
	case instrument.SyncPod:
		ctx, end = s.t.live(ctx, c.Pod, starting, "sync ("+c.UpdateType+")")
	case instrument.SyncTerminatingPod:
		ctx, end = s.t.live(ctx, c.Pod, terminating, "terminating stopping containers")
	case instrument.SyncTerminatedPod:
		ctx, end = s.t.live(ctx, c.Pod, terminating, "terminated releasing volumes and cgroups")
		last = true
	default:
		return ctx, func(error) {}
	}
	return ctx, func(err error) { end(err, last && err == nil) }
}

// live starts a span of the pod's trace in the phase (a sync of a
// starting pod, or a termination call), opening the trace if need be,
// and returns ctx carrying it and the function that ends it (and, with
// last, the whole trace). A sync of a pod past its start is not traced.
func (t *Tracer) live(ctx context.Context, pod *v1.Pod, ph phase, name string) (context.Context, func(err error, last bool)) {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pods[pod.UID]
	switch {
	case ph == starting && p == nil:
		p = t.begin(pod, starting, firstSeen(pod, now))
	case ph == starting && p.phase != starting:
		return ctx, func(error, bool) {}
	case ph == terminating && (p == nil || p.phase != terminating):
		if p != nil && p.phase == starting {
			p.root.SetAttributes(podOutcome("terminated before it was ready"))
			p.root.End(trace.WithTimestamp(now))
		}
		p = t.begin(pod, terminating, now)
	}
	if !p.sampled() {
		return ctx, func(_ error, last bool) {
			if last {
				t.forget(pod, p)
			}
		}
	}
	_, span := t.tracer.Start(p.ctx, name, trace.WithTimestamp(now), trace.WithAttributes(p.attrs...))
	spanCtx := trace.ContextWithSpan(ctx, span)
	p.live, p.liveStart = spanCtx, now
	return spanCtx, func(err error, last bool) {
		end := t.clock.Now()
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End(trace.WithTimestamp(end))
		t.mu.Lock()
		if p.live == spanCtx {
			p.live = nil
		}
		t.mu.Unlock()
		if last {
			p.root.End(trace.WithTimestamp(end))
			t.forget(pod, p)
		}
	}
}

// forget drops a finished pod's trace (if it is still the pod's).
func (t *Tracer) forget(pod *v1.Pod, p *podTrace) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pods[pod.UID] == p {
		delete(t.pods, pod.UID)
	}
}

// firstSeen is when the pod's source first delivered it (the merge's
// annotation), or at if it does not say.
func firstSeen(pod *v1.Pod, at time.Time) time.Time {
	if seen, err := time.Parse(time.RFC3339Nano, pod.Annotations[podutil.ConfigFirstSeenAnnotationKey]); err == nil {
		return seen
	}
	return at
}
