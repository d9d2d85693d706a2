// Package metrics is nodelet's Prometheus instrumentation, served by the
// kubelet API at /metrics under the upstream kubelet's metric names, so
// existing dashboards and alerts keep working. Each pipeline stage is
// measured from the outside: the pod workers' Syncer and the CRI client
// are wrapped, and the PLEG reports its relist times; nothing in the
// pipeline knows about Prometheus.
package metrics

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/pods/podstatus"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

const subsystem = "kubelet"

// Buckets as upstream's, so histograms compare across kubelets.
var (
	podStartBuckets = []float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600}
	durationBuckets = prometheus.ExponentialBuckets(0.005, 2.5, 14)
)

// Metrics holds nodelet's metrics and their registry.
type Metrics struct {
	registry *prometheus.Registry

	podStart          prometheus.Histogram
	podStartSLI       prometheus.Histogram
	podWorker         *prometheus.HistogramVec
	plegRelist        prometheus.Histogram
	plegRelistPeriod  prometheus.Histogram
	runtimeOps        *prometheus.CounterVec
	runtimeOpsErrors  *prometheus.CounterVec
	runtimeOpsSeconds *prometheus.HistogramVec
	eventStreamErrors prometheus.Counter
	syncLoop          *prometheus.HistogramVec

	// probes are /metrics/probes.
	probes *Probes

	mu         sync.Mutex
	lastRelist time.Time
	// pulls is, per pod not yet seen running, when its first image pull
	// started and its last ended.
	pulls map[types.UID]pullWindow
}

type pullWindow struct{ first, last time.Time }

// RuntimePods lists the pods the runtime has, for the running gauges.
type RuntimePods func(ctx context.Context) ([]*container.Pod, error)

// New registers nodelet's metrics.
func New() *Metrics {
	m := &Metrics{registry: prometheus.NewRegistry(), pulls: map[types.UID]pullWindow{}, probes: NewProbes()}
	m.podStart = prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: subsystem, Name: "pod_start_duration_seconds", Buckets: podStartBuckets,
		Help: "Duration in seconds from nodelet seeing a pod for the first time to the pod starting to run",
	})
	m.podStartSLI = prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: subsystem, Name: "pod_start_sli_duration_seconds", Buckets: podStartBuckets,
		Help: "Duration in seconds to start a pod, excluding time to pull images, measured from nodelet seeing the pod to the pod starting to run",
	})
	m.podWorker = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Subsystem: subsystem, Name: "pod_worker_duration_seconds", Buckets: durationBuckets,
		Help: "Duration in seconds to sync a single pod. Broken down by operation type: create, update, sync or kill.",
	}, []string{"operation_type"})
	m.plegRelist = prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: subsystem, Name: "pleg_relist_duration_seconds", Buckets: durationBuckets,
		Help: "Duration in seconds for relisting pods in PLEG.",
	})
	m.plegRelistPeriod = prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: subsystem, Name: "pleg_relist_interval_seconds", Buckets: durationBuckets,
		Help: "Interval in seconds between relisting in PLEG.",
	})
	m.runtimeOps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: subsystem, Name: "runtime_operations_total", Help: "Cumulative number of runtime operations by operation type.",
	}, []string{"operation_type"})
	m.runtimeOpsErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: subsystem, Name: "runtime_operations_errors_total", Help: "Cumulative number of runtime operation errors by operation type.",
	}, []string{"operation_type"})
	m.runtimeOpsSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Subsystem: subsystem, Name: "runtime_operations_duration_seconds", Buckets: durationBuckets,
		Help: "Duration in seconds of runtime operations. Broken down by operation type.",
	}, []string{"operation_type"})
	m.eventStreamErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Subsystem: subsystem, Name: "evented_pleg_connection_error_count",
		Help: "The number of errors encountered during the establishment of streaming connection with the CRI runtime.",
	})
	m.syncLoop = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "nodelet", Name: "sync_loop_iteration_duration_seconds", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		Help: "Time the sync loop took to handle one event (nodelet's own: upstream has no such histogram), by kind: update, pleg, probe, sync or housekeeping.",
	}, []string{"event"})
	m.registry.MustRegister(m.podStart, m.podStartSLI, m.podWorker, m.plegRelist, m.plegRelistPeriod,
		m.runtimeOps, m.runtimeOpsErrors, m.runtimeOpsSeconds, m.eventStreamErrors, m.syncLoop,
		prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}), prometheus.NewGoCollector())
	return m
}

// Handler serves the metrics in the Prometheus text format, with the
// running pods and containers read from pods at scrape time. (The
// runtime is dialled through this package's interceptor, so the gauges
// that read it join here rather than at New.)
func (m *Metrics) Handler(pods RuntimePods) http.Handler {
	running := prometheus.NewRegistry()
	running.MustRegister(&runningCollector{pods: pods})
	return promhttp.HandlerFor(prometheus.Gatherers{m.registry, running}, promhttp.HandlerOpts{})
}

// Probes are the probe metrics (/metrics/probes).
func (m *Metrics) Probes() *Probes { return m.probes }

// Register adds collectors measured elsewhere (the certificate managers')
// to what /metrics serves.
func (m *Metrics) Register(cs ...prometheus.Collector) { m.registry.MustRegister(cs...) }

// EventStreamBroke counts a container event stream that broke (upstream's
// evented PLEG connection error count).
func (m *Metrics) EventStreamBroke() { m.eventStreamErrors.Inc() }

// ObserveRelist records one PLEG relist that started at start.
func (m *Metrics) ObserveRelist(start time.Time, took time.Duration) {
	m.plegRelist.Observe(took.Seconds())
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.lastRelist.IsZero() {
		m.plegRelistPeriod.Observe(start.Sub(m.lastRelist).Seconds())
	}
	m.lastRelist = start
}

// ObserveSyncLoop records how long the sync loop took to handle one event.
func (m *Metrics) ObserveSyncLoop(event string, took time.Duration) {
	m.syncLoop.WithLabelValues(event).Observe(took.Seconds())
}

// ObservePull notes that one of pod's image pulls ran from start to end.
func (m *Metrics) ObservePull(pod types.UID, start, end time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.pulls[pod]
	if !ok || start.Before(w.first) {
		w.first = start
	}
	if end.After(w.last) {
		w.last = end
	}
	m.pulls[pod] = w
}

// pullTime is how long pod waited for its images: from its first pull's
// start to its last one's end, as upstream measures it. It forgets the pod.
func (m *Metrics) pullTime(pod types.UID) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.pulls[pod]
	delete(m.pulls, pod)
	if !ok {
		return 0
	}
	return w.last.Sub(w.first)
}

// UnaryClientInterceptor counts and times every CRI call, named as
// upstream names runtime operations (ListContainers → list_containers).
func (m *Metrics) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		op := operationName(method)
		start := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		m.runtimeOps.WithLabelValues(op).Inc()
		m.runtimeOpsSeconds.WithLabelValues(op).Observe(time.Since(start).Seconds())
		if err != nil {
			m.runtimeOpsErrors.WithLabelValues(op).Inc()
		}
		return err
	}
}

// operationName turns "/runtime.v1.RuntimeService/ListContainers" into
// "list_containers".
func operationName(method string) string {
	name := method[strings.LastIndex(method, "/")+1:]
	var b strings.Builder
	for i, r := range name {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	// Upstream writes "podsandbox" as one word: run_podsandbox,
	// podsandbox_status, list_podsandbox_stats.
	return strings.ReplaceAll(b.String(), "pod_sandbox", "podsandbox")
}

// runningCollector reports kubelet_running_pods and
// kubelet_running_containers from the runtime at scrape time.
type runningCollector struct{ pods RuntimePods }

var (
	runningPodsDesc = prometheus.NewDesc(subsystem+"_running_pods", "Number of pods that have a running pod sandbox", nil, nil)
	containersDesc  = prometheus.NewDesc(subsystem+"_running_containers", "Number of containers currently running", []string{"container_state"}, nil)
)

func (c *runningCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- runningPodsDesc
	ch <- containersDesc
}

func (c *runningCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods, err := c.pods(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(runningPodsDesc, err)
		return
	}
	running := 0
	states := map[string]int{}
	for _, p := range pods {
		for _, s := range p.Sandboxes {
			if s.Ready {
				running++
				break
			}
		}
		for _, ctr := range p.Containers {
			states[string(ctr.State)]++
		}
	}
	ch <- prometheus.MustNewConstMetric(runningPodsDesc, prometheus.GaugeValue, float64(running))
	for state, n := range states {
		ch <- prometheus.MustNewConstMetric(containersDesc, prometheus.GaugeValue, float64(n), state)
	}
}

// Syncs is the observer of the pod workers' calls that times them and
// records each pod's start duration the first time it is seen running.
func (m *Metrics) Syncs(status podstatus.Reader, clk clock.PassiveClock) instrument.SyncObserver {
	return &syncs{m: m, status: status, clock: clk, started: map[types.UID]bool{}}
}

type syncs struct {
	m      *Metrics
	status podstatus.Reader
	clock  clock.PassiveClock

	mu      sync.Mutex
	started map[types.UID]bool
}

func (s *syncs) ObserveSync(ctx context.Context, c instrument.Call) (context.Context, func(error)) {
	start := s.clock.Now()
	switch c.Stage {
	case instrument.SyncPod:
		return ctx, func(error) {
			s.m.podWorker.WithLabelValues(c.UpdateType).Observe(s.clock.Since(start).Seconds())
			s.observeStart(c.Pod)
		}
	case instrument.SyncTerminatingPod:
		return ctx, func(error) { s.m.podWorker.WithLabelValues(c.UpdateType).Observe(s.clock.Since(start).Seconds()) }
	case instrument.SyncTerminatedPod:
		return ctx, func(err error) {
			if err != nil {
				return
			}
			s.mu.Lock()
			delete(s.started, c.Pod.UID)
			s.mu.Unlock()
			s.m.pullTime(c.Pod.UID)
		}
	}
	return ctx, func(error) {}
}

// observeStart records the time from the pod's first sighting (the
// merge's config.seen annotation) to its first Running status, and the
// same less the time spent pulling images (the SLI).
func (s *syncs) observeStart(pod *v1.Pod) {
	st, ok := s.status.GetPodStatus(pod.UID)
	if !ok || st.Phase != v1.PodRunning {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started[pod.UID] {
		return
	}
	s.started[pod.UID] = true
	pulling := s.m.pullTime(pod.UID)
	seen, err := time.Parse(time.RFC3339Nano, pod.Annotations[podutil.ConfigFirstSeenAnnotationKey])
	if err != nil {
		return
	}
	took := s.clock.Since(seen)
	s.m.podStart.Observe(took.Seconds())
	s.m.podStartSLI.Observe(max(took-pulling, 0).Seconds())
}
