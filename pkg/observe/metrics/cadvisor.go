package metrics

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// Machine is what /metrics/cadvisor reports of the machine itself.
type Machine struct {
	CPUs        int
	MemoryBytes int64
}

// The container metrics of /metrics/cadvisor that dashboards and the
// Prometheus operator's kubelet rules read most, under cAdvisor's names
// and labels (container, id, image, name, namespace, pod), measured from
// CRI stats: nodelet has no cAdvisor. id is the container's ID in the
// runtime (cAdvisor's is its cgroup), name the same; a pod's own series
// have an empty container and image, its network series container "POD".
var (
	cadvisorLabels  = []string{"container", "id", "image", "name", "namespace", "pod"}
	cpuLabels       = append(append([]string{}, cadvisorLabels...), "cpu")
	networkLabels   = append(append([]string{}, cadvisorLabels...), "interface")
	cadvisorCPU     = prometheus.NewDesc("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", cpuLabels, nil)
	cadvisorWorking = prometheus.NewDesc("container_memory_working_set_bytes", "Current working set in bytes.", cadvisorLabels, nil)
	cadvisorUsage   = prometheus.NewDesc("container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed", cadvisorLabels, nil)
	cadvisorRSS     = prometheus.NewDesc("container_memory_rss", "Size of RSS in bytes.", cadvisorLabels, nil)
	cadvisorFaults  = prometheus.NewDesc("container_memory_failures_total", "Cumulative count of memory allocation failures.", append(append([]string{}, cadvisorLabels...), "failure_type", "scope"), nil)
	cadvisorFs      = prometheus.NewDesc("container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", append(append([]string{}, cadvisorLabels...), "device"), nil)
	cadvisorStart   = prometheus.NewDesc("container_start_time_seconds", "Start time of the container since unix epoch in seconds.", cadvisorLabels, nil)
	cadvisorSeen    = prometheus.NewDesc("container_last_seen", "Last time a container was seen by the exporter", cadvisorLabels, nil)
	cadvisorRx      = prometheus.NewDesc("container_network_receive_bytes_total", "Cumulative count of bytes received", networkLabels, nil)
	cadvisorTx      = prometheus.NewDesc("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted", networkLabels, nil)
	cadvisorRxErr   = prometheus.NewDesc("container_network_receive_errors_total", "Cumulative count of errors encountered while receiving", networkLabels, nil)
	cadvisorTxErr   = prometheus.NewDesc("container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting", networkLabels, nil)
	machineCPUs     = prometheus.NewDesc("machine_cpu_cores", "Number of logical CPU cores.", nil, nil)
	machineMemory   = prometheus.NewDesc("machine_memory_bytes", "Amount of memory installed on the machine.", nil, nil)
)

// ContainerIdentity names a running container for cAdvisor's labels.
type ContainerIdentity struct{ ID, Image string }

// Identities looks up the runtime's containers by namespace, pod and
// container name.
type Identities func(ctx context.Context) (map[[3]string]ContainerIdentity, error)

// RuntimeIdentities looks the running containers up in the runtime's
// pods: the newest container of each name.
func RuntimeIdentities(pods RuntimePods) Identities {
	return func(ctx context.Context) (map[[3]string]ContainerIdentity, error) {
		list, err := pods(ctx)
		if err != nil {
			return nil, err
		}
		out := map[[3]string]ContainerIdentity{}
		newest := map[[3]string]time.Time{}
		for _, p := range list {
			for _, c := range p.Containers {
				k := [3]string{p.Namespace, p.Name, c.Name}
				if t, seen := newest[k]; !seen || c.CreatedAt.After(t) {
					newest[k], out[k] = c.CreatedAt, ContainerIdentity{ID: c.ID.ID, Image: c.Image}
				}
			}
		}
		return out, nil
	}
}

// CadvisorHandler serves /metrics/cadvisor; details, when not nil, adds
// what cAdvisor reads from each container's cgroup and processes.
func CadvisorHandler(summary Summarizer, ids Identities, details ContainerDetails, m Machine) http.Handler {
	return handlerFor(cadvisorCollector{summary: summary, ids: ids, detail: details, machine: m})
}

type cadvisorCollector struct {
	summary Summarizer
	ids     Identities
	detail  ContainerDetails
	machine Machine
}

func (cadvisorCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{cadvisorCPU, cadvisorWorking, cadvisorUsage, cadvisorRSS, cadvisorFaults, cadvisorFs, cadvisorStart,
		cadvisorSeen, cadvisorRx, cadvisorTx, cadvisorRxErr, cadvisorTxErr, machineCPUs, machineMemory} {
		ch <- d
	}
	describeDetails(ch)
}

func (c cadvisorCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(machineCPUs, prometheus.GaugeValue, float64(c.machine.CPUs))
	ch <- prometheus.MustNewConstMetric(machineMemory, prometheus.GaugeValue, float64(c.machine.MemoryBytes))
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	s, err := c.summary(ctx, false)
	if err != nil {
		klog.ErrorS(err, "Measuring the pods for /metrics/cadvisor failed")
		return
	}
	ids, err := c.ids(ctx)
	if err != nil {
		klog.ErrorS(err, "Listing the containers for /metrics/cadvisor failed")
		return
	}
	live := map[string]bool{}
	for _, p := range s.Pods {
		ns, pod := p.PodRef.Namespace, p.PodRef.Name
		for _, ctr := range p.Containers {
			id := ids[[3]string{ns, pod, ctr.Name}]
			labels := []string{ctr.Name, id.ID, id.Image, id.ID, ns, pod}
			c.container(ch, labels, &ctr)
			c.details(ctx, ch, labels, id.ID)
			live[id.ID] = true
		}
		c.usage(ch, []string{"", "", "", "", ns, pod}, p.CPU, p.Memory)
		if p.Network != nil {
			for _, iface := range p.Network.Interfaces {
				network(ch, []string{"POD", "", "", "", ns, pod, iface.Name}, p.Network.Time.Time, iface)
			}
		}
	}
	if c.detail != nil {
		c.detail.Forget(live)
	}
}

func (c cadvisorCollector) container(ch chan<- prometheus.Metric, labels []string, s *statsapi.ContainerStats) {
	c.usage(ch, labels, s.CPU, s.Memory)
	if s.Rootfs != nil && s.Rootfs.UsedBytes != nil {
		ch <- prometheus.NewMetricWithTimestamp(s.Rootfs.Time.Time, prometheus.MustNewConstMetric(cadvisorFs, prometheus.GaugeValue,
			float64(*s.Rootfs.UsedBytes), append(labels, "")...))
	}
	if s.StartTime.Unix() > 0 {
		ch <- prometheus.MustNewConstMetric(cadvisorStart, prometheus.GaugeValue, float64(s.StartTime.Unix()), labels...)
	}
	if s.CPU != nil {
		ch <- prometheus.MustNewConstMetric(cadvisorSeen, prometheus.GaugeValue, float64(s.CPU.Time.Unix()), labels...)
	}
}

func (c cadvisorCollector) usage(ch chan<- prometheus.Metric, labels []string, cs *statsapi.CPUStats, ms *statsapi.MemoryStats) {
	if cs != nil && cs.UsageCoreNanoSeconds != nil {
		ch <- prometheus.NewMetricWithTimestamp(cs.Time.Time, prometheus.MustNewConstMetric(cadvisorCPU, prometheus.CounterValue,
			float64(*cs.UsageCoreNanoSeconds)/1e9, append(labels, "total")...))
	}
	if ms == nil {
		return
	}
	for _, v := range []struct {
		d *prometheus.Desc
		b *uint64
	}{{cadvisorWorking, ms.WorkingSetBytes}, {cadvisorUsage, ms.UsageBytes}, {cadvisorRSS, ms.RSSBytes}} {
		if v.b != nil {
			ch <- prometheus.NewMetricWithTimestamp(ms.Time.Time, prometheus.MustNewConstMetric(v.d, prometheus.GaugeValue, float64(*v.b), labels...))
		}
	}
	for _, v := range []struct {
		typ string
		n   *uint64
	}{{"pgfault", ms.PageFaults}, {"pgmajfault", ms.MajorPageFaults}} {
		if v.n != nil {
			ch <- prometheus.NewMetricWithTimestamp(ms.Time.Time, prometheus.MustNewConstMetric(cadvisorFaults, prometheus.CounterValue,
				float64(*v.n), append(labels, v.typ, "container")...))
		}
	}
}

func network(ch chan<- prometheus.Metric, labels []string, at time.Time, iface statsapi.InterfaceStats) {
	for _, v := range []struct {
		d *prometheus.Desc
		n *uint64
	}{{cadvisorRx, iface.RxBytes}, {cadvisorTx, iface.TxBytes}, {cadvisorRxErr, iface.RxErrors}, {cadvisorTxErr, iface.TxErrors}} {
		if v.n != nil {
			ch <- prometheus.NewMetricWithTimestamp(at, prometheus.MustNewConstMetric(v.d, prometheus.CounterValue, float64(*v.n), labels...))
		}
	}
}
