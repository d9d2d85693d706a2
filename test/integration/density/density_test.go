//go:build integration

// Package density measures nodelet at density in cluster mode, against
// the real upstream control plane: bursts of pods created through the API
// as a client would, then deleted, each beside the raw CRI floor for the
// same count measured in the same run with the same parallelism.
//
//	make bench-density
//
// It holds no tests: without -test.bench nothing is set up and nothing
// runs.
package density

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nodelet/nodelet/internal/otlptest"
	"github.com/nodelet/nodelet/internal/testbed"
)

var (
	cd *testbed.Containerd
	cl *testbed.Cluster

	rounds   = flag.Int("density.rounds", 3, "rounds of bursts on one nodelet")
	counts   = flag.String("density.counts", "1,30,110", "burst sizes, in order, each round")
	window   = flag.Duration("density.window", 30*time.Second, "how long CPU use is measured, idle and at the largest burst")
	token    = flag.Bool("density.token", true, "pods mount a service account token, as a client's pods do by default")
	profile  = flag.String("density.cpuprofile", "", "write nodelet's CPU profile during the first round's largest create burst to this file")
	delProf  = flag.String("density.deleteprofile", "", "write nodelet's CPU profile during the first round's largest delete burst (20 s) to this file")
	idleProf = flag.String("density.idleprofile", "", "write nodelet's CPU profile over the idle window before the first round (the one \"idle before\" measures) to this file")
	heap     = flag.String("density.heapprofile", "", "write nodelet's heap profile with the largest burst running to this file")
	agent    = flag.String("density.agent", "nodelet", "the node agent measured: nodelet, or upstream (the upstream kubelet built by hack/cluster/build.sh, on the same node, runtime and configuration, logging at -v 1); nodelet's own readings (timelines, limits, its start-up trim) are left out for upstream")
	heapEnd  = flag.String("density.afterheapprofile", "", "write nodelet's heap profile idle after the last round (what the bursts left behind) to this file")
	heapIdle = flag.String("density.idleheapprofile", "", "write nodelet's heap profile idle before the first round (start-up over) to this file, to set beside -density.afterheapprofile (GODEBUG=memprofilerate=4096 in the benchmark's environment samples finely enough to compare)")
	replay   = flag.Bool("density.replay", true, "the floor replays the sandbox and container configuration nodelet sent the runtime for a warm-up pod; false: a minimal pod")
	parallel = flag.Int("density.parallel", 4, "the parallelism of the floor measured around each burst (the curve's, below, is the reference)")
	curveAt  = flag.String("density.parallels", "1,2,4,8,16,32", "parallelisms of the raw CRI floor's curve, measured once per burst size in the first round; every ratio is also printed against the curve's fastest all-started and lowest per-pod p50 (empty: no curve)")
	verbose  = flag.Int("density.v", 1, "nodelet's log verbosity (4 logs each change of the runtime call limits)")
	keepLog  = flag.Bool("density.keeplogs", false, "keep nodelet's and containerd's logs at the end (in /var/tmp/nodelet-test-logs), as a failed test's are")
	tracing  = flag.Bool("density.tracing", false, "nodelet traces every pod (samplingRatePerMillion 1000000) to an OTLP receiver in the benchmark")
)

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run())
	}
	testbed.Main(m, &cd, testbed.WithCluster(&cl, "nodelet-density-"))
}

// BenchmarkDensity runs the rounds on one nodelet, never restarted, so
// leaks and stalls show, and prints every figure with its ratio to the
// floor. It is not a timed test: b.N is ignored beyond the first.
func BenchmarkDensity(b *testing.B) {
	sizes, err := parseCounts(*counts)
	if err != nil {
		b.Fatal(err)
	}
	const nodeName = "density"
	kubeconfig, err := cl.NodeKubeconfig(nodeName)
	if err != nil {
		b.Fatal(err)
	}
	extra := fmt.Sprintf("authentication:\n  x509:\n    clientCAFile: %s\n", cl.CAFile())
	var receiver *otlptest.Receiver
	if *tracing {
		if receiver, err = otlptest.Start(); err != nil {
			b.Fatal(err)
		}
		defer receiver.Stop()
		extra += fmt.Sprintf("tracing:\n  endpoint: %s\n  samplingRatePerMillion: 1000000\n", receiver.Addr)
	}
	node := testbed.StartNodelet(b, cd, testbed.NodeletOptions{
		NodeName: nodeName, Kubeconfig: kubeconfig, CgroupRoot: testbed.CgroupRoot() + "/" + nodeName,
		ExtraConfig: extra, Address: "0.0.0.0", Args: []string{"-v", strconv.Itoa(*verbose)}, Release: true,
	})
	client := benchClient(b)
	ns := namespace(b, client)
	w := watchPods(b, client, ns)
	waitNodeReady(b, client, nodeName)
	proc := &agentProc{pid: node.PID, aside: func(run func()) { run() }}
	switch *agent {
	case "nodelet":
	case "upstream":
		// nodelet has made the node's directories and registered it; the
		// upstream kubelet takes it over as an operator's move would.
		node.Stop()
		up := testbed.NewUpstreamKubelet(node, cl.BinDir, cl.CAFile())
		up.Verbosity = 1
		start := func() {
			up.Start()
			waitNodeReady(b, client, nodeName)
			waitQuiet(b, up.PID())
		}
		start()
		proc = &agentProc{pid: up.PID, aside: func(run func()) { up.Stop(); run(); start() }}
	default:
		b.Fatalf("-density.agent %q: nodelet or upstream", *agent)
	}

	var template *testbed.FloorTemplate
	if *replay {
		template = warmUp(b, client, w, ns, nodeName)
	}
	r := &report{}
	profiled := fetchMeanwhile(client, nodeName, fmt.Sprintf("debug/pprof/profile?seconds=%d", int(window.Seconds())), *idleProf)
	r.idle = measure(b, proc.pid())
	if err := profiled(); err != nil {
		b.Fatal(err)
	}
	r.idleMemory = goMemory(b, client, nodeName)
	if *agent == "nodelet" {
		r.settledAfter = waitStartUpOver(b, node)
	}
	r.idleSettled = measure(b, proc.pid())
	if *heapIdle != "" {
		if err := fetch(client, nodeName, "debug/pprof/heap?gc=1", *heapIdle); err != nil {
			b.Fatal(err)
		}
	}
	curveParallels, err := parseCounts(*curveAt)
	if err != nil && *curveAt != "" {
		b.Fatal(err)
	}
	r.curves = map[int]curve{}
	for round := 1; round <= *rounds; round++ {
		for _, n := range sizes {
			if round == 1 && len(curveParallels) > 0 {
				r.curves[n] = floorCurve(b, bench{template: template, agent: proc}, n, curveParallels)
				fmt.Print(r.curves[n].String(n))
			}
			largest := n == sizes[len(sizes)-1]
			res := burst(b, bench{client: client, w: w, ns: ns, nodeName: nodeName, agent: proc, template: template}, round, n, largest && round == 1)
			if largest && round == 1 {
				r.busy, r.memory = res.busy, res.memory
			}
			// Printed, not logged: a benchmark's log is cut after ten lines.
			fmt.Printf("round %d, %d pods: %s\n", round, n, res.line())
			fmt.Printf("round %d, %d pods: floor all started before nodelet %s, after %s\n", round, n, ms(res.floorBefore), ms(res.floorAfter))
			fmt.Printf("round %d, %d pods: CPU used during the create burst: %s; during the floor's starts (before): %s\n", round, n, cpuString(res.cpu), cpuString(res.floorCPUStart))
			fmt.Printf("round %d, %d pods: CPU used during the delete burst: %s; during the floor's stops (before): %s\n", round, n, cpuString(res.cpuStop), cpuString(res.floorCPUStop))
			fmt.Printf("round %d, %d pods: the create burst's CPU against the floor's starts (before): %s\n", round, n, res.startCPU().compare(res.floorStartCPU()))
			fmt.Printf("round %d, %d pods: the delete burst's CPU against the floor's stops (before): %s\n", round, n, res.stopCPU().compare(res.floorStopCPU()))
			fmt.Printf("round %d, %d pods: mean CRI call latency, nodelet (floor): %s\n", round, n, res.ops)
			fmt.Printf("round %d, %d pods: API requests during the create burst: %s; during the delete burst: %s\n", round, n, res.requests, res.requestsStop)
			fmt.Printf("round %d, %d pods: start calls in flight on average, nodelet over first seen → last running %.2f, floor over all started %.2f\n", round, n, res.inFlight[0], res.inFlight[1])
			fmt.Printf("round %d, %d pods: where the client's create → Ready went: %s\n", round, n, res.legs.String(pct(res.floorStart, 100)))
			fmt.Printf("round %d, %d pods: where the client's delete → gone went: %s\n", round, n, res.deleteLegs.String(pct(res.floorStop, 100)))
			fmt.Printf("round %d, %d pods: %s\n", round, n, res.loadedLine())
			fmt.Printf("round %d, %d pods: the slowest pod's timeline:\n%s", round, n, res.slowest)
			fmt.Printf("round %d, %d pods: the slowest deleted pod's whole timeline (each status write with its phase and version):\n%s", round, n, res.slowestStop)
			r.results = append(r.results, res)
		}
	}
	r.idleAfter = measure(b, proc.pid())
	r.afterMemory = goMemory(b, client, nodeName)
	if *agent == "nodelet" {
		r.trims = trimLines(node.Log())
		if *keepLog {
			node.KeepLogs()
		}
	}
	if *heapEnd != "" {
		if err := fetch(client, nodeName, "debug/pprof/heap?gc=1", *heapEnd); err != nil {
			b.Fatal(err)
		}
	}
	fmt.Println(r.String())
	if receiver != nil {
		fmt.Println(traceSummary(receiver.Spans()))
	}
}

// traceSummary counts what the receiver got: spans, traces, and the pod
// starts and terminations among them.
func traceSummary(spans []otlptest.Span) string {
	traces := map[string]bool{}
	roots := map[string]int{}
	for _, s := range spans {
		traces[s.TraceID] = true
		if s.ParentID == "" {
			roots[s.Name]++
		}
	}
	return fmt.Sprintf("tracing on: %d spans in %d traces received (%d pod starts, %d pod terminations)",
		len(spans), len(traces), roots["pod start"], roots["pod termination"])
}

// bench is what every burst works with.
type bench struct {
	client   kubernetes.Interface
	w        *watcher
	ns       string
	nodeName string
	agent    *agentProc
	template *testbed.FloorTemplate
}

// agentProc is the measured agent's process.
type agentProc struct {
	pid func() int
	// aside runs a floor with the agent out of the runtime's way. The
	// upstream kubelet garbage-collects containers that no pod of its own
	// holds, the floor's among them (one created and not yet started
	// failed so), so it is stopped around each floor and started again
	// after, quiet before the burst; nodelet leaves alone what carries no
	// pod labels and keeps running.
	aside func(run func())
}

// waitQuiet waits until a just started agent's start-up is over: a 5 s
// slice under 2% of a core.
func waitQuiet(b *testing.B, pid int) {
	testbed.Eventually(b, 2*time.Minute, func() (bool, string) {
		cores, err := testbed.CPUCores(pid, 5*time.Second)
		return err == nil && cores < 0.02, fmt.Sprintf("the agent used %.3f cores in 5 s (%v)", cores, err)
	})
}

// burst measures n pods through nodelet between two floor runs, whose
// per-pod times are averaged: the development VM drifts by ±10% from one
// minute to the next, and a floor on both sides cancels the drift.
func burst(b *testing.B, x bench, round, n int, busy bool) result {
	ctx := context.Background()
	res := result{round: round, pods: n}
	before := floorRun(b, x, fmt.Sprintf("floor-%d-%d-a", round, n), n, 0, 0, 0)
	names := podNames(round, n)
	opsBefore := runtimeOps(b, x.client, x.nodeName)
	profiled := fetchMeanwhile(x.client, x.nodeName, "debug/pprof/profile?seconds=40", only(busy, *profile))
	// The CPU windows hold the bursts alone: the API server's metrics
	// (megabytes of text, rendered by it and parsed here) and the
	// timelines are read outside them, as the floor's windows hold its
	// CRI calls alone.
	reqBefore := apiRequests(b, x.client)
	cpuBefore := testbed.CPUByCommand()
	faultsBefore := majorFaults(b, x.agent.pid())
	createStart := time.Now()
	created, ready := burstCreate(b, x.client, x.w, x.ns, x.nodeName, names)
	res.cpu = cpuDelta(cpuBefore)
	res.faults[0] = majorFaults(b, x.agent.pid()) - faultsBefore
	res.start, res.allReady = since(created, ready), latest(ready).Sub(createStart)
	res.requests = requestsSince(b, x.client, reqBefore, n)
	res.clusterCores = sumCPU(res.cpu, clusterCommands).Seconds() / res.allReady.Seconds()
	res.slowest = slowestTimeline(x, names, res.start)
	res.legs = splitLegs(x, names, created, ready)
	if err := profiled(); err != nil {
		b.Fatal(err)
	}
	if busy {
		res.busy, res.memory = measureBusy(b, x)
	}
	profiled = fetchMeanwhile(x.client, x.nodeName, "debug/pprof/profile?seconds=20", only(busy && round == 1, *delProf))
	reqBefore = apiRequests(b, x.client)
	cpuBefore = testbed.CPUByCommand()
	faultsBefore = majorFaults(b, x.agent.pid())
	deleteStart, deleted, gone := burstDelete(b, x.client, x.w, x.ns, names)
	res.cpuStop = cpuDelta(cpuBefore)
	res.faults[1] = majorFaults(b, x.agent.pid()) - faultsBefore
	res.stop, res.allGone = since(deleted, gone), latest(gone).Sub(deleteStart)
	res.requestsStop = requestsSince(b, x.client, reqBefore, n)
	res.deleteLegs = splitDelete(x, names, deleted, gone)
	res.slowestStop = slowestTimeline(x, names, res.stop)
	res.clusterCoresStop = sumCPU(res.cpuStop, clusterCommands).Seconds() / res.allGone.Seconds()
	if err := profiled(); err != nil {
		b.Fatal(err)
	}
	opsAfter := runtimeOps(b, x.client, x.nodeName)
	res.limits = limits(b, x.client, x.nodeName)
	// The floor after starts on a quiet runtime: nodelet's garbage
	// collection of these pods' sandboxes is done.
	testbed.Eventually(b, 5*time.Minute, func() (bool, string) {
		sbs, err := cd.Sandboxes(ctx)
		return err == nil && len(sbs) == 0, fmt.Sprintf("%d sandboxes left (%v)", len(sbs), err)
	})
	after := floorRun(b, x, fmt.Sprintf("floor-%d-%d-b", round, n), n, 0, 0, 0)
	// The floor again, with the cores the cluster's own processes used
	// during the create burst kept busy beside its starts, and those used
	// during the delete burst beside its stops: what is left of the
	// distance is nodelet's.
	loaded := floorRun(b, x, fmt.Sprintf("floor-%d-%d-c", round, n), n, 0, res.clusterCores, res.clusterCoresStop)
	res.loadedStart, res.loadedStop = pct(loaded.start, 100), pct(loaded.stop, 100)
	res.floorStart, res.floorStop = mean(before.start, after.start), mean(before.stop, after.stop)
	res.floorBefore, res.floorAfter = pct(before.start, 100), pct(after.start, 100)
	res.floorStopBefore = pct(before.stop, 100)
	calls := delta(opsBefore, opsAfter)
	res.ops = compareOps(before.calls, calls)
	res.inFlight = [2]float64{inFlight(calls, res.legs.nodeAll), inFlight(before.calls, pct(before.start, 100))}
	res.floorCPUStart, res.floorCPUStop = before.cpuStart, before.cpuStop
	return res
}

type floorResult struct {
	start, stop []time.Duration
	// cpuStart and cpuStop are what each command used while the floor
	// started and stopped its pods.
	cpuStart, cpuStop map[string]time.Duration
	calls             map[string]testbed.CallStats
}

// floorRun starts and stops n pods straight through CRI, parallel at a
// time (the reference floor's parallelism when 0); with loads, that many
// cores are kept busy beside the starts, and beside the stops.
func floorRun(b *testing.B, x bench, prefix string, n, parallelism int, load, loadStop float64) floorResult {
	if parallelism == 0 {
		parallelism = *parallel
	}
	var out floorResult
	x.agent.aside(func() { out = floorPods(b, x, prefix, n, parallelism, load, loadStop) })
	return out
}

func floorPods(b *testing.B, x bench, prefix string, n, parallelism int, load, loadStop float64) floorResult {
	ctx := context.Background()
	f := &testbed.Floor{CD: cd, Parallel: parallelism, LogDir: b.TempDir(), Template: x.template}
	var out floorResult
	var err error
	cpuBefore := testbed.CPUByCommand()
	stopBurn := burn(load)
	out.start, err = f.Start(ctx, prefix, n)
	stopBurn()
	if err != nil {
		b.Fatal(err)
	}
	out.cpuStart = cpuDelta(cpuBefore)
	cpuBefore = testbed.CPUByCommand()
	stopBurn = burn(loadStop)
	out.stop, err = f.Stop(ctx)
	stopBurn()
	if err != nil {
		b.Fatal(err)
	}
	out.cpuStop = cpuDelta(cpuBefore)
	if err := f.Remove(ctx); err != nil {
		b.Fatal(err)
	}
	out.calls = f.Calls()
	return out
}

func mean(a, b []time.Duration) []time.Duration {
	out := make([]time.Duration, len(a))
	for i := range a {
		out[i] = (a[i] + b[i]) / 2
	}
	return out
}

// measureBusy measures nodelet with the pods running.
func measureBusy(b *testing.B, x bench) (usage, string) {
	u := measure(b, x.agent.pid())
	mem := goMemory(b, x.client, x.nodeName)
	if *heap != "" {
		if err := fetch(x.client, x.nodeName, "debug/pprof/heap", *heap); err != nil {
			b.Fatal(err)
		}
	}
	return u, mem
}

// warmUp runs one pod through nodelet and captures the configuration
// nodelet gave the runtime for it, for the floor to replay.
func warmUp(b *testing.B, c kubernetes.Interface, w *watcher, ns, nodeName string) *testbed.FloorTemplate {
	names := []string{"warm-up"}
	burstCreate(b, c, w, ns, nodeName, names)
	t, err := testbed.CaptureTemplate(context.Background(), cd, "warm-up", b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	burstDelete(b, c, w, ns, names)
	testbed.Eventually(b, 5*time.Minute, func() (bool, string) {
		sbs, err := cd.Sandboxes(context.Background())
		return err == nil && len(sbs) == 0, fmt.Sprintf("%d sandboxes left (%v)", len(sbs), err)
	})
	return t
}

// fetchMeanwhile starts fetching what nodelet serves at path into file
// (nothing when file is ""), for a profile to cover what runs meanwhile;
// the function it returns waits for the fetch and returns its error.
func fetchMeanwhile(c kubernetes.Interface, nodeName, path, file string) func() error {
	if file == "" {
		return func() error { return nil }
	}
	done := make(chan error, 1)
	go func() { done <- fetch(c, nodeName, path, file) }()
	return func() error { return <-done }
}

// only is file when cond holds, else "" (no profile).
func only(cond bool, file string) string {
	if !cond {
		return ""
	}
	return file
}

// fetch writes what nodelet serves at path, through the API server's node
// proxy, to file.
func fetch(c kubernetes.Interface, nodeName, path, file string) error {
	// Suffix would escape a query's "?" into the path.
	p, query, _ := strings.Cut(path, "?")
	req := c.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", nodeName, "proxy").Suffix(p).Timeout(5 * time.Minute) // a CPU profile takes up to 3 minutes
	for _, kv := range strings.Split(query, "&") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			req = req.Param(k, v)
		}
	}
	data, err := req.DoRaw(context.Background())
	if err != nil {
		return fmt.Errorf("fetching %s: %w", path, err)
	}
	return os.WriteFile(file, data, 0o644)
}

func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		var n int
		if _, err := fmt.Sscan(f, &n); err != nil || n < 1 {
			return nil, fmt.Errorf("-density.counts: %q is not a pod count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// benchClient is a cluster-admin client fast enough never to be the
// bottleneck: a burst is created at once.
func benchClient(b *testing.B) kubernetes.Interface {
	cfg, err := clientcmd.BuildConfigFromFlags("", cl.AdminKubeconfig)
	if err != nil {
		b.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func namespace(b *testing.B, c kubernetes.Interface) string {
	ctx := context.Background()
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "density"}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	testbed.Eventually(b, time.Minute, func() (bool, string) {
		_, err := c.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprintf("no default service account: %v", err)
	})
	return ns.Name
}

func waitNodeReady(b *testing.B, c kubernetes.Interface, name string) {
	testbed.Eventually(b, time.Minute, func() (bool, string) {
		n, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == v1.NodeReady && cond.Status == v1.ConditionTrue {
				return true, ""
			}
		}
		return false, "node not Ready"
	})
}

// watcher records when each pod was first seen Ready and when it was
// seen deleted, as a client watching the API sees them.
type watcher struct {
	mu    sync.Mutex
	ready map[string]time.Time
	gone  map[string]time.Time
}

func watchPods(b *testing.B, c kubernetes.Interface, ns string) *watcher {
	w := &watcher{ready: map[string]time.Time{}, gone: map[string]time.Time{}}
	lw := cache.NewListWatchFromClient(c.CoreV1().RESTClient(), "pods", ns, fields.Everything())
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw, ObjectType: &v1.Pod{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { w.seen(o.(*v1.Pod)) },
			UpdateFunc: func(_, o any) { w.seen(o.(*v1.Pod)) },
			DeleteFunc: func(o any) {
				if p, ok := o.(*v1.Pod); ok {
					w.mark(w.gone, p.Name)
				}
			},
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	go ctrl.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
		b.Fatal("pod watch never synced")
	}
	return w
}

func (w *watcher) seen(p *v1.Pod) {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
			w.mark(w.ready, p.Name)
		}
	}
}

func (w *watcher) mark(m map[string]time.Time, name string) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := m[name]; !ok {
		m[name] = now
	}
}

// waitAll waits until every name is in m and returns their times.
func (w *watcher) waitAll(b *testing.B, m map[string]time.Time, names []string, what string) []time.Time {
	out := make([]time.Time, len(names))
	testbed.Eventually(b, 10*time.Minute, func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		missing := 0
		for i, n := range names {
			t, ok := m[n]
			if !ok {
				missing++
			}
			out[i] = t
		}
		return missing == 0, fmt.Sprintf("%d of %d pods not %s", missing, len(names), what)
	})
	return out
}

func podNames(round, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("d%d-%d-%d", round, n, i)
	}
	return out
}

func benchPod(name, nodeName string) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PodSpec{
			NodeName: nodeName,
			Containers: []v1.Container{{
				Name: "main", Image: testbed.BusyboxImage, Command: testbed.SleeperCommand, ImagePullPolicy: v1.PullIfNotPresent,
			}},
		},
	}
	if !*token {
		p.Spec.AutomountServiceAccountToken = new(false)
	}
	return p
}

// burstCreate creates the pods at once and returns each one's create →
// Ready time and the time from the first create to the last Ready.
func burstCreate(b *testing.B, c kubernetes.Interface, w *watcher, ns, nodeName string, names []string) (created, ready []time.Time) {
	created = make([]time.Time, len(names))
	at := func(i int) error {
		created[i] = time.Now()
		_, err := c.CoreV1().Pods(ns).Create(context.Background(), benchPod(names[i], nodeName), metav1.CreateOptions{})
		return err
	}
	if err := all(len(names), at); err != nil {
		b.Fatal(err)
	}
	return created, w.waitAll(b, w.ready, names, "Ready")
}

// burstDelete deletes the pods at once (default grace; they exit on
// SIGTERM) and returns when each one was deleted and when the client saw
// it gone, and when the first delete was sent.
func burstDelete(b *testing.B, c kubernetes.Interface, w *watcher, ns string, names []string) (start time.Time, deleted, gone []time.Time) {
	deleted = make([]time.Time, len(names))
	at := func(i int) error {
		deleted[i] = time.Now()
		return c.CoreV1().Pods(ns).Delete(context.Background(), names[i], metav1.DeleteOptions{})
	}
	start = time.Now()
	if err := all(len(names), at); err != nil {
		b.Fatal(err)
	}
	return start, deleted, w.waitAll(b, w.gone, names, "gone")
}

// all runs fn for every index at once.
func all(n int, fn func(i int) error) error {
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs <- fn(i)
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func since(from, to []time.Time) []time.Duration {
	out := make([]time.Duration, len(from))
	for i := range from {
		out[i] = to[i].Sub(from[i])
	}
	return out
}

func latest(ts []time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}

// usage is nodelet's CPU and memory over a window.
type usage struct {
	cores float64
	mem   testbed.Memory
	// majorFaults are the window's: pages of the binary read back from
	// the disk (after a working-set trim), whose reads count in cores.
	majorFaults uint
}

// startUpTrimmed is what nodelet logs when it trims its working set.
const startUpTrimmed = "Unmapped the binary's pages"

// waitStartUpOver waits until nodelet's start-up is over: its start-up
// trim logged, and then a 5 s slice without a major fault (the pages
// idle work runs are read back). It returns how long it waited.
func waitStartUpOver(b *testing.B, node *testbed.Nodelet) time.Duration {
	start := time.Now()
	testbed.Eventually(b, 2*time.Minute, func() (bool, string) {
		return strings.Contains(node.Log(), startUpTrimmed), "no start-up trim logged"
	})
	deadline := start.Add(3 * time.Minute)
	for {
		before := majorFaults(b, node.PID())
		cores, err := testbed.CPUCores(node.PID(), 5*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if majorFaults(b, node.PID()) == before {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			b.Fatalf("nodelet still reads pages back 3 min after its start-up (%.4f cores in the last 5 s)", cores)
		}
	}
}

// trimLines are nodelet's log lines of its working-set trims.
func trimLines(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, startUpTrimmed) {
			out = append(out, l)
		}
	}
	return out
}

func majorFaults(b *testing.B, pid int) uint {
	n, err := testbed.MajorFaults(pid)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

func measure(b *testing.B, pid int) usage {
	faults := majorFaults(b, pid)
	cores, err := testbed.CPUCores(pid, *window)
	if err != nil {
		b.Fatal(err)
	}
	mem, err := testbed.ProcessMemory(pid)
	if err != nil {
		b.Fatal(err)
	}
	return usage{cores: cores, mem: mem, majorFaults: majorFaults(b, pid) - faults}
}

func (u usage) String() string {
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	return fmt.Sprintf("CPU %.4f cores (%d major faults), RSS %.1f MiB (anonymous %.1f, file %.1f)", u.cores, u.majorFaults, mib(u.mem.RSS), mib(u.mem.Anon), mib(u.mem.File))
}

// result is one burst's figures: nodelet's and the floor's.
type result struct {
	round, pods       int
	start, stop       []time.Duration
	allReady, allGone time.Duration
	// limits are nodelet's start and stop limits after the burst.
	limits [2]int
	// faults are nodelet's major faults during the create and the delete
	// burst: pages of its binary read back after a working-set trim.
	faults                [2]uint
	floorStart, floorStop []time.Duration
	// floorBefore and floorAfter are the two floor runs' all started,
	// floorStopBefore the first one's all stopped.
	floorBefore, floorAfter, floorStopBefore time.Duration
	// busy and memory are nodelet's with the pods running, if measured.
	busy   usage
	memory string
	// cpu is what each command used during the create burst.
	cpu, cpuStop map[string]time.Duration
	// floorCPUStart and floorCPUStop are what each command used during
	// the floor's starts and stops (the run before the burst).
	floorCPUStart, floorCPUStop map[string]time.Duration
	// ops compares nodelet's mean CRI call latencies with the floor's.
	ops string
	// requests (requestsStop) are the API server's requests during the
	// create (delete) burst, from every client.
	requests, requestsStop string
	// inFlight is how many start calls (sandboxes, container creates and
	// starts) ran at once on average, nodelet's and the floor's (before).
	inFlight [2]float64
	// clusterCores (clusterCoresStop) is what the cluster's own processes
	// (clusterCommands) used during the create (delete) burst, in cores;
	// loadedStart (loadedStop) is the floor's all started (all stopped)
	// with as many cores kept busy beside it.
	clusterCores, clusterCoresStop float64
	loadedStart, loadedStop        time.Duration
	// slowest is the lifecycle timeline of the pod that took longest to
	// be Ready (nodelet's text rendering): where its time went;
	// slowestStop that of the pod slowest to go, its whole life.
	slowest, slowestStop string
	// legs splits the client's create → Ready by nodelet's timelines,
	// deleteLegs its delete → gone.
	legs       legs
	deleteLegs deleteLegs
}

// legs splits each pod's create → Ready, as the client saw it, at the
// moments nodelet's timeline recorded: the API server's way in (create →
// nodelet saw the pod), nodelet and the runtime (seen → running), and the
// way out (running → the client saw Ready: the status write and the
// watch). nodeAll is from the first pod seen to the last running, the
// span comparable with the floor's all started, which has no API legs.
// read is the end of the pod's last container start to running: the read
// of the pod back from the runtime and its status, none of it the floor's.
type legs struct {
	in, node, read, out []time.Duration
	nodeAll             time.Duration
	err                 error
}

// step is one step of a pod's timeline, as nodelet serves it.
type step struct {
	Kind, Name string
	Start, End time.Time
}

// podTimeline reads a pod's timeline (JSON) through the node proxy.
func podTimeline(x bench, name string) ([]step, error) {
	body, err := x.client.CoreV1().RESTClient().Get().
		AbsPath("/api/v1/nodes", x.nodeName, "proxy", "debug", "pods", x.ns, name, "timeline").
		Param("format", "json").DoRaw(context.Background())
	if err != nil {
		return nil, fmt.Errorf("the timeline of %s: %w", name, err)
	}
	var tl struct{ Steps []step }
	if err := json.Unmarshal(body, &tl); err != nil {
		return nil, fmt.Errorf("the timeline of %s: %w", name, err)
	}
	return tl.Steps, nil
}

// span is from the earliest start to the latest end of the pods' steps.
type span struct{ first, last time.Time }

func (s *span) add(start, end time.Time) {
	if s.first.IsZero() || start.Before(s.first) {
		s.first = start
	}
	if end.After(s.last) {
		s.last = end
	}
}

func (s span) length() time.Duration { return s.last.Sub(s.first) }

// splitLegs reads every pod's timeline.
func splitLegs(x bench, names []string, created, ready []time.Time) legs {
	var l legs
	var all span
	for i, name := range names {
		steps, err := podTimeline(x, name)
		if err != nil {
			return legs{err: err}
		}
		var seen, started, running time.Time
		for _, st := range steps {
			switch {
			case st.Kind == "source" && st.Name == "seen" && seen.IsZero():
				seen = st.Start
			case st.Kind == "container" && running.IsZero():
				started = st.End
			case st.Kind == "running" && running.IsZero():
				running = st.Start
			}
		}
		if seen.IsZero() || started.IsZero() || running.IsZero() {
			return legs{err: fmt.Errorf("the timeline of %s has no seen, container or running step", name)}
		}
		l.in = append(l.in, seen.Sub(created[i]))
		l.node = append(l.node, running.Sub(seen))
		l.read = append(l.read, running.Sub(started))
		l.out = append(l.out, ready[i].Sub(running))
		all.add(seen, running)
	}
	l.nodeAll = all.length()
	return l
}

// deleteLegs splits each pod's delete → gone, as the client saw it, at
// its termination steps: the way in (delete → nodelet began stopping its
// containers), stopping them (containers and sandbox), the wait before
// releasing what it held, releasing it (volumes and cgroups), and the way
// out (the final status, the pod deleted from the API, the watch).
// nodeAll is from the first pod's stop begun to the last one's release
// done, the span comparable with the floor's all stopped.
type deleteLegs struct {
	in, stop, wait, release, out []time.Duration
	nodeAll                      time.Duration
	err                          error
}

func splitDelete(x bench, names []string, deleted, gone []time.Time) deleteLegs {
	var l deleteLegs
	var all span
	for i, name := range names {
		steps, err := podTimeline(x, name)
		if err != nil {
			return deleteLegs{err: err}
		}
		var stopping, released step
		for _, st := range steps {
			switch {
			case st.Kind == "terminating" && stopping.Kind == "":
				stopping = st
			case st.Kind == "terminated" && released.Kind == "":
				released = st
			}
		}
		if stopping.Kind == "" || released.Kind == "" {
			return deleteLegs{err: fmt.Errorf("the timeline of %s has no terminating or terminated step", name)}
		}
		l.in = append(l.in, stopping.Start.Sub(deleted[i]))
		l.stop = append(l.stop, stopping.End.Sub(stopping.Start))
		l.wait = append(l.wait, released.Start.Sub(stopping.End))
		l.release = append(l.release, released.End.Sub(released.Start))
		l.out = append(l.out, gone[i].Sub(released.End))
		all.add(stopping.Start, released.End)
	}
	l.nodeAll = all.length()
	return l
}

func (l deleteLegs) String(floorAll time.Duration) string {
	if l.err != nil {
		return l.err.Error()
	}
	p := func(d []time.Duration) string { return fmt.Sprintf("p50 %s max %s", ms(pct(d, 50)), ms(pct(d, 100))) }
	return fmt.Sprintf("delete → nodelet began stopping it %s; stopping (containers, sandbox) %s; wait %s; releasing (volumes, cgroups) %s; "+
		"released → the client saw it gone %s; first stop begun → last released %s (floor all stopped %s, ×%s)",
		p(l.in), p(l.stop), p(l.wait), p(l.release), p(l.out), ms(l.nodeAll), ms(floorAll), ratio(l.nodeAll, floorAll))
}

func (l legs) String(floorAll time.Duration) string {
	if l.err != nil {
		return l.err.Error()
	}
	return fmt.Sprintf("create → nodelet saw it p50 %s max %s; seen → running p50 %s max %s, first seen → last running %s (floor all started %s, ×%s), of which last container started → running (the read back) p50 %.1fms max %.1fms; running → the client saw Ready p50 %s max %s",
		ms(pct(l.in, 50)), ms(pct(l.in, 100)), ms(pct(l.node, 50)), ms(pct(l.node, 100)), ms(l.nodeAll), ms(floorAll), ratio(l.nodeAll, floorAll),
		msf(pct(l.read, 50)), msf(pct(l.read, 100)), ms(pct(l.out, 50)), ms(pct(l.out, 100)))
}

// slowestTimeline fetches the timeline of the pod that took longest from
// its node's kubelet API, through the API server's node proxy.
func slowestTimeline(x bench, names []string, start []time.Duration) string {
	slow := 0
	for i := range start {
		if start[i] > start[slow] {
			slow = i
		}
	}
	body, err := x.client.CoreV1().RESTClient().Get().
		AbsPath("/api/v1/nodes", x.nodeName, "proxy", "debug", "pods", x.ns, names[slow], "timeline").
		Param("format", "text").DoRaw(context.Background())
	if err != nil {
		return fmt.Sprintf("(the timeline of %s: %v)\n", names[slow], err)
	}
	return string(body)
}

// runtimeOps reads nodelet's kubelet_runtime_operations_duration_seconds
// (sum and count by operation) through the API server's node proxy.
func runtimeOps(b *testing.B, c kubernetes.Interface, nodeName string) map[string]testbed.CallStats {
	families := scrape(b, c, nodeName)
	out := map[string]testbed.CallStats{}
	// Pod worker syncs count too ("sync:create", …): they cause the calls.
	for name, prefix := range map[string]string{"kubelet_runtime_operations_duration_seconds": "", "kubelet_pod_worker_duration_seconds": "sync:"} {
		f, ok := families[name]
		if !ok {
			continue
		}
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == "operation_type" {
					h := m.GetHistogram()
					out[prefix+l.GetValue()] = testbed.CallStats{Count: int(h.GetSampleCount()), Total: time.Duration(h.GetSampleSum() * float64(time.Second))}
				}
			}
		}
	}
	return out
}

// goMemory reads the Go runtime's memory figures from nodelet's metrics.
func goMemory(b *testing.B, c kubernetes.Interface, nodeName string) string {
	families := scrape(b, c, nodeName)
	var parts []string
	for _, name := range []string{"go_memstats_heap_inuse_bytes", "go_memstats_heap_idle_bytes", "go_memstats_heap_released_bytes", "go_memstats_stack_inuse_bytes", "go_memstats_sys_bytes", "go_goroutines"} {
		if f, ok := families[name]; ok && len(f.Metric) > 0 {
			v := f.Metric[0].GetGauge().GetValue()
			if strings.HasSuffix(name, "_bytes") {
				parts = append(parts, fmt.Sprintf("%s %.1f MiB", strings.TrimSuffix(strings.TrimPrefix(name, "go_memstats_"), "_bytes"), v/(1<<20)))
			} else {
				parts = append(parts, fmt.Sprintf("%s %.0f", strings.TrimPrefix(name, "go_"), v))
			}
		}
	}
	return strings.Join(parts, ", ")
}

// scrape reads nodelet's metrics.
func scrape(b *testing.B, c kubernetes.Interface, nodeName string) map[string]*dto.MetricFamily {
	return scrapePath(b, c, "/api/v1/nodes", nodeName, "proxy/metrics")
}

// scrapePath reads metrics from a path of the API server.
func scrapePath(b *testing.B, c kubernetes.Interface, path ...string) map[string]*dto.MetricFamily {
	data, err := c.CoreV1().RESTClient().Get().AbsPath(path...).DoRaw(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		b.Fatal(err)
	}
	return families
}

// apiRequests counts the API server's requests so far by verb and
// resource ("PATCH pods/status"), from every client.
func apiRequests(b *testing.B, c kubernetes.Interface) map[string]int {
	out := map[string]int{}
	f, ok := scrapePath(b, c, "/metrics")["apiserver_request_total"]
	if !ok {
		b.Fatal("the API server serves no apiserver_request_total")
	}
	for _, m := range f.Metric {
		l := map[string]string{}
		for _, p := range m.Label {
			l[p.GetName()] = p.GetValue()
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += int(m.GetCounter().GetValue())
	}
	return out
}

// requestsSince lists the requests made since before, the most first,
// down to one per ten pods.
func requestsSince(b *testing.B, c kubernetes.Interface, before map[string]int, pods int) string {
	type count struct {
		key string
		n   int
	}
	var counts []count
	for key, n := range apiRequests(b, c) {
		if n -= before[key]; n > 0 && n*10 >= pods {
			counts = append(counts, count{key, n})
		}
	}
	slices.SortFunc(counts, func(a, b count) int { return b.n - a.n })
	var parts []string
	for _, x := range counts {
		parts = append(parts, fmt.Sprintf("%s %d", x.key, x.n))
	}
	return strings.Join(parts, ", ")
}

// limits are how many starting and stopping calls nodelet lets run at
// once now.
func limits(b *testing.B, c kubernetes.Interface, nodeName string) [2]int {
	var out [2]int
	if *agent != "nodelet" {
		return out // the upstream kubelet has no adaptive limit
	}
	fs := scrape(b, c, nodeName)
	for i, name := range []string{"nodelet_runtime_start_limit", "nodelet_runtime_stop_limit"} {
		f, ok := fs[name]
		if !ok || len(f.Metric) == 0 {
			b.Fatalf("nodelet serves no %s", name)
		}
		out[i] = int(f.Metric[0].GetGauge().GetValue())
	}
	return out
}

// delta is the calls made between two readings.
func delta(before, after map[string]testbed.CallStats) map[string]testbed.CallStats {
	out := map[string]testbed.CallStats{}
	for op, a := range after {
		out[op] = testbed.CallStats{Count: a.Count - before[op].Count, Total: a.Total - before[op].Total}
	}
	return out
}

// inFlight is how many start calls ran at once on average over span: the
// runtime's time in them divided by the span. The floor keeps its
// parallelism busy to the end; a kubelet that leaves the runtime waiting
// shows fewer.
func inFlight(calls map[string]testbed.CallStats, span time.Duration) float64 {
	if span <= 0 {
		return 0
	}
	var busy time.Duration
	for _, op := range []string{"run_podsandbox", "create_container", "start_container"} {
		busy += calls[op].Total
	}
	return busy.Seconds() / span.Seconds()
}

// compareOps prints the mean latency of the floor's calls beside
// nodelet's same calls during the burst.
func compareOps(floor, nodelet map[string]testbed.CallStats) string {
	var parts []string
	var ops []string
	for op := range nodelet {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	for _, op := range ops {
		f, n := floor[op], nodelet[op]
		if n.Count == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s/%d (floor %s/%d)", op, ms(n.Mean()), n.Count, ms(f.Mean()), f.Count))
	}
	return strings.Join(parts, ", ")
}

// clusterCommands are the cluster's processes besides nodelet and the
// runtime: the control plane and the benchmark's own client (this
// process, by its command name as the kernel keeps it: 15 bytes).
var clusterCommands = []string{"kube-apiserver", "etcd", "kube-controller", "kube-scheduler", selfCommand()}

// agentCommand is the measured agent's command name.
func agentCommand() string {
	if *agent == "upstream" {
		return "kubelet"
	}
	return "nodelet"
}

func selfCommand() string {
	b, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		return "density.test"
	}
	return strings.TrimSpace(string(b))
}

// sumCPU is the CPU the commands used in a delta.
func sumCPU(delta map[string]time.Duration, cmds []string) time.Duration {
	var sum time.Duration
	for _, c := range cmds {
		sum += delta[c]
	}
	return sum
}

// cpuDelta is what each command, and the machine, used since before.
func cpuDelta(before map[string]time.Duration) map[string]time.Duration {
	out := map[string]time.Duration{}
	for cmd, d := range testbed.CPUByCommand() {
		out[cmd] = d - before[cmd]
	}
	return out
}

// cpuSplit splits the machine's busy time over a span of n pods started
// or stopped: nodelet's, the cluster's (clusterCommands), and the rest,
// which is the runtime's (containerd, its shims, runc and the CNI plugins,
// which end too soon to be counted by name, the pods' own processes) and
// the kernel's work for it.
type cpuSplit struct {
	machine, nodelet, cluster, runtime time.Duration
	// nodeletSystem is the part of nodelet's spent in the kernel.
	nodeletSystem time.Duration
	span          time.Duration
	pods          int
}

func splitCPU(delta map[string]time.Duration, span time.Duration, pods int) cpuSplit {
	cmd := agentCommand()
	c := cpuSplit{machine: delta[testbed.Machine], nodelet: delta[cmd], nodeletSystem: delta[testbed.System(cmd)], cluster: sumCPU(delta, clusterCommands), span: span, pods: pods}
	c.runtime = c.machine - c.nodelet - c.cluster
	return c
}

// busy is how much of the machine's cores were busy over the span.
func (c cpuSplit) busy() float64 {
	return c.machine.Seconds() / c.span.Seconds() / float64(runtime.NumCPU())
}

func (c cpuSplit) perPod(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)/float64(max(c.pods, 1)))
}

// compare prints nodelet's span beside the floor's, CPU per pod by whom.
// On a runtime bound by the machine's cores, the span follows the
// machine's busy time: what nodelet's span adds is then the runtime's
// extra work, nodelet's and the cluster's CPU, each per pod here.
func (c cpuSplit) compare(floor cpuSplit) string {
	return fmt.Sprintf("machine busy %.1f core-s, %.0f%% of its cores (floor %.1f, %.0f%%; ×%.2f); per pod: runtime and kernel %s (floor %s, ×%.2f), nodelet %s (%s of it in the kernel; floor %s), cluster %s (floor %s)",
		c.machine.Seconds(), 100*c.busy(), floor.machine.Seconds(), 100*floor.busy(), c.machine.Seconds()/floor.machine.Seconds(),
		c.perPod(c.runtime), floor.perPod(floor.runtime), c.runtime.Seconds()/floor.runtime.Seconds(),
		c.perPod(c.nodelet), c.perPod(c.nodeletSystem), floor.perPod(floor.nodelet), c.perPod(c.cluster), floor.perPod(floor.cluster))
}

// burn keeps cores busy (as a duty cycle over ceil(cores) goroutines, in
// 10 ms periods) until the returned function is called. It stands in for
// the cluster's CPU beside the floor, not for its disk writes.
func burn(cores float64) (stop func()) {
	if cores <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	k := int(math.Ceil(cores))
	const period = 10 * time.Millisecond
	busy := time.Duration(float64(period) * cores / float64(k))
	for i := 0; i < k; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				start := time.Now()
				for time.Since(start) < busy {
				}
				time.Sleep(period - busy)
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}

// loadedLine compares nodelet with the floor run beside the cluster's CPU.
func (r result) loadedLine() string {
	return fmt.Sprintf("the floor with the cluster's own CPU kept busy beside it (%.2f cores: API server, etcd, controllers, scheduler, the client, as in the burst): all started %s (×%s the plain floor); nodelet's all ready ×%s and first seen → last running ×%s of it; "+
		"beside its stops (%.2f cores, as in the delete burst): all stopped %s (×%s the plain floor); nodelet's all gone ×%s and first stop begun → last released ×%s of it",
		r.clusterCores, ms(r.loadedStart), ratio(r.loadedStart, pct(r.floorStart, 100)), ratio(r.allReady, r.loadedStart), ratio(r.legs.nodeAll, r.loadedStart),
		r.clusterCoresStop, ms(r.loadedStop), ratio(r.loadedStop, pct(r.floorStop, 100)), ratio(r.allGone, r.loadedStop), ratio(r.deleteLegs.nodeAll, r.loadedStop))
}

// The CPU of the create and delete bursts and of the floor's starts and
// stops before them, split by whom.
func (r result) startCPU() cpuSplit { return splitCPU(r.cpu, r.allReady, r.pods) }
func (r result) stopCPU() cpuSplit  { return splitCPU(r.cpuStop, r.allGone, r.pods) }
func (r result) floorStartCPU() cpuSplit {
	return splitCPU(r.floorCPUStart, r.floorBefore, r.pods)
}
func (r result) floorStopCPU() cpuSplit {
	return splitCPU(r.floorCPUStop, r.floorStopBefore, r.pods)
}

// cpuString lists the commands that used the most CPU in a delta.
func cpuString(delta map[string]time.Duration) string {
	type use struct {
		cmd string
		d   time.Duration
	}
	var uses []use
	for cmd, d := range delta {
		if strings.HasSuffix(cmd, testbed.System("")) {
			continue // a part of another's, printed where it matters
		}
		if d >= 100*time.Millisecond {
			uses = append(uses, use{cmd, d})
		}
	}
	slices.SortFunc(uses, func(a, b use) int { return int(b.d - a.d) })
	var parts []string
	for _, u := range uses {
		parts = append(parts, fmt.Sprintf("%s %.1fs", u.cmd, u.d.Seconds()))
	}
	return strings.Join(parts, ", ")
}

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond)) }

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ratio(a, b time.Duration) string { return fmt.Sprintf("%.2f", float64(a)/float64(b)) }

func (r result) line() string {
	fs, fp := pct(r.floorStart, 100), pct(r.floorStop, 100)
	return fmt.Sprintf("start p50 %s (floor %s, ×%s) p99 %s (floor %s, ×%s) all ready %s (floor %s, ×%s); "+
		"delete p50 %s (floor %s, ×%s) p99 %s (floor %s, ×%s) all gone %s (floor %s, ×%s); start and stop limits after %d, %d; nodelet's major faults %d, %d",
		ms(pct(r.start, 50)), ms(pct(r.floorStart, 50)), ratio(pct(r.start, 50), pct(r.floorStart, 50)),
		ms(pct(r.start, 99)), ms(pct(r.floorStart, 99)), ratio(pct(r.start, 99), pct(r.floorStart, 99)),
		ms(r.allReady), ms(fs), ratio(r.allReady, fs),
		ms(pct(r.stop, 50)), ms(pct(r.floorStop, 50)), ratio(pct(r.stop, 50), pct(r.floorStop, 50)),
		ms(pct(r.stop, 99)), ms(pct(r.floorStop, 99)), ratio(pct(r.stop, 99), pct(r.floorStop, 99)),
		ms(r.allGone), ms(fp), ratio(r.allGone, fp), r.limits[0], r.limits[1], r.faults[0], r.faults[1])
}

type report struct {
	// curves are the floor's curves by burst size.
	curves                map[int]curve
	idle, busy, idleAfter usage
	// idleSettled is idle once start-up is over: the start-up trim done
	// and the pages it dropped that idle work runs read back, which the
	// idle window right after the node is Ready still holds.
	idleSettled usage
	// settledAfter is how long after that window start-up was over.
	settledAfter time.Duration
	// memory is the Go runtime's account of nodelet's memory at the
	// largest burst; idleMemory and afterMemory idle, before and after
	// the rounds (what the heap still holds, against what the runtime
	// has not yet given back).
	memory, idleMemory, afterMemory string
	// trims are nodelet's log lines of its working-set trims, from
	// start-up to the end of the idle-after window: when the binary's
	// pages and the heap's free ones were given back.
	trims   []string
	results []result
}

func (r *report) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "agent measured: %s (\"nodelet\" below is it); reference floor parallelism %d (around each burst); floor replays the agent's CRI configuration: %v; pods mount a token: %v\n", *agent, *parallel, *replay, *token)
	fmt.Fprintf(&sb, "%-5s %-4s | %-28s | %-28s | %-26s | %-28s | %-28s | %-26s\n", "round", "pods",
		"start p50 (floor, ratio)", "start p99 (floor, ratio)", "all ready (floor, ratio)",
		"delete p50 (floor, ratio)", "delete p99 (floor, ratio)", "all gone (floor, ratio)")
	cell := func(a, b time.Duration) string { return fmt.Sprintf("%s (%s, ×%s)", ms(a), ms(b), ratio(a, b)) }
	for _, x := range r.results {
		fmt.Fprintf(&sb, "%-5d %-4d | %-28s | %-28s | %-26s | %-28s | %-28s | %-26s\n", x.round, x.pods,
			cell(pct(x.start, 50), pct(x.floorStart, 50)), cell(pct(x.start, 99), pct(x.floorStart, 99)),
			cell(x.allReady, pct(x.floorStart, 100)),
			cell(pct(x.stop, 50), pct(x.floorStop, 50)), cell(pct(x.stop, 99), pct(x.floorStop, 99)),
			cell(x.allGone, pct(x.floorStop, 100)))
	}
	fmt.Fprintf(&sb, "medians over the rounds of each ratio (the floor varies by ±10%% from run to run on the development VM):\n")
	byCount := map[int][]result{}
	var order []int
	for _, x := range r.results {
		if _, ok := byCount[x.pods]; !ok {
			order = append(order, x.pods)
		}
		byCount[x.pods] = append(byCount[x.pods], x)
	}
	for _, n := range order {
		med := func(f func(result) float64) string {
			var v []float64
			for _, x := range byCount[n] {
				v = append(v, f(x))
			}
			slices.Sort(v)
			return fmt.Sprintf("×%.2f", v[len(v)/2])
		}
		rat := func(a, b time.Duration) float64 { return float64(a) / float64(b) }
		fmt.Fprintf(&sb, "%4d pods: start p50 %s, p99 %s, all ready %s; delete p50 %s, p99 %s, all gone %s\n", n,
			med(func(x result) float64 { return rat(pct(x.start, 50), pct(x.floorStart, 50)) }),
			med(func(x result) float64 { return rat(pct(x.start, 99), pct(x.floorStart, 99)) }),
			med(func(x result) float64 { return rat(x.allReady, pct(x.floorStart, 100)) }),
			med(func(x result) float64 { return rat(pct(x.stop, 50), pct(x.floorStop, 50)) }),
			med(func(x result) float64 { return rat(pct(x.stop, 99), pct(x.floorStop, 99)) }),
			med(func(x result) float64 { return rat(x.allGone, pct(x.floorStop, 100)) }))
	}
	for _, n := range order {
		var all, node, gone, released []float64
		for _, x := range byCount[n] {
			all = append(all, float64(x.allReady)/float64(x.loadedStart))
			node = append(node, float64(x.legs.nodeAll)/float64(x.loadedStart))
			gone = append(gone, float64(x.allGone)/float64(x.loadedStop))
			released = append(released, float64(x.deleteLegs.nodeAll)/float64(x.loadedStop))
		}
		for _, v := range [][]float64{all, node, gone, released} {
			slices.Sort(v)
		}
		fmt.Fprintf(&sb, "%4d pods against the floor with the cluster's CPU beside it: all ready ×%.2f, first seen → last running ×%.2f; all gone ×%.2f, first stop begun → last released ×%.2f (medians)\n",
			n, all[len(all)/2], node[len(node)/2], gone[len(gone)/2], released[len(released)/2])
	}
	r.againstBest(&sb, order, byCount)
	fmt.Fprintf(&sb, "nodelet idle before: %s (%s)\n", r.idle, r.idleMemory)
	fmt.Fprintf(&sb, "nodelet idle before, start-up over (trimmed, read back; %s later): %s\n", r.settledAfter.Round(time.Second), r.idleSettled)
	fmt.Fprintf(&sb, "nodelet with the largest burst running: %s (%s)\nnodelet idle after: %s (%s)\n", r.busy, r.memory, r.idleAfter, r.afterMemory)
	if len(r.trims) > 0 {
		fmt.Fprintf(&sb, "nodelet's working-set trims (%d):\n%s\n", len(r.trims), strings.Join(r.trims, "\n"))
	}
	return sb.String()
}

// curve is the raw CRI floor of one burst size at several parallelisms.
type curve struct {
	points []curvePoint
}

type curvePoint struct {
	parallel    int
	start, stop []time.Duration
}

// floorCurve measures the floor of n pods at each parallelism.
func floorCurve(b *testing.B, x bench, n int, parallels []int) curve {
	var c curve
	for _, p := range parallels {
		f := floorRun(b, x, fmt.Sprintf("curve-%d-%d", n, p), n, p, 0, 0)
		c.points = append(c.points, curvePoint{parallel: p, start: f.start, stop: f.stop})
	}
	return c
}

// best is the point with the least of the measure.
func (c curve) best(of func(curvePoint) time.Duration) curvePoint {
	b := c.points[0]
	for _, p := range c.points[1:] {
		if of(p) < of(b) {
			b = p
		}
	}
	return b
}

func allStarted(p curvePoint) time.Duration { return pct(p.start, 100) }
func startP50(p curvePoint) time.Duration   { return pct(p.start, 50) }
func allStopped(p curvePoint) time.Duration { return pct(p.stop, 100) }

func (c curve) String(n int) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "floor curve, %d pods:", n)
	for _, p := range c.points {
		fmt.Fprintf(&sb, " parallel %d: all started %s, p50 %s, all stopped %s;", p.parallel, ms(allStarted(p)), ms(startP50(p)), ms(allStopped(p)))
	}
	all, p50 := c.best(allStarted), c.best(startP50)
	fmt.Fprintf(&sb, " fastest all started at parallel %d, lowest p50 at parallel %d\n", all.parallel, p50.parallel)
	return sb.String()
}

// againstBest prints the medians of nodelet's figures against the
// curve's best: all ready and p99 against the fastest all-started point,
// p50 against the lowest p50, all gone against the fastest all-stopped.
func (r *report) againstBest(sb *strings.Builder, order []int, byCount map[int][]result) {
	if len(r.curves) == 0 {
		return
	}
	fmt.Fprintf(sb, "medians against the best floor of the curve (first round):\n")
	for _, n := range order {
		c, ok := r.curves[n]
		if !ok {
			continue
		}
		all, p50, stop := c.best(allStarted), c.best(startP50), c.best(allStopped)
		med := func(f func(result) time.Duration) time.Duration {
			var v []time.Duration
			for _, x := range byCount[n] {
				v = append(v, f(x))
			}
			slices.Sort(v)
			return v[len(v)/2]
		}
		ready, start50, start99, gone := med(func(x result) time.Duration { return x.allReady }), med(func(x result) time.Duration { return pct(x.start, 50) }),
			med(func(x result) time.Duration { return pct(x.start, 99) }), med(func(x result) time.Duration { return x.allGone })
		fmt.Fprintf(sb, "%4d pods: all ready %s (fastest all started %s at parallel %d, ×%s); start p50 %s (lowest p50 %s at parallel %d, ×%s); "+
			"p99 %s (%s at parallel %d, ×%s); all gone %s (fastest all stopped %s at parallel %d, ×%s)\n", n,
			ms(ready), ms(allStarted(all)), all.parallel, ratio(ready, allStarted(all)),
			ms(start50), ms(startP50(p50)), p50.parallel, ratio(start50, startP50(p50)),
			ms(start99), ms(pct(all.start, 99)), all.parallel, ratio(start99, pct(all.start, 99)),
			ms(gone), ms(allStopped(stop)), stop.parallel, ratio(gone, allStopped(stop)))
	}
}
