//go:build integration

package standalone

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/otlptest"
	"github.com/nodelet/nodelet/internal/testbed"
)

// With tracing on, a pod's start reaches an OTLP collector as one
// connected trace: the pod's root span, its timeline's steps, the CRI
// calls under the syncs that made them, until Ready; its termination is a
// second trace.
func TestPodTraces(t *testing.T) {
	r, err := otlptest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{
		ExtraConfig: fmt.Sprintf("tracing:\n  endpoint: %s\n  samplingRatePerMillion: 1000000\n", r.Addr),
	})
	n.WriteManifest("traced.yaml", probed("traced", testbed.BusyboxImage, "sleep 3600",
		"    readinessProbe:\n      periodSeconds: 1\n      exec: {command: [\"true\"]}\n"))
	name := n.PodName("traced")
	start := waitTrace(t, r, name, "pod start")
	tree := otlptest.Tree(r.Spans(), start)
	t.Logf("the pod's start:\n%s", tree)
	for _, want := range []string{"merge ADD", "source seen", "wait waiting to be admitted and synced", "sync (", "sandbox attempt",
		"runtime.v1.RuntimeService/RunPodSandbox", "image " + testbed.BusyboxImage, "container main",
		"runtime.v1.RuntimeService/CreateContainer", "runtime.v1.RuntimeService/StartContainer",
		"probe Readiness main", "ready ready"} {
		if !strings.Contains(tree, want) {
			t.Errorf("no %q in the trace", want)
		}
	}
	checkConnected(t, r.Spans(), start, name)

	n.RemoveManifest("traced.yaml")
	stop := waitTrace(t, r, name, "pod termination")
	tree = otlptest.Tree(r.Spans(), stop)
	t.Logf("the pod's termination:\n%s", tree)
	for _, want := range []string{"terminating stopping containers", "runtime.v1.RuntimeService/StopContainer",
		"runtime.v1.RuntimeService/StopPodSandbox", "terminated releasing volumes and cgroups"} {
		if !strings.Contains(tree, want) {
			t.Errorf("no %q in the termination trace", want)
		}
	}
	checkConnected(t, r.Spans(), stop, name)
}

// waitTrace waits for the pod's root span of that name (exported once it
// ended) and returns its trace ID.
func waitTrace(t *testing.T, r *otlptest.Receiver, pod, root string) string {
	t.Helper()
	var id string
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		for _, s := range r.Spans() {
			if s.Name == root && s.ParentID == "" && s.Attributes["k8s.pod.name"] == pod {
				id = s.TraceID
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d spans received, none the %q of %s", len(r.Spans()), root, pod)
	})
	return id
}

// checkConnected: every span of the trace has its parent in it, carries
// the pod's attributes and nodelet's resource; a CRI call's parent is a
// sync or a termination call.
func checkConnected(t *testing.T, spans []otlptest.Span, traceID, pod string) {
	t.Helper()
	byID := map[string]otlptest.Span{}
	for _, s := range spans {
		if s.TraceID == traceID {
			byID[s.SpanID] = s
		}
	}
	for _, s := range byID {
		if s.ParentID != "" {
			p, ok := byID[s.ParentID]
			if !ok {
				t.Errorf("span %q: its parent is not in the trace", s.Name)
			}
			if strings.HasPrefix(s.Name, "runtime.v1.") && !strings.HasPrefix(p.Name, "sync (") && !strings.HasPrefix(p.Name, "terminat") {
				t.Errorf("CRI call %q under %q", s.Name, p.Name)
			}
		}
		if s.Attributes["k8s.pod.name"] == "" && !strings.HasPrefix(s.Name, "runtime.v1.") {
			t.Errorf("span %q without the pod's attributes", s.Name)
		}
		if s.Attributes["k8s.pod.name"] != "" && (s.Attributes["k8s.pod.name"] != pod || s.Attributes["k8s.namespace.name"] != "default" || s.Attributes["k8s.pod.uid"] == "") {
			t.Errorf("span %q: attributes %v", s.Name, s.Attributes)
		}
		if s.Resource["service.name"] != "nodelet" {
			t.Errorf("span %q: resource %v", s.Name, s.Resource)
		}
		if s.End.Before(s.Start) || s.End.Sub(s.Start) > time.Hour {
			t.Errorf("span %q: %v to %v", s.Name, s.Start, s.End)
		}
	}
}
