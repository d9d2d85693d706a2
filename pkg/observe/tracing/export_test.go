package tracing

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	tracingapi "k8s.io/component-base/tracing/api/v1"

	"github.com/nodelet/nodelet/internal/otlptest"
	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/observe/timeline"
	"github.com/nodelet/nodelet/pkg/pods/podsources"
)

func exporting(t *testing.T, r *otlptest.Receiver, rate int32) *Tracer {
	t.Helper()
	tr, err := New(context.Background(), Options{Config: &tracingapi.TracingConfiguration{Endpoint: ptr.To(r.Addr), SamplingRatePerMillion: ptr.To(rate)},
		NodeName: "node1", Version: "v0.test", Clock: clock.RealClock{}})
	testutil.Must(t, err)
	return tr
}

// play runs a pod's start to Ready through the tracer, as the node would.
func play(tr *Tracer, name string) {
	steps := timeline.New(timeline.Options{Clock: clock.RealClock{}, KeepFinished: 1, Observe: tr.Observe})
	pod := testPod(name, "", steps.Now())
	steps.Begin(pod, instrument.KindMerge, podsources.ADD.String())(nil, "")
	steps.Begin(pod, instrument.KindContainer, "main")(nil, "")
	steps.Begin(pod, instrument.KindReady, "ready")(nil, "")
}

// Exported over OTLP/gRPC: one connected trace per pod start, with the
// pod's attributes and the node's resource; the last spans are flushed
// when nodelet stops.
func TestExportsOverOTLP(t *testing.T) {
	r, err := otlptest.Start()
	testutil.Must(t, err)
	defer r.Stop()
	tr := exporting(t, r, 1_000_000)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- tr.Run(ctx) }()
	play(tr, "web")
	stop()
	testutil.Must(t, <-done)
	spans := r.Spans()
	if len(spans) != 4 {
		t.Fatalf("%d spans: %+v", len(spans), spans)
	}
	tree := otlptest.Tree(spans, spans[0].TraceID)
	if !strings.HasPrefix(tree, "pod start") || strings.Count(tree, "\n") != 4 {
		t.Errorf("one trace of four spans, rooted at the pod's start:\n%s", tree)
	}
	for _, s := range spans {
		if s.Resource["service.name"] != "nodelet" || s.Resource["host.name"] != "node1" || s.Attributes["k8s.pod.name"] != "web" ||
			s.Attributes["k8s.namespace.name"] != "ns" || s.Attributes["k8s.pod.uid"] != "web-uid" {
			t.Errorf("span %s: resource %v attributes %v", s.Name, s.Resource, s.Attributes)
		}
	}
}

// A stalled collector costs spans, never a blocked step: far more spans
// than the exporter's queue holds are recorded while every export waits.
func TestStalledCollectorBlocksNothing(t *testing.T) {
	r, err := otlptest.Start()
	testutil.Must(t, err)
	defer r.Stop()
	r.Stall()
	tr := exporting(t, r, 1_000_000)
	var wg sync.WaitGroup
	wg.Add(1)
	finished := false
	var mu sync.Mutex
	go func() {
		defer wg.Done()
		for i := range 3000 { // 12000 spans; the queue holds 2048
			play(tr, fmt.Sprintf("pod%d", i))
		}
		mu.Lock()
		finished = true
		mu.Unlock()
	}()
	testutil.WaitFor(t, "3000 pod starts traced against a stalled collector", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return finished
	})
	wg.Wait()
	// The exporter did try: its export is the one stalled.
	testutil.WaitFor(t, "an export to reach the collector", func() bool { return r.Exports() > 0 })
	if n := len(r.Spans()); n != 0 {
		t.Fatalf("a stalled collector received %d spans", n)
	}
}
