package prober

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/pkg/observe/instrument"
)

// fakeExec answers ExecSync with the exit codes queued for it (0 when
// none is left) and counts calls.
type fakeExec struct {
	mu    sync.Mutex
	codes []int32
	calls int
	// errs is how many calls from now the runtime fails.
	errs int
}

func (f *fakeExec) ExecSync(ctx context.Context, in *runtimeapi.ExecSyncRequest, _ ...grpc.CallOption) (*runtimeapi.ExecSyncResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.errs > 0 {
		f.errs--
		return nil, grpcstatus.Error(codes.Unavailable, "runtime busy")
	}
	code := int32(0)
	if len(f.codes) > 0 {
		code, f.codes = f.codes[0], f.codes[1:]
	}
	return &runtimeapi.ExecSyncResponse{ExitCode: code, Stdout: []byte(fmt.Sprintf("exit %d", code))}, nil
}

func (f *fakeExec) queue(codes ...int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.codes = append(f.codes, codes...)
}

func (f *fakeExec) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// fakeStatus serves one pod status the test edits.
type fakeStatus struct {
	mu sync.Mutex
	s  v1.PodStatus
}

func (f *fakeStatus) GetPodStatus(types.UID) (v1.PodStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return *f.s.DeepCopy(), true
}

func (f *fakeStatus) run(id string, started time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.s = v1.PodStatus{Phase: v1.PodRunning, PodIP: "127.0.0.1", ContainerStatuses: []v1.ContainerStatus{{
		Name: "c", ContainerID: "fake://" + id, State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}},
	}}}
}

func (f *fakeStatus) stopContainer() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.s.ContainerStatuses[0].State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1}}
}

type fixture struct {
	m      *Manager
	exec   *fakeExec
	status *fakeStatus
	clock  *testingclock.FakeClock
	events *record.FakeRecorder
	pod    *v1.Pod
}

// newFixture returns a manager of one pod whose container "c" runs as
// instance c1; with changes the test adjusts the manager's options.
func newFixture(t *testing.T, c v1.Container, changes ...func(*Options)) *fixture {
	f := &fixture{exec: &fakeExec{}, status: &fakeStatus{}, clock: testingclock.NewFakeClock(time.Unix(1000, 0)), events: record.NewFakeRecorder(100)}
	o := Options{Exec: f.exec, Status: f.status, Recorder: f.events, Clock: f.clock, Jitter: func(time.Duration) time.Duration { return 0 }}
	for _, change := range changes {
		change(&o)
	}
	f.m = New(o)
	c.Name = "c"
	f.pod = &v1.Pod{}
	f.pod.UID, f.pod.Name, f.pod.Namespace = "uid", "p", "ns"
	f.pod.Spec.Containers = []v1.Container{c}
	f.status.run("c1", f.clock.Now())
	return f
}

func (f *fixture) worker(t Type) *worker {
	c := &f.pod.Spec.Containers[0]
	return newWorker(f.m, f.pod, c, t, probeOf(c, t))
}

func execSpec(delay, failures, successes int32) *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"check"}}},
		InitialDelaySeconds: delay, PeriodSeconds: 1, TimeoutSeconds: 1, FailureThreshold: failures, SuccessThreshold: successes}
}

// updates drains the published updates as "Type=Result" strings.
func (f *fixture) updates() []string {
	var out []string
	for {
		select {
		case u := <-f.m.Updates():
			out = append(out, fmt.Sprintf("%s=%s", u.Type, u.Result))
		default:
			return out
		}
	}
}

func TestReadinessThresholds(t *testing.T) {
	f := newFixture(t, v1.Container{ReadinessProbe: execSpec(0, 3, 2)})
	w := f.worker(Readiness)
	c := &f.pod.Spec.Containers[0]
	f.exec.queue(0, 0, 1, 1, 1)
	steps := []struct {
		ready   bool
		updates string
	}{
		{false, ""},                  // 1st success of 2 needed
		{true, "Readiness=Success"},  // 2nd: ready
		{true, ""},                   // 1st failure of 3
		{true, ""},                   // 2nd
		{false, "Readiness=Failure"}, // 3rd: not ready
	}
	for i, s := range steps {
		w.probeOnce()
		if got := f.m.Ready(c, "c1"); got != s.ready {
			t.Fatalf("step %d: ready %v, want %v", i, got, s.ready)
		}
		if got := strings.Join(f.updates(), ","); got != s.updates {
			t.Fatalf("step %d: updates %q, want %q", i, got, s.updates)
		}
	}
	if e := <-f.events.Events; !strings.Contains(e, "Unhealthy Readiness probe failed: exit 1") {
		t.Fatalf("event %q", e)
	}
	// A stopped container is not ready, at once.
	f.exec.queue(0, 0)
	w.probeOnce()
	w.probeOnce()
	f.updates()
	f.status.stopContainer()
	w.probeOnce()
	if f.m.Ready(c, "c1") || strings.Join(f.updates(), ",") != "Readiness=Failure" {
		t.Fatal("a stopped container stayed ready")
	}
}

func TestInitialDelay(t *testing.T) {
	f := newFixture(t, v1.Container{LivenessProbe: execSpec(10, 1, 1)})
	w := f.worker(Liveness)
	f.clock.Step(9 * time.Second)
	w.probeOnce()
	if f.exec.count() != 0 {
		t.Fatal("probed during the initial delay")
	}
	f.clock.Step(time.Second)
	w.probeOnce()
	if f.exec.count() != 1 {
		t.Fatal("not probed after the initial delay")
	}
}

func TestLivenessFailureHoldsUntilANewContainer(t *testing.T) {
	f := newFixture(t, v1.Container{LivenessProbe: execSpec(0, 1, 1)})
	w := f.worker(Liveness)
	if r, _ := f.m.Result(Liveness, "c1"); r != Unknown {
		t.Fatalf("result before any probe %s", r)
	}
	f.exec.queue(1)
	w.probeOnce()
	if !f.m.LivenessFailed("c1") || strings.Join(f.updates(), ",") != "Liveness=Failure" {
		t.Fatal("liveness failure not reported")
	}
	w.probeOnce()
	w.probeOnce()
	if f.exec.count() != 1 {
		t.Fatal("kept probing a container that is being restarted")
	}
	// The restarted container starts from a clean slate.
	f.status.run("c2", f.clock.Now())
	w.probeOnce()
	if f.exec.count() != 2 || f.m.LivenessFailed("c2") {
		t.Fatal("the new container was not probed afresh")
	}
	if _, ok := f.m.Result(Liveness, "c1"); ok {
		t.Fatal("the old container's result was kept")
	}
}

func TestStartupGatesTheOtherProbes(t *testing.T) {
	f := newFixture(t, v1.Container{StartupProbe: execSpec(0, 5, 1), LivenessProbe: execSpec(0, 1, 1), ReadinessProbe: execSpec(0, 1, 1)})
	startup, live, ready := f.worker(Startup), f.worker(Liveness), f.worker(Readiness)
	c := &f.pod.Spec.Containers[0]
	f.exec.queue(1) // not started on the first try
	startup.probeOnce()
	live.probeOnce()
	ready.probeOnce()
	if f.exec.count() != 1 || f.m.Started(c, "c1") || f.m.Ready(c, "c1") {
		t.Fatal("liveness or readiness probed before the container started")
	}
	startup.probeOnce() // passes
	if !f.m.Started(c, "c1") {
		t.Fatal("not started after the startup probe passed")
	}
	startup.probeOnce() // the startup probe is done
	live.probeOnce()
	ready.probeOnce()
	if f.exec.count() != 4 || !f.m.Ready(c, "c1") {
		t.Fatalf("%d probes after startup, ready %v", f.exec.count(), f.m.Ready(c, "c1"))
	}
}

func TestWorkersStopWithThePod(t *testing.T) {
	before := runtime.NumGoroutine()
	f := newFixture(t, v1.Container{LivenessProbe: execSpec(0, 1, 1), ReadinessProbe: execSpec(0, 1, 1), StartupProbe: execSpec(0, 1, 1)})
	f.m.AddPod(f.pod)
	f.m.AddPod(f.pod) // idempotent
	if f.m.Workers() != 3 {
		t.Fatalf("%d workers", f.m.Workers())
	}
	f.m.StopLivenessAndStartup(f.pod)
	if f.m.Workers() != 1 {
		t.Fatalf("%d workers after stopping liveness and startup", f.m.Workers())
	}
	f.m.CleanupPods(map[types.UID]bool{})
	if f.m.Workers() != 0 {
		t.Fatalf("%d workers after cleanup", f.m.Workers())
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, %d before", runtime.NumGoroutine(), before)
		}
		runtime.Gosched()
	}
}

func httpProbeFor(url string, path string) (*v1.Probe, *v1.Container) {
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(url, "http://"))
	n, _ := strconv.Atoi(port)
	c := &v1.Container{Name: "c", Ports: []v1.ContainerPort{{Name: "web", ContainerPort: int32(n)}}}
	return &v1.Probe{TimeoutSeconds: 1, ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{
		Host: host, Port: intstr.FromString("web"), Path: path, HTTPHeaders: []v1.HTTPHeader{{Name: "X-Probe", Value: "1"}},
	}}}, c
}

func TestHTTPProbe(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }))
	defer other.Close()
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.URL.Path+" "+r.Header.Get("User-Agent")+" "+r.Header.Get("X-Probe"))
		switch r.URL.Path {
		case "/ok":
		case "/moved":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/away":
			// Elsewhere: the container answered; that is enough.
			http.Redirect(w, r, strings.Replace(other.URL, "127.0.0.1", "localhost", 1)+"/x", http.StatusFound)
		default:
			w.WriteHeader(503)
			_, _ = fmt.Fprint(w, "not yet") // a failed write is the prober's to see
		}
	}))
	defer srv.Close()
	for path, want := range map[string]bool{"/ok": true, "/moved": true, "/away": true, "/down": false} {
		p, c := httpProbeFor(srv.URL, path)
		o := runProbe(context.Background(), nil, p, c, "", "")
		if o.ok != want {
			t.Errorf("%s: ok=%v (%s)", path, o.ok, o.output)
		}
		if !want && o.output != "HTTP probe failed with statuscode: 503" {
			t.Errorf("%s: output %q, want upstream's message without the response body", path, o.output)
		}
	}
	// A redirect to another host passes with upstream's warning (node e2e:
	// "should *not* be restarted with a non-local redirect http liveness
	// probe", which waits for the ProbeWarning event with this text).
	p, c := httpProbeFor(srv.URL, "/away")
	if o := runProbe(context.Background(), nil, p, c, "", ""); !o.ok ||
		!strings.HasPrefix(o.warning, "Probe terminated redirects, Response body: <a href=\"http://localhost:") {
		t.Errorf("redirect elsewhere: ok=%v warning %q", o.ok, o.warning)
	}
	if !strings.Contains(seen[0], "kube-probe/") || !strings.HasSuffix(seen[0], " 1") {
		t.Errorf("request %q: want kube-probe's User-Agent and the header", seen[0])
	}
}

func TestTCPProbe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	c := &v1.Container{Name: "c"}
	p := &v1.Probe{TimeoutSeconds: 1, ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt(port)}}}
	if o := runProbe(context.Background(), nil, p, c, "", "127.0.0.1"); !o.ok {
		t.Fatalf("open port: %s", o.output)
	}
	l.Close()
	if o := runProbe(context.Background(), nil, p, c, "", "127.0.0.1"); o.ok {
		t.Fatal("closed port passed")
	}
}

func TestGRPCProbe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	defer func() { srv.Stop(); testutil.Must(t, <-served) }()
	port := int32(l.Addr().(*net.TCPAddr).Port)
	p := &v1.Probe{TimeoutSeconds: 1, ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: port}}}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	if o := runProbe(context.Background(), nil, p, &v1.Container{}, "", "127.0.0.1"); !o.ok {
		t.Fatalf("serving: %s", o.output)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if o := runProbe(context.Background(), nil, p, &v1.Container{}, "", "127.0.0.1"); o.ok || !strings.Contains(o.output, "NOT_SERVING") {
		t.Fatalf("not serving: %v %s", o.ok, o.output)
	}
}

// The runtime times an exec probe's command: its DeadlineExceeded is a
// failed probe that says so, and the call itself is given more than the
// probe's timeout, so a slow exec set-up is not a timeout.
func TestExecProbeTimeout(t *testing.T) {
	var left time.Duration
	var asked int64
	timedOut := execFunc(func(ctx context.Context, in *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
		dl, _ := ctx.Deadline()
		left, asked = time.Until(dl), in.Timeout
		return nil, grpcstatus.Error(codes.DeadlineExceeded, "timeout 1s exceeded: context deadline exceeded")
	})
	p := &v1.Probe{TimeoutSeconds: 1, ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"sleep", "9"}}}}
	o := runProbe(context.Background(), timedOut, p, &v1.Container{}, "id", "")
	if o.ok || o.output != `command "sleep 9" timed out` {
		t.Fatalf("%v %q", o.ok, o.output)
	}
	if asked != 1 || left < time.Second+execGrace-time.Second {
		t.Fatalf("the runtime was asked for %d s and the call had %v left", asked, left)
	}
	// A slow set-up that ends within the grace passes.
	slowStart := execFunc(func(ctx context.Context, in *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
		select {
		case <-time.After(1200 * time.Millisecond):
			return &runtimeapi.ExecSyncResponse{}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	if o := runProbe(context.Background(), slowStart, p, &v1.Container{}, "id", ""); !o.ok {
		t.Fatalf("an exec answered after 1.2 s failed a 1 s probe: %q", o.output)
	}
}

type execFunc func(ctx context.Context, in *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error)

func (f execFunc) ExecSync(ctx context.Context, in *runtimeapi.ExecSyncRequest, _ ...grpc.CallOption) (*runtimeapi.ExecSyncResponse, error) {
	return f(ctx, in)
}

type stepLog []string

func (l *stepLog) Begin(_ *v1.Pod, kind instrument.Kind, name string) func(error, string) {
	return func(err error, detail string) {
		*l = append(*l, fmt.Sprintf("%s %s: %v (%s)", kind, name, err, detail))
	}
}

// Each change of a probe's result is a step of the pod's timeline; a
// result that stays is not.
func TestProbeChangesAreSteps(t *testing.T) {
	f := newFixture(t, v1.Container{ReadinessProbe: execSpec(0, 2, 1)})
	steps := &stepLog{}
	f.m.steps = steps
	w := f.worker(Readiness)
	f.exec.queue(0, 0, 1, 1)
	for range 4 {
		w.probeOnce()
	}
	want := "probe Readiness c: <nil> (1 in a row); probe Readiness c: failed 2 times: exit 1 (2 in a row)"
	if got := strings.Join(*steps, "; "); got != want {
		t.Fatalf("steps %q\nwant  %q", got, want)
	}
}

// blockingExec holds every exec probe in the "runtime" until its context
// ends, and counts calls made after the connection closed.
type blockingExec struct {
	entered chan struct{}
	closed  atomic.Bool
	late    atomic.Int64
}

func (b *blockingExec) ExecSync(ctx context.Context, _ *runtimeapi.ExecSyncRequest, _ ...grpc.CallOption) (*runtimeapi.ExecSyncResponse, error) {
	if b.closed.Load() {
		b.late.Add(1)
	}
	b.entered <- struct{}{}
	<-ctx.Done()
	return nil, ctx.Err()
}

// When nodelet stops, Run stops the workers and cancels the probes under
// way, returns only once they have, and records no result from a probe
// cut short; a pod added afterwards gets no worker.
func TestRunStopsProbesBeforeTheConnectionCloses(t *testing.T) {
	exec := &blockingExec{entered: make(chan struct{}, 1)}
	f := newFixture(t, v1.Container{LivenessProbe: execSpec(0, 1, 1)})
	f.m.exec = exec
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- f.m.Run(ctx) }()
	f.m.AddPod(f.pod)
	// The worker waits for its jittered start, then its probe runs and
	// blocks in the runtime call.
	testutil.WaitFor(t, "the worker's first tick", f.clock.HasWaiters)
	f.clock.Step(time.Second)
	select {
	case <-exec.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the probe did not start")
	}
	cancel()
	select {
	case <-ran:
	case <-time.After(stopWait + 5*time.Second):
		t.Fatal("Run did not return")
	}
	exec.closed.Store(true)
	for _, u := range f.updates() {
		if u == "Liveness=Failure" {
			t.Error("a probe cut short by the stop was published as a liveness failure")
		}
	}
	f.m.AddPod(f.pod)
	f.m.mu.Lock()
	workers := len(f.m.workers)
	f.m.mu.Unlock()
	if workers != 0 || exec.late.Load() != 0 {
		t.Errorf("after the stop: %d workers, %d runtime calls", workers, exec.late.Load())
	}
}

// An exec probe the runtime cannot take (Unavailable) is tried three
// times, then thrown away as upstream does: an event says so, and it
// counts neither for nor against the container, so a liveness threshold
// of 1 restarts nothing. The runtime's answer that the command cannot run
// in the container is a failure.
func TestErroredExecProbeIsThrownAway(t *testing.T) {
	f := newFixture(t, v1.Container{LivenessProbe: execSpec(0, 1, 1)})
	w := f.worker(Liveness)
	f.exec.mu.Lock()
	f.exec.errs = 3
	f.exec.mu.Unlock()
	w.probeOnce()
	if n := f.exec.count(); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
	if f.m.LivenessFailed("c1") || len(f.updates()) != 0 {
		t.Fatal("an errored probe failed the container")
	}
	if e := <-f.events.Events; !strings.Contains(e, "Liveness probe errored and resulted in unknown state: rpc error: code = Unavailable") {
		t.Fatalf("event %q", e)
	}
	// Two errors, then an answer: the answer counts.
	f.exec.mu.Lock()
	f.exec.errs = 2
	f.exec.mu.Unlock()
	f.exec.queue(1)
	w.probeOnce()
	if n := f.exec.count(); n != 6 || !f.m.LivenessFailed("c1") {
		t.Fatalf("after %d attempts: liveness failed %v, want 6 and true", n, f.m.LivenessFailed("c1"))
	}

	missing := execFunc(func(context.Context, *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
		return nil, grpcstatus.Error(codes.Unknown, `failed to exec in container: OCI runtime exec failed: exec: "nope": executable file not found in $PATH`)
	})
	if o := runProbe(context.Background(), missing, execSpec(0, 1, 1), &v1.Container{}, "id", ""); o.ok || o.errored {
		t.Fatalf("a command missing from the image: ok %v errored %v, want a failure", o.ok, o.errored)
	}
}

// A liveness probe redirected to another host passes, and says so with a
// ProbeWarning event (upstream's "Liveness probe warning: Probe terminated
// redirects, Response body: ..."), which the node e2e suite waits for.
func TestRedirectElsewhereIsAProbeWarning(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://0.0.0.0/", http.StatusFound)
	}))
	defer srv.Close()
	p, c := httpProbeFor(srv.URL, "/redirect")
	c.LivenessProbe = p
	f := newFixture(t, *c)
	w := f.worker(Liveness)
	w.probeOnce()
	if got := strings.Join(f.updates(), ","); strings.Contains(got, "Failure") {
		t.Fatalf("updates %q: a redirect elsewhere failed the probe", got)
	}
	const want = `Warning ProbeWarning Liveness probe warning: Probe terminated redirects, Response body: <a href="http://0.0.0.0/">Found</a>.`
	if e := <-f.events.Events; !strings.HasPrefix(e, want) {
		t.Fatalf("event %q, want %q", e, want)
	}
}
