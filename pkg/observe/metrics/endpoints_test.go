package metrics

import (
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/node/stats"
	"github.com/nodelet/nodelet/pkg/pods/prober"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

func u64(v uint64) *uint64 { return &v }

// testSummary is a node with one pod of one container, measured at at.
func testSummary(at time.Time) *statsapi.Summary {
	t := metav1.NewTime(at)
	cpu := func(ns uint64) *statsapi.CPUStats { return &statsapi.CPUStats{Time: t, UsageCoreNanoSeconds: u64(ns)} }
	mem := func(b uint64) *statsapi.MemoryStats {
		return &statsapi.MemoryStats{Time: t, WorkingSetBytes: u64(b), UsageBytes: u64(b + 10), RSSBytes: u64(b / 2)}
	}
	return &statsapi.Summary{
		Node: statsapi.NodeStats{CPU: cpu(5_500_000_000), Memory: mem(1 << 30)},
		Pods: []statsapi.PodStats{{
			PodRef: statsapi.PodReference{Name: "web", Namespace: "shop", UID: "u1"}, CPU: cpu(2_000_000_000), Memory: mem(3 << 20),
			Network: &statsapi.NetworkStats{Time: t, Interfaces: []statsapi.InterfaceStats{{Name: "eth0", RxBytes: u64(100), TxBytes: u64(200)}}},
			Containers: []statsapi.ContainerStats{{
				Name: "nginx", StartTime: metav1.NewTime(at.Add(-time.Minute)), CPU: cpu(1_500_000_000), Memory: mem(2 << 20),
				Rootfs: &statsapi.FsStats{Time: t, UsedBytes: u64(4096)},
			}},
		}},
	}
}

func scrapeText(t *testing.T, h http.Handler) string {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", w.Code, w.Body)
	}
	body, _ := io.ReadAll(w.Body)
	return string(body)
}

func wantLines(t *testing.T, body string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(body, l+"\n") {
			t.Errorf("missing %q in:\n%s", l, body)
		}
	}
}

// TestResourceMetrics: /metrics/resource has the kubelet's series, in
// core-seconds and bytes, each with the time it was measured at (which
// metrics-server requires), and what it asks for (CPU and memory only).
func TestResourceMetrics(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	ms := "1700000000123"
	var asked []bool
	body := scrapeText(t, ResourceHandler(func(_ context.Context, only bool) (*statsapi.Summary, error) {
		asked = append(asked, only)
		return testSummary(at), nil
	}))
	wantLines(t, body,
		"node_cpu_usage_seconds_total 5.5 "+ms,
		"node_memory_working_set_bytes 1.073741824e+09 "+ms,
		`container_cpu_usage_seconds_total{container="nginx",namespace="shop",pod="web"} 1.5 `+ms,
		`container_memory_working_set_bytes{container="nginx",namespace="shop",pod="web"} 2.097152e+06 `+ms,
		`container_start_time_seconds{container="nginx",namespace="shop",pod="web"} 1.6999999401230001e+09`,
		`pod_cpu_usage_seconds_total{namespace="shop",pod="web"} 2 `+ms,
		`pod_memory_working_set_bytes{namespace="shop",pod="web"} 3.145728e+06 `+ms,
		"resource_scrape_error 0",
	)
	if len(asked) != 1 || !asked[0] {
		t.Fatalf("summary asked with onlyCPUAndMemory %v", asked)
	}
	body = scrapeText(t, ResourceHandler(func(context.Context, bool) (*statsapi.Summary, error) { return nil, errors.New("runtime down") }))
	wantLines(t, body, "resource_scrape_error 1")
	if strings.Contains(body, "node_cpu_usage_seconds_total ") {
		t.Fatal("a failed measurement still reported usage")
	}
}

// TestCadvisorMetrics: the container series carry cAdvisor's labels
// with the runtime's container ID and image; the pod's network series
// are under container "POD".
func TestCadvisorMetrics(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_000)
	pods := func(context.Context) ([]*container.Pod, error) {
		return []*container.Pod{{Name: "web", Namespace: "shop", Containers: []*container.Container{
			{ID: container.ContainerID{Type: "containerd", ID: "old"}, Name: "nginx", Image: "nginx:1", CreatedAt: at.Add(-time.Hour)},
			{ID: container.ContainerID{Type: "containerd", ID: "abc"}, Name: "nginx", Image: "nginx:2", CreatedAt: at},
		}}}, nil
	}
	details := &fakeDetails{byID: map[string]*stats.Detail{"abc": {
		UserNanos: 2e9, SystemNanos: 5e8, Processes: 3, Threads: 4, FileDescriptors: 9, Sockets: 1, NoFileSoft: 1048576,
		CPUPeriod: 100000, CPUShares: 2, MemoryLimit: 79998976,
		Disks: []stats.DiskIO{{Device: "/dev/vda", Major: 254, Minor: 0, Bytes: map[string]uint64{"Read": 8192, "Write": 4096}, Ops: map[string]uint64{"Read": 2, "Write": 1}}},
	}}}
	body := scrapeText(t, CadvisorHandler(func(context.Context, bool) (*statsapi.Summary, error) { return testSummary(at), nil },
		RuntimeIdentities(pods), details, Machine{CPUs: 2, MemoryBytes: 8 << 30}))
	labels := `id="abc",image="nginx:2",name="abc",namespace="shop",pod="web"`
	// What cAdvisor reads from the cgroup and the processes (upstream's
	// node e2e "ContainerMetrics should report container metrics").
	wantLines(t, body,
		`container_cpu_user_seconds_total{container="nginx",`+labels+`} 2`,
		`container_cpu_system_seconds_total{container="nginx",`+labels+`} 0.5`,
		`container_processes{container="nginx",`+labels+`} 3`,
		`container_threads{container="nginx",`+labels+`} 4`,
		`container_file_descriptors{container="nginx",`+labels+`} 9`,
		`container_sockets{container="nginx",`+labels+`} 1`,
		`container_spec_cpu_shares{container="nginx",`+labels+`} 2`,
		`container_spec_cpu_period{container="nginx",`+labels+`} 100000`,
		`container_spec_memory_limit_bytes{container="nginx",`+labels+`} 7.9998976e+07`,
		`container_spec_memory_reservation_limit_bytes{container="nginx",`+labels+`} 0`,
		`container_memory_failcnt{container="nginx",`+labels+`} 0`,
		`container_oom_events_total{container="nginx",`+labels+`} 0`,
		`container_ulimits_soft{container="nginx",`+labels+`,ulimit="max_open_files"} 1.048576e+06`,
		`container_blkio_device_usage_total{container="nginx",device="/dev/vda",id="abc",image="nginx:2",major="254",minor="0",name="abc",namespace="shop",operation="Read",pod="web"} 8192`,
		`container_fs_reads_bytes_total{container="nginx",device="/dev/vda",`+labels+`} 8192`,
		`container_fs_writes_total{container="nginx",device="/dev/vda",`+labels+`} 1`,
	)
	if !maps.Equal(details.live, map[string]bool{"abc": true}) {
		t.Errorf("details kept for %v, want the running container's only", details.live)
	}
	wantLines(t, body,
		"machine_cpu_cores 2",
		`container_cpu_usage_seconds_total{container="nginx",cpu="total",`+labels+`} 1.5 1700000000000`,
		`container_memory_working_set_bytes{container="nginx",`+labels+`} 2.097152e+06 1700000000000`,
		`container_memory_rss{container="nginx",`+labels+`} 1.048576e+06 1700000000000`,
		`container_fs_usage_bytes{container="nginx",device="",`+labels+`} 4096 1700000000000`,
		`container_memory_working_set_bytes{container="",id="",image="",name="",namespace="shop",pod="web"} 3.145728e+06 1700000000000`,
		`container_network_receive_bytes_total{container="POD",id="",image="",interface="eth0",name="",namespace="shop",pod="web"} 100 1700000000000`,
	)
}

// TestProbeMetrics: each run counts under its result, and a pod whose
// probes stopped leaves no series behind.
func TestProbeMetrics(t *testing.T) {
	p := NewProbes()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "u1"}}
	other := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop", UID: "u2"}}
	for _, ok := range []bool{true, true, false} {
		p.Observe(prober.Observation{Pod: pod, Container: "nginx", Type: prober.Readiness, OK: ok, Took: 3 * time.Millisecond})
	}
	p.Observe(prober.Observation{Pod: other, Container: "pg", Type: prober.Liveness, OK: true})
	body := scrapeText(t, p.Handler())
	wantLines(t, body,
		`prober_probe_total{container="nginx",namespace="shop",pod="web",pod_uid="u1",probe_type="Readiness",result="successful"} 2`,
		`prober_probe_total{container="nginx",namespace="shop",pod="web",pod_uid="u1",probe_type="Readiness",result="failed"} 1`,
		`prober_probe_duration_seconds_count{container="nginx",namespace="shop",pod="web",probe_type="Readiness"} 3`,
	)
	p.Forget(pod)
	body = scrapeText(t, p.Handler())
	if strings.Contains(body, `pod="web"`) || !strings.Contains(body, `pod="db"`) {
		t.Fatalf("after Forget:\n%s", body)
	}
}

// fakeDetails stands in for the cgroups and /proc of containers.
type fakeDetails struct {
	byID map[string]*stats.Detail
	live map[string]bool
}

func (f *fakeDetails) Read(_ context.Context, id string) (*stats.Detail, error) {
	if d, ok := f.byID[id]; ok {
		return d, nil
	}
	return nil, errors.New("no such container")
}

func (f *fakeDetails) Forget(live map[string]bool) { f.live = live }
