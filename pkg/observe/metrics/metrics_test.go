package metrics

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// scrape fetches and parses the metrics as Prometheus would.
func scrape(t *testing.T, m *Metrics, pods RuntimePods) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler(pods).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("metrics do not parse: %v", err)
	}
	return families
}

type statuses map[types.UID]v1.PodStatus

func (s statuses) GetPodStatus(uid types.UID) (v1.PodStatus, bool) { st, ok := s[uid]; return st, ok }

func TestMetrics(t *testing.T) {
	pods := []*container.Pod{{ID: "a", Sandboxes: []*container.Sandbox{{Ready: true}},
		Containers: []*container.Container{{State: container.StateRunning}, {State: container.StateExited}}}}
	m := New()
	runtimePods := func(context.Context) ([]*container.Pod, error) { return pods, nil }
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	st := statuses{}
	s := m.Syncs(st, clk)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "a", Annotations: map[string]string{
		podutil.ConfigFirstSeenAnnotationKey: clk.Now().Format(time.RFC3339Nano)}}}

	ctx := context.Background()
	sync := func(u string) {
		t.Helper()
		err := instrument.Run(ctx, []instrument.SyncObserver{s}, instrument.Call{Stage: instrument.SyncPod, Pod: pod, UpdateType: u},
			func(context.Context) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
	}
	sync("create") // pending: no start yet
	// Two overlapping pulls, 0.5 s to 1.5 s and 1 s to 2 s: 1.5 s pulling.
	m.ObservePull("a", time.Unix(1000, 5e8), time.Unix(1001, 5e8))
	m.ObservePull("a", time.Unix(1001, 0), time.Unix(1002, 0))
	m.ObservePull("other", time.Unix(900, 0), time.Unix(1000, 0))
	clk.Step(3 * time.Second)
	st["a"] = v1.PodStatus{Phase: v1.PodRunning}
	sync("sync")
	sync("sync") // observed once only

	invoke := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		if method == "/runtime.v1.RuntimeService/StopContainer" {
			return errors.New("boom")
		}
		return nil
	}
	icpt := m.UnaryClientInterceptor()
	testutil.Must(t, icpt(ctx, "/runtime.v1.RuntimeService/ListContainers", nil, nil, nil, invoke))
	if err := icpt(ctx, "/runtime.v1.RuntimeService/StopContainer", nil, nil, nil, invoke); err == nil || err.Error() != "boom" {
		t.Fatalf("the interceptor changed the error: %v", err)
	}
	m.ObserveRelist(time.Unix(1000, 0), 20*time.Millisecond)
	m.ObserveRelist(time.Unix(1001, 0), 30*time.Millisecond)
	m.EventStreamBroke()
	m.EventStreamBroke()

	f := scrape(t, m, runtimePods)
	if h := f["kubelet_pod_start_duration_seconds"].GetMetric()[0].GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 3 {
		t.Errorf("pod start histogram: count %d sum %v, want one 3 s start", h.GetSampleCount(), h.GetSampleSum())
	}
	if h := f["kubelet_pod_start_sli_duration_seconds"].GetMetric()[0].GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 1.5 {
		t.Errorf("pod start SLI histogram: count %d sum %v, want one 1.5 s start (3 s less 1.5 s pulling)", h.GetSampleCount(), h.GetSampleSum())
	}
	byLabel := func(name, label string) map[string]float64 {
		out := map[string]float64{}
		for _, mt := range f[name].GetMetric() {
			v := mt.GetCounter().GetValue() + mt.GetGauge().GetValue() + float64(mt.GetHistogram().GetSampleCount())
			key := ""
			for _, l := range mt.GetLabel() {
				if l.GetName() == label {
					key = l.GetValue()
				}
			}
			out[key] = v
		}
		return out
	}
	if got := byLabel("kubelet_pod_worker_duration_seconds", "operation_type"); got["create"] != 1 || got["sync"] != 2 {
		t.Errorf("pod worker durations by operation: %v", got)
	}
	if got := byLabel("kubelet_runtime_operations_total", "operation_type"); got["list_containers"] != 1 || got["stop_container"] != 1 {
		t.Errorf("runtime operations: %v", got)
	}
	if got := byLabel("kubelet_runtime_operations_errors_total", "operation_type"); got["stop_container"] != 1 || got["list_containers"] != 0 {
		t.Errorf("runtime operation errors: %v", got)
	}
	if got := byLabel("kubelet_evented_pleg_connection_error_count", ""); got[""] != 2 {
		t.Errorf("broken event streams: %v", got)
	}
	if got := byLabel("kubelet_pleg_relist_interval_seconds", ""); got[""] != 1 {
		t.Errorf("relist intervals: %v", got)
	}
	if got := byLabel("kubelet_running_pods", ""); got[""] != 1 {
		t.Errorf("running pods: %v", got)
	}
	if got := byLabel("kubelet_running_containers", "container_state"); got[string(container.StateRunning)] != 1 || got[string(container.StateExited)] != 1 {
		t.Errorf("running containers: %v", got)
	}
}

// TestOperationNamesAreUpstreams: dashboards select runtime operations by
// upstream's names, which write "podsandbox" as one word.
func TestOperationNamesAreUpstreams(t *testing.T) {
	for method, want := range map[string]string{
		"/runtime.v1.RuntimeService/RunPodSandbox":       "run_podsandbox",
		"/runtime.v1.RuntimeService/PodSandboxStatus":    "podsandbox_status",
		"/runtime.v1.RuntimeService/ListPodSandboxStats": "list_podsandbox_stats",
		"/runtime.v1.RuntimeService/ContainerStatus":     "container_status",
		"/runtime.v1.ImageService/ImageFsInfo":           "image_fs_info",
		"/runtime.v1.RuntimeService/ReopenContainerLog":  "reopen_container_log",
	} {
		if got := operationName(method); got != want {
			t.Errorf("%s: %q, want %q", method, got, want)
		}
	}
}
