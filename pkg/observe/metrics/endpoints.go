package metrics

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/pods/prober"
)

// Summarizer measures the node and its pods (the stats summary);
// onlyCPUAndMemory leaves out filesystems, networks and volumes.
type Summarizer func(ctx context.Context, onlyCPUAndMemory bool) (*statsapi.Summary, error)

// scrapeTimeout bounds a scrape's measurement of the runtime.
const scrapeTimeout = 30 * time.Second

// handlerFor serves one collector's metrics in the Prometheus text
// format.
func handlerFor(c prometheus.Collector) http.Handler {
	r := prometheus.NewRegistry()
	r.MustRegister(c)
	return promhttp.HandlerFor(r, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Descriptions of /metrics/resource, as the kubelet's: what
// metrics-server (kubectl top, the HorizontalPodAutoscaler) reads. Every
// sample carries the time it was measured at.
var (
	nodeCPUDesc      = prometheus.NewDesc("node_cpu_usage_seconds_total", "Cumulative cpu time consumed by the node in core-seconds", nil, nil)
	nodeMemoryDesc   = prometheus.NewDesc("node_memory_working_set_bytes", "Current working set of the node in bytes", nil, nil)
	nodeSwapDesc     = prometheus.NewDesc("node_swap_usage_bytes", "Current swap usage of the node in bytes. Reported only on non-windows systems", nil, nil)
	containerLabels  = []string{"container", "pod", "namespace"}
	ctrCPUDesc       = prometheus.NewDesc("container_cpu_usage_seconds_total", "Cumulative cpu time consumed by the container in core-seconds", containerLabels, nil)
	ctrMemoryDesc    = prometheus.NewDesc("container_memory_working_set_bytes", "Current working set of the container in bytes", containerLabels, nil)
	ctrSwapDesc      = prometheus.NewDesc("container_swap_usage_bytes", "Current amount of the container swap usage in bytes. Reported only on non-windows systems", containerLabels, nil)
	ctrStartDesc     = prometheus.NewDesc("container_start_time_seconds", "Start time of the container since unix epoch in seconds", containerLabels, nil)
	podLabels        = []string{"pod", "namespace"}
	podCPUDesc       = prometheus.NewDesc("pod_cpu_usage_seconds_total", "Cumulative cpu time consumed by the pod in core-seconds", podLabels, nil)
	podMemoryDesc    = prometheus.NewDesc("pod_memory_working_set_bytes", "Current working set of the pod in bytes", podLabels, nil)
	podSwapDesc      = prometheus.NewDesc("pod_swap_usage_bytes", "Current amount of the pod swap usage in bytes. Reported only on non-windows systems", podLabels, nil)
	scrapeErrorDesc  = prometheus.NewDesc("resource_scrape_error", "1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
	oldScrapeErrDesc = prometheus.NewDesc("scrape_error", "(Deprecated since 1.29.0) 1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
)

// ResourceHandler serves /metrics/resource from the stats summary.
func ResourceHandler(summary Summarizer) http.Handler { return handlerFor(resourceCollector{summary}) }

type resourceCollector struct{ summary Summarizer }

func (resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nodeCPUDesc, nodeMemoryDesc, nodeSwapDesc, ctrCPUDesc, ctrMemoryDesc, ctrSwapDesc,
		ctrStartDesc, podCPUDesc, podMemoryDesc, podSwapDesc, scrapeErrorDesc, oldScrapeErrDesc} {
		ch <- d
	}
}

func (c resourceCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	s, err := c.summary(ctx, true)
	failed := 0.0
	if err != nil {
		failed = 1
		klog.ErrorS(err, "Measuring the node for /metrics/resource failed")
	}
	ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, failed)
	ch <- prometheus.MustNewConstMetric(oldScrapeErrDesc, prometheus.GaugeValue, failed)
	if err != nil {
		return
	}
	cpu(ch, nodeCPUDesc, s.Node.CPU)
	memory(ch, nodeMemoryDesc, s.Node.Memory)
	swap(ch, nodeSwapDesc, s.Node.Swap)
	for _, p := range s.Pods {
		for _, ctr := range p.Containers {
			labels := []string{ctr.Name, p.PodRef.Name, p.PodRef.Namespace}
			if ctr.StartTime.Unix() > 0 {
				ch <- prometheus.MustNewConstMetric(ctrStartDesc, prometheus.GaugeValue, float64(ctr.StartTime.UnixNano())/1e9, labels...)
			}
			cpu(ch, ctrCPUDesc, ctr.CPU, labels...)
			memory(ch, ctrMemoryDesc, ctr.Memory, labels...)
			swap(ch, ctrSwapDesc, ctr.Swap, labels...)
		}
		cpu(ch, podCPUDesc, p.CPU, p.PodRef.Name, p.PodRef.Namespace)
		memory(ch, podMemoryDesc, p.Memory, p.PodRef.Name, p.PodRef.Namespace)
		swap(ch, podSwapDesc, p.Swap, p.PodRef.Name, p.PodRef.Namespace)
	}
}

func cpu(ch chan<- prometheus.Metric, d *prometheus.Desc, s *statsapi.CPUStats, labels ...string) {
	if s != nil && s.UsageCoreNanoSeconds != nil {
		ch <- prometheus.NewMetricWithTimestamp(s.Time.Time,
			prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(*s.UsageCoreNanoSeconds)/1e9, labels...))
	}
}

func memory(ch chan<- prometheus.Metric, d *prometheus.Desc, s *statsapi.MemoryStats, labels ...string) {
	if s != nil && s.WorkingSetBytes != nil {
		ch <- prometheus.NewMetricWithTimestamp(s.Time.Time,
			prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(*s.WorkingSetBytes), labels...))
	}
}

func swap(ch chan<- prometheus.Metric, d *prometheus.Desc, s *statsapi.SwapStats, labels ...string) {
	if s != nil && s.SwapUsageBytes != nil {
		ch <- prometheus.NewMetricWithTimestamp(s.Time.Time,
			prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(*s.SwapUsageBytes), labels...))
	}
}

// Probes counts probe runs and their durations for /metrics/probes,
// under the kubelet's names and labels.
type Probes struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	registry *prometheus.Registry
}

// NewProbes makes the probe metrics.
func NewProbes() *Probes {
	p := &Probes{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "prober", Name: "probe_total", Help: "Cumulative number of a liveness, readiness or startup probe for a container by result.",
		}, []string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "prober", Name: "probe_duration_seconds", Help: "Duration in seconds for a probe response.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{"probe_type", "container", "pod", "namespace"}),
		registry: prometheus.NewRegistry(),
	}
	p.registry.MustRegister(p.total, p.duration)
	return p
}

// Observe counts one probe run.
func (p *Probes) Observe(o prober.Observation) {
	result := "failed"
	if o.OK {
		result = "successful"
	}
	typ := o.Type.String()
	p.total.WithLabelValues(typ, result, o.Container, o.Pod.Name, o.Pod.Namespace, string(o.Pod.UID)).Inc()
	p.duration.WithLabelValues(typ, o.Container, o.Pod.Name, o.Pod.Namespace).Observe(o.Took.Seconds())
}

// Forget drops a pod's series once its probes stopped, so they do not
// pile up.
func (p *Probes) Forget(pod *v1.Pod) {
	p.total.DeletePartialMatch(prometheus.Labels{"pod_uid": string(pod.UID)})
	p.duration.DeletePartialMatch(prometheus.Labels{"pod": pod.Name, "namespace": pod.Namespace})
}

// Handler serves /metrics/probes.
func (p *Probes) Handler() http.Handler {
	return promhttp.HandlerFor(p.registry, promhttp.HandlerOpts{})
}
