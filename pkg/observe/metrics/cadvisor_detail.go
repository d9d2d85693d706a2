package metrics

import (
	"context"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/node/stats"
)

// ContainerDetails reads what cAdvisor reports of a running container
// beyond the CRI's stats (stats.Details).
type ContainerDetails interface {
	Read(ctx context.Context, id string) (*stats.Detail, error)
	Forget(live map[string]bool)
}

// detailMetric is one series of a container's Detail without labels of
// its own, under cAdvisor's name.
type detailMetric struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(*stats.Detail) float64
}

func detail(name, help string, kind prometheus.ValueType, value func(*stats.Detail) float64) detailMetric {
	return detailMetric{prometheus.NewDesc(name, help, cadvisorLabels, nil), kind, value}
}

var (
	counter, gauge = prometheus.CounterValue, prometheus.GaugeValue
	detailMetrics  = []detailMetric{
		detail("container_cpu_user_seconds_total", "Cumulative user cpu time consumed in seconds.", counter, func(d *stats.Detail) float64 { return float64(d.UserNanos) / 1e9 }),
		detail("container_cpu_system_seconds_total", "Cumulative system cpu time consumed in seconds.", counter, func(d *stats.Detail) float64 { return float64(d.SystemNanos) / 1e9 }),
		detail("container_memory_cache", "Number of bytes of page cache memory.", gauge, func(d *stats.Detail) float64 { return float64(d.Cache) }),
		detail("container_memory_mapped_file", "Size of memory mapped files in bytes.", gauge, func(d *stats.Detail) float64 { return float64(d.MappedFile) }),
		detail("container_memory_max_usage_bytes", "Maximum memory usage recorded in bytes", gauge, func(d *stats.Detail) float64 { return float64(d.MaxUsage) }),
		detail("container_memory_failcnt", "Number of memory usage hits limits", counter, func(d *stats.Detail) float64 { return float64(d.Failcnt) }),
		detail("container_memory_swap", "Container swap usage in bytes.", gauge, func(d *stats.Detail) float64 { return float64(d.Swap) }),
		detail("container_memory_events_high_total", "Cumulative count of memory.high throttle events for the container", counter, func(d *stats.Detail) float64 { return float64(d.EventsHigh) }),
		detail("container_memory_events_max_total", "Cumulative count of memory.max limit hit events for the container", counter, func(d *stats.Detail) float64 { return float64(d.EventsMax) }),
		detail("container_oom_events_total", "Count of out of memory events observed for the container", counter, func(d *stats.Detail) float64 { return float64(d.OOMKills) }),
		detail("container_processes", "Number of processes running inside the container.", gauge, func(d *stats.Detail) float64 { return float64(d.Processes) }),
		detail("container_threads", "Number of threads running inside the container", gauge, func(d *stats.Detail) float64 { return float64(d.Threads) }),
		detail("container_threads_max", "Maximum number of threads allowed inside the container, infinity if value is zero", gauge, func(d *stats.Detail) float64 { return float64(d.ThreadsMax) }),
		detail("container_file_descriptors", "Number of open file descriptors for the container.", gauge, func(d *stats.Detail) float64 { return float64(d.FileDescriptors) }),
		detail("container_sockets", "Number of open sockets for the container.", gauge, func(d *stats.Detail) float64 { return float64(d.Sockets) }),
		detail("container_spec_cpu_period", "CPU period of the container.", gauge, func(d *stats.Detail) float64 { return float64(d.CPUPeriod) }),
		detail("container_spec_cpu_shares", "CPU share of the container.", gauge, func(d *stats.Detail) float64 { return float64(d.CPUShares) }),
		detail("container_spec_memory_limit_bytes", "Memory limit for the container.", gauge, func(d *stats.Detail) float64 { return float64(d.MemoryLimit) }),
		detail("container_spec_memory_reservation_limit_bytes", "Memory reservation limit for the container.", gauge, func(d *stats.Detail) float64 { return float64(d.MemoryReservation) }),
		detail("container_spec_memory_swap_limit_bytes", "Memory swap limit for the container.", gauge, func(d *stats.Detail) float64 { return float64(d.SwapLimit) }),
	}
	withLabels = func(extra ...string) []string { return append(append([]string{}, cadvisorLabels...), extra...) }
	// Block I/O: bytes by operation; per device, bytes and operations
	// read and written.
	cadvisorBlkio = prometheus.NewDesc("container_blkio_device_usage_total", "Blkio Device bytes usage", withLabels("device", "major", "minor", "operation"), nil)
	cadvisorFsIO  = []fsIO{
		{prometheus.NewDesc("container_fs_reads_bytes_total", "Cumulative count of bytes read", withLabels("device"), nil), true, "Read"},
		{prometheus.NewDesc("container_fs_reads_total", "Cumulative count of reads completed", withLabels("device"), nil), false, "Read"},
		{prometheus.NewDesc("container_fs_writes_bytes_total", "Cumulative count of bytes written", withLabels("device"), nil), true, "Write"},
		{prometheus.NewDesc("container_fs_writes_total", "Cumulative count of writes completed", withLabels("device"), nil), false, "Write"},
	}
	cadvisorUlimit = prometheus.NewDesc("container_ulimits_soft", "Soft ulimit values for the container root process. Unlimited if -1, except priority and nice", withLabels("ulimit"), nil)
)

type fsIO struct {
	desc  *prometheus.Desc
	bytes bool
	op    string
}

func describeDetails(ch chan<- *prometheus.Desc) {
	for _, m := range detailMetrics {
		ch <- m.desc
	}
	for _, m := range cadvisorFsIO {
		ch <- m.desc
	}
	ch <- cadvisorBlkio
	ch <- cadvisorUlimit
}

// details emits a container's Detail; a container that cannot be read
// (it just stopped, say) has only its CRI series.
func (c cadvisorCollector) details(ctx context.Context, ch chan<- prometheus.Metric, labels []string, id string) {
	if c.detail == nil || id == "" {
		return
	}
	d, err := c.detail.Read(ctx, id)
	if err != nil {
		klog.V(4).InfoS("Cannot read a container's cgroup for /metrics/cadvisor", "containerID", id, "err", err)
		return
	}
	for _, m := range detailMetrics {
		ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(d), labels...)
	}
	for _, disk := range d.Disks {
		major, minor := strconv.FormatUint(disk.Major, 10), strconv.FormatUint(disk.Minor, 10)
		for op, v := range disk.Bytes {
			ch <- prometheus.MustNewConstMetric(cadvisorBlkio, counter, float64(v), append(labels, disk.Device, major, minor, op)...)
		}
		for _, m := range cadvisorFsIO {
			values := disk.Ops
			if m.bytes {
				values = disk.Bytes
			}
			if v, ok := values[m.op]; ok {
				ch <- prometheus.MustNewConstMetric(m.desc, counter, float64(v), append(labels, disk.Device)...)
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(cadvisorUlimit, gauge, float64(d.NoFileSoft), append(labels, "max_open_files")...)
}
