//go:build integration

// Package scale models nodelet's own cost beyond this machine: nodelet
// runs against the in-process fake CRI, a runtime that costs nothing, so
// whatever CPU and memory it uses is its own. For each node size it
// starts a fresh nodelet, writes that many static pods at once, and
// measures CPU per pod start and stop, the steady cost (relists,
// housekeeping, resyncs) with every pod running, memory per pod and the
// sync loop's handling times, then prints how each grows with the pods.
// make bench-scale runs it; it is not a timed test.
package scale

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/fakecri"
	"github.com/nodelet/nodelet/internal/testbed"
	"github.com/nodelet/nodelet/pkg/resources/cm"
)

var (
	sizes        = flag.String("scale.pods", "110,500,1000,5000", "node sizes, in pods")
	window       = flag.Duration("scale.window", 30*time.Second, "how long the steady cost is measured with every pod running")
	settle       = flag.Duration("scale.settle", 15*time.Second, "how long after every pod runs the steady window begins")
	profile      = flag.String("scale.profile", "", "file for a CPU profile of nodelet during the largest size's steady window")
	startProfile = flag.String("scale.startprofile", "", "file for a CPU profile of nodelet over the first 10 s of the largest size's start")
	stopProfile  = flag.String("scale.stopprofile", "", "file for a CPU profile of nodelet over the first 30 s of the largest size's stop")
	verbosity    = flag.Int("scale.v", 2, "nodelet's log verbosity")
	maxSize      int
)

const image = "nodelet.test/scale:1"

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if cg, err := cm.New(cm.Options{CgroupRoot: testbed.CgroupRoot()}); err == nil {
		_ = cg.RemoveRoot() // nothing to remove when no benchmark ran
	}
	os.Exit(code)
}

// BenchmarkScale prints the table; b.N is ignored beyond the first.
func BenchmarkScale(b *testing.B) {
	var rows []row
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("-scale.pods: %q", f)
		}
		maxSize = max(maxSize, n)
	}
	for _, f := range strings.Split(*sizes, ",") {
		n, _ := strconv.Atoi(strings.TrimSpace(f))
		rows = append(rows, measure(b, n))
	}
	b.StopTimer()
	fmt.Print(table(rows))
}

// row is one node size's figures.
type row struct {
	pods int
	// idle is before any pod; full with every pod running.
	idle, full     testbed.Memory
	idleCores      float64
	heapIdle, heap float64
	// start and stop are from writing (removing) the manifests to every
	// container running (stopped): wall time and nodelet's CPU.
	startWall, startCPU time.Duration
	stopWall, stopCPU   time.Duration
	// steady is nodelet's CPU, in cores, with every pod running.
	steady float64
	// relist, housekeeping and loop are mean wall times per pass over the
	// steady window, and loopMax the slowest event the loop handled.
	relist, housekeeping, loop time.Duration
	syncs                      float64
	// startCalls are the CRI calls per pod start, by method.
	startCalls string
}

func measure(b *testing.B, pods int) row {
	rt := fakecri.New(clock.RealClock{}, "registry.k8s.io/pause:3.10", image)
	// A container event stream, as containerd 2.x has (1.6 has containerd's
	// own task events, which nodelet follows instead): nodelet then does
	// not poll for exits. Nothing exits here, so the stream stays quiet.
	rt.EnableEvents()
	dir := b.TempDir()
	sock := filepath.Join(dir, "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	srv := rt.Serve(l)
	// Cleanups run last first: these after the test bed's.
	b.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	// The test bed's clean-up removes what is left through CRI.
	cd := &testbed.Containerd{Dir: dir, Address: sock, Endpoint: "unix://" + sock, Runtime: runtimeapi.NewRuntimeServiceClient(conn)}
	n := testbed.StartNodelet(b, cd, testbed.NodeletOptions{
		// As a production node logs; the fault suite's -v 4 would cost
		// more than some of what is measured here.
		Args:    []string{"-v", strconv.Itoa(*verbosity)},
		Release: true,
		ExtraConfig: fmt.Sprintf(`maxPods: %d
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
`, pods+10),
	})
	defer n.Stop()
	pid := n.PID()
	r := row{pods: pods}
	// Idle: settled after start-up.
	time.Sleep(5 * time.Second) // let start-up's one-off work end before measuring idle
	r.idleCores = must[float64](b)(testbed.CPUCores(pid, 10*time.Second))
	r.idle = must[testbed.Memory](b)(testbed.ProcessMemory(pid))
	r.heapIdle = gauge(scrape(b, n), "go_memstats_heap_inuse_bytes")

	running := runtimeapi.ContainerState_CONTAINER_RUNNING
	count := func() int { return len(rt.ContainerIDs("c", &running)) }
	rt.ResetCalls()
	if *startProfile != "" && pods == maxSize {
		go fetchProfile(b, n, *startProfile, 10*time.Second)
	}
	cpu0 := must[time.Duration](b)(testbed.ProcessCPU(pid))
	t0 := time.Now()
	for i := 0; i < pods; i++ {
		n.WriteManifest(fmt.Sprintf("p%05d.yaml", i), manifest(i))
	}
	testbed.Eventually(b, 20*time.Minute, func() (bool, string) {
		c := count()
		return c == pods, fmt.Sprintf("%d of %d containers running", c, pods)
	})
	r.startWall, r.startCPU = time.Since(t0), must[time.Duration](b)(testbed.ProcessCPU(pid))-cpu0
	r.startCalls = callsPerPod(rt.Calls(), pods)
	rt.ResetCalls()
	// Every pod's status reported too, before the steady window.
	testbed.Eventually(b, 5*time.Minute, func() (bool, string) {
		ps, err := n.Pods()
		running := 0
		for _, p := range ps {
			if p.Status.Phase == "Running" {
				running++
			}
		}
		return err == nil && running == pods, fmt.Sprintf("%d of %d pods Running in /pods (%v)", running, pods, err)
	})

	time.Sleep(*settle) // the start's last syncs and relists end before the steady window
	before := scrape(b, n)
	if *profile != "" && pods == maxSize {
		go fetchProfile(b, n, *profile, *window)
	}
	r.steady = must[float64](b)(testbed.CPUCores(pid, *window))
	after := scrape(b, n)
	r.full = must[testbed.Memory](b)(testbed.ProcessMemory(pid))
	r.heap = gauge(after, "go_memstats_heap_inuse_bytes")
	r.relist = meanSince(before, after, "kubelet_pleg_relist_duration_seconds", "")
	r.housekeeping = meanSince(before, after, "nodelet_sync_loop_iteration_duration_seconds", "housekeeping")
	r.loop = meanSince(before, after, "nodelet_sync_loop_iteration_duration_seconds", "")
	r.syncs = countSince(before, after, "kubelet_pod_worker_duration_seconds") / window.Seconds()

	if *stopProfile != "" && pods == maxSize {
		go fetchProfile(b, n, *stopProfile, 30*time.Second)
	}
	cpu0, t0 = must[time.Duration](b)(testbed.ProcessCPU(pid)), time.Now()
	for i := 0; i < pods; i++ {
		n.RemoveManifest(fmt.Sprintf("p%05d.yaml", i))
	}
	testbed.Eventually(b, 20*time.Minute, func() (bool, string) {
		c := count()
		return c == 0, fmt.Sprintf("%d containers still running", c)
	})
	r.stopWall, r.stopCPU = time.Since(t0), must[time.Duration](b)(testbed.ProcessCPU(pid))-cpu0
	fmt.Printf("%d pods: %s\n%d pods: CRI calls per pod start: %s\n", pods, r, pods, r.startCalls)
	return r
}

// callsPerPod counts calls by method, per pod.
func callsPerPod(calls []string, pods int) string {
	by := map[string]int{}
	for _, c := range calls {
		by[strings.SplitN(c, " ", 2)[0]]++
	}
	var parts []string
	for m, n := range by {
		parts = append(parts, fmt.Sprintf("%s %.1f", m, float64(n)/float64(pods)))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func manifest(i int) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: p%05d, namespace: scale}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: c, image: %s, imagePullPolicy: Never}
`, i, image)
}

func (r row) String() string {
	return fmt.Sprintf("start %s wall, %s CPU (%s per pod); stop %s wall, %s CPU (%s per pod); steady %.4f cores (%.1f µs/s per pod), %.1f syncs/s; relist %s, housekeeping %s, loop event %s mean; RSS idle %.1f MiB (anon %.1f), full %.1f MiB (anon %.1f, %.1f KiB per pod); heap %.1f → %.1f MiB",
		r.startWall.Round(time.Millisecond), r.startCPU.Round(time.Millisecond), perPod(r.startCPU, r.pods),
		r.stopWall.Round(time.Millisecond), r.stopCPU.Round(time.Millisecond), perPod(r.stopCPU, r.pods),
		r.steady, r.steady*1e6/float64(r.pods), r.syncs, r.relist, r.housekeeping, r.loop,
		mib(r.idle.RSS), mib(r.idle.Anon), mib(r.full.RSS), mib(r.full.Anon), float64(r.full.Anon-r.idle.Anon)/1024/float64(r.pods),
		r.heapIdle/(1<<20), r.heap/(1<<20))
}

// table prints the figures by node size, and how each grows: the
// exponent k of pods^k between the smallest and the largest size (1 is
// linear, below 1 better).
func table(rows []row) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%-28s", "pods")
	for _, r := range rows {
		fmt.Fprintf(&sb, "%12d", r.pods)
	}
	fmt.Fprintf(&sb, "%12s\n", "growth")
	line := func(name string, unit string, f func(row) float64) {
		fmt.Fprintf(&sb, "%-28s", name+" ("+unit+")")
		for _, r := range rows {
			fmt.Fprintf(&sb, "%12.3f", f(r))
		}
		first, last := rows[0], rows[len(rows)-1]
		if len(rows) > 1 && f(first) > 0 && f(last) > 0 {
			k := math.Log(f(last)/f(first)) / math.Log(float64(last.pods)/float64(first.pods))
			fmt.Fprintf(&sb, "%12s", fmt.Sprintf("^%.2f", k))
		}
		sb.WriteString("\n")
	}
	line("start CPU", "s", func(r row) float64 { return r.startCPU.Seconds() })
	line("start CPU per pod", "ms", func(r row) float64 { return r.startCPU.Seconds() * 1e3 / float64(r.pods) })
	line("start wall", "s", func(r row) float64 { return r.startWall.Seconds() })
	line("stop CPU per pod", "ms", func(r row) float64 { return r.stopCPU.Seconds() * 1e3 / float64(r.pods) })
	line("stop wall", "s", func(r row) float64 { return r.stopWall.Seconds() })
	line("steady CPU", "cores", func(r row) float64 { return r.steady })
	line("pod syncs", "per s", func(r row) float64 { return r.syncs })
	line("relist", "ms", func(r row) float64 { return r.relist.Seconds() * 1e3 })
	line("housekeeping", "ms", func(r row) float64 { return r.housekeeping.Seconds() * 1e3 })
	line("sync loop event", "ms", func(r row) float64 { return r.loop.Seconds() * 1e3 })
	line("RSS anon, all running", "MiB", func(r row) float64 { return mib(r.full.Anon) })
	line("RSS anon per pod", "KiB", func(r row) float64 { return float64(r.full.Anon-r.idle.Anon) / 1024 / float64(r.pods) })
	line("Go heap in use", "MiB", func(r row) float64 { return r.heap / (1 << 20) })
	line("idle CPU", "cores", func(r row) float64 { return r.idleCores })
	return sb.String()
}

func perPod(d time.Duration, n int) string {
	return fmt.Sprintf("%.2fms", d.Seconds()*1e3/float64(n))
}

func mib(v int64) float64 { return float64(v) / (1 << 20) }

// fetchProfile saves a CPU profile of nodelet over the next d.
func fetchProfile(b testing.TB, n *testbed.Nodelet, file string, d time.Duration) {
	c := &http.Client{Timeout: d + time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Get(fmt.Sprintf("https://127.0.0.1:%d/debug/pprof/profile?seconds=%d", n.APIPort, int(d.Seconds())))
	if err != nil {
		b.Error(err)
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil {
		err = os.WriteFile(file, data, 0o644)
	}
	if err != nil {
		b.Error(err)
	}
}

// must fails the benchmark on an error and returns the value.
func must[T any](b testing.TB) func(T, error) T {
	return func(v T, err error) T {
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
}

// scrape reads nodelet's metrics from the kubelet API.
func scrape(b testing.TB, n *testbed.Nodelet) map[string]*dto.MetricFamily {
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Get(fmt.Sprintf("https://127.0.0.1:%d/metrics", n.APIPort))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	return families
}

func gauge(fs map[string]*dto.MetricFamily, name string) float64 {
	if f, ok := fs[name]; ok && len(f.Metric) > 0 {
		return f.Metric[0].GetGauge().GetValue()
	}
	return 0
}

// histogram sums a histogram's count and sum over the series whose
// labels include value (any, when "").
func histogram(fs map[string]*dto.MetricFamily, name, value string) (count, sum float64) {
	f, ok := fs[name]
	if !ok {
		return 0, 0
	}
	for _, m := range f.Metric {
		match := value == ""
		for _, l := range m.Label {
			match = match || l.GetValue() == value
		}
		if match {
			count += float64(m.GetHistogram().GetSampleCount())
			sum += m.GetHistogram().GetSampleSum()
		}
	}
	return count, sum
}

// meanSince is the mean observation between two scrapes.
func meanSince(before, after map[string]*dto.MetricFamily, name, value string) time.Duration {
	c0, s0 := histogram(before, name, value)
	c1, s1 := histogram(after, name, value)
	if c1 == c0 {
		return 0
	}
	return time.Duration((s1 - s0) / (c1 - c0) * float64(time.Second))
}

func countSince(before, after map[string]*dto.MetricFamily, name string) float64 {
	c0, _ := histogram(before, name, "")
	c1, _ := histogram(after, name, "")
	return c1 - c0
}
