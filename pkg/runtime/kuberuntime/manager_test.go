package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testutil"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/fakecri"
	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/images"
)

type testHelper struct{ dir string }

func (h testHelper) RunContainerOptions(ctx context.Context, pod *v1.Pod, c *v1.Container, podIPs []string) (*RunContainerOptions, error) {
	return &RunContainerOptions{Envs: []*runtimeapi.KeyValue{{Key: "GREETING", Value: []byte("hi")}}}, nil
}
func (h testHelper) PodContainerDir(uid types.UID, name string) string {
	return filepath.Join(h.dir, string(uid), name)
}
func (h testHelper) PodDNS(pod *v1.Pod) (*runtimeapi.DNSConfig, string, error) {
	return &runtimeapi.DNSConfig{Servers: []string{"10.0.0.10"}}, pod.Name, nil
}

type podState struct{ removable map[types.UID]bool }

func (s podState) IsPodTerminationRequested(types.UID) bool     { return false }
func (s podState) ShouldPodContentBeRemoved(uid types.UID) bool { return s.removable[uid] }

type fixture struct {
	m        *Manager
	rt       *fakecri.Runtime
	clock    *testingclock.FakeClock
	recorder *record.FakeRecorder
}

func newFixture(t *testing.T, imgs ...string) *fixture {
	clk := testingclock.NewFakeClock(t0)
	rt := fakecri.New(clk, append(imgs, "img")...)
	rec := record.NewFakeRecorder(1000)
	m := New(Options{Runtime: rt, Images: images.NewPuller(images.PullerOptions{Images: rt, Recorder: rec, Clock: clk}), Helper: testHelper{t.TempDir()}, Recorder: rec, Clock: clk, RuntimeName: "fake", PodLogsDir: t.TempDir()})
	return &fixture{m: m, rt: rt, clock: clk, recorder: rec}
}

func (f *fixture) status(t *testing.T, pod *v1.Pod) *container.PodStatus {
	t.Helper()
	s, err := f.m.GetPodStatus(context.Background(), pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (f *fixture) sync(t *testing.T, pod *v1.Pod) container.PodSyncResult {
	t.Helper()
	return f.m.SyncPod(context.Background(), pod, f.status(t, pod), nil, nil)
}

func calls(rt *fakecri.Runtime, prefix ...string) []string {
	var out []string
	for _, c := range rt.Calls() {
		for _, p := range prefix {
			if strings.HasPrefix(c, p+" ") {
				out = append(out, c)
			}
		}
	}
	return out
}

func TestSyncPodStartsInitContainersInOrderThenApps(t *testing.T) {
	f := newFixture(t)
	pod := newPod(v1.RestartPolicyAlways, "app1", "app2").init("i1", "i2").pod
	ctx := context.Background()

	// Sync 1: sandbox and the first init container only.
	if err := f.sync(t, pod).Error(); err != nil {
		t.Fatal(err)
	}
	if got := calls(f.rt, "RunPodSandbox", "StartContainer"); strings.Join(got, ",") != "RunPodSandbox p,StartContainer i1" {
		t.Fatalf("first sync: %v", got)
	}
	// i1 still running: nothing new starts.
	f.rt.ResetCalls()
	f.sync(t, pod)
	if got := calls(f.rt, "StartContainer"); len(got) != 0 {
		t.Fatalf("started %v while the init container runs", got)
	}
	running := runtimeapi.ContainerState_CONTAINER_RUNNING
	f.rt.Exit(f.rt.ContainerIDs("i1", &running)[0], 0)
	f.rt.ResetCalls()
	f.sync(t, pod)
	if got := calls(f.rt, "StartContainer"); strings.Join(got, ",") != "StartContainer i2" {
		t.Fatalf("after i1: %v", got)
	}
	f.rt.Exit(f.rt.ContainerIDs("i2", &running)[0], 0)
	f.rt.ResetCalls()
	f.sync(t, pod)
	if got := calls(f.rt, "StartContainer"); strings.Join(got, ",") != "StartContainer app1,StartContainer app2" {
		t.Fatalf("after init: %v", got)
	}
	s := f.status(t, pod)
	if len(s.IPs) != 1 || len(s.RunningContainers()) != 2 {
		t.Fatalf("status %v", s)
	}
	// A fully running pod needs no calls that change anything.
	f.rt.ResetCalls()
	f.m.SyncPod(ctx, pod, s, nil, nil)
	if got := calls(f.rt, "RunPodSandbox", "CreateContainer", "StopContainer", "StopPodSandbox"); len(got) != 0 {
		t.Fatalf("steady state made calls %v", got)
	}
}

func TestContainerConfigCarriesIdentityAndLogPath(t *testing.T) {
	f := newFixture(t)
	pod := newPod(v1.RestartPolicyAlways, "app").pod
	pod.Spec.Containers[0].Command = []string{"echo", "$(GREETING)", "$$(GREETING)", "$(MISSING)"}
	pod.Spec.Containers[0].TerminationMessagePath = "/dev/termination-log"
	f.sync(t, pod)
	cfg := f.rt.ContainerConfig(f.rt.ContainerIDs("app", nil)[0])
	if got := strings.Join(cfg.Command, " "); got != "echo hi $(GREETING) $(MISSING)" {
		t.Errorf("command = %q", got)
	}
	for k, want := range map[string]string{
		"io.kubernetes.pod.name": "p", "io.kubernetes.pod.namespace": "ns", "io.kubernetes.pod.uid": "uid",
		"io.kubernetes.container.name": "app",
	} {
		if cfg.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, cfg.Labels[k], want)
		}
	}
	if cfg.LogPath != "app/0.log" {
		t.Errorf("log path %q", cfg.LogPath)
	}
	var term *runtimeapi.Mount
	for _, m := range cfg.Mounts {
		if m.ContainerPath == "/dev/termination-log" {
			term = m
		}
	}
	if term == nil {
		t.Fatal("no termination message mount")
	}
	if fi, err := os.Stat(term.HostPath); err != nil || fi.Mode().Perm() != 0o666 {
		t.Errorf("termination message file %v %v", fi, err)
	}
}

func TestRestartCountAndCrashLoopBackOff(t *testing.T) {
	f := newFixture(t)
	pod := newPod(v1.RestartPolicyAlways, "app").pod
	f.sync(t, pod)
	running := runtimeapi.ContainerState_CONTAINER_RUNNING

	// First failure: restarted at once with restart count 1.
	f.rt.Exit(f.rt.ContainerIDs("app", &running)[0], 1)
	if err := f.sync(t, pod).Error(); err != nil {
		t.Fatal(err)
	}
	id := f.rt.ContainerIDs("app", &running)[0]
	if got := f.rt.ContainerConfig(id).Annotations["io.kubernetes.container.restartCount"]; got != "1" {
		t.Fatalf("restart count %s", got)
	}
	// Second failure right away: back off 10 s.
	f.rt.Exit(id, 1)
	res := f.sync(t, pod)
	if !res.OnlyBackOff() || res.Error() == nil || !errors.Is(res.Results[len(res.Results)-1].Err, container.ErrCrashLoopBackOff) {
		t.Fatalf("want a back-off, got %v", res.Error())
	}
	if res.RetryAfter() != 10*time.Second {
		t.Fatalf("retry after %v, want 10s", res.RetryAfter())
	}
	f.clock.Step(9 * time.Second)
	if res := f.sync(t, pod); res.Error() == nil || res.RetryAfter() != time.Second {
		t.Fatalf("9 s later: %v, retry after %v (want 1s left)", res.Error(), res.RetryAfter())
	}
	f.clock.Step(2 * time.Second)
	if err := f.sync(t, pod).Error(); err != nil {
		t.Fatalf("not restarted after 10 s: %v", err)
	}
	// Third failure: the delay doubles.
	f.rt.Exit(f.rt.ContainerIDs("app", &running)[0], 1)
	f.clock.Step(11 * time.Second)
	if res := f.sync(t, pod); res.Error() == nil {
		t.Fatal("restarted after 11 s, want 20 s")
	}
	f.clock.Step(10 * time.Second)
	if err := f.sync(t, pod).Error(); err != nil {
		t.Fatalf("not restarted after 21 s: %v", err)
	}
}

// crashLoopBackOff.maxContainerRestartPeriod below 10 s is the first
// delay and every one after it, as upstream's KubeletCrashLoopBackOffMax.
func TestCrashLoopBackOffCapped(t *testing.T) {
	f := newFixture(t)
	f.m.crashBackOff = newCrashBackOff(2*time.Second, f.clock)
	pod := newPod(v1.RestartPolicyAlways, "app").pod
	f.sync(t, pod)
	running := runtimeapi.ContainerState_CONTAINER_RUNNING
	f.rt.Exit(f.rt.ContainerIDs("app", &running)[0], 1)
	if err := f.sync(t, pod).Error(); err != nil {
		t.Fatal(err) // the first failure restarts at once
	}
	for i := range 4 {
		f.rt.Exit(f.rt.ContainerIDs("app", &running)[0], 1)
		if res := f.sync(t, pod); !res.OnlyBackOff() || res.RetryAfter() != 2*time.Second {
			t.Fatalf("failure %d: %v, retry after %v, want 2s", i+2, res.Error(), res.RetryAfter())
		}
		f.clock.Step(2 * time.Second)
		if err := f.sync(t, pod).Error(); err != nil {
			t.Fatalf("failure %d: not restarted after 2 s: %v", i+2, err)
		}
	}
}

func TestKillPodStopsContainersThenSandbox(t *testing.T) {
	f := newFixture(t)
	pod := newPod(v1.RestartPolicyAlways, "a", "b").pod
	grace := int64(7)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	f.sync(t, pod)
	f.rt.ResetCalls()
	s := f.status(t, pod)
	if err := f.m.KillPod(context.Background(), pod, s.ToRunningPod(), nil); err != nil {
		t.Fatal(err)
	}
	got := calls(f.rt, "StopContainer", "StopPodSandbox")
	if len(got) != 3 || !strings.HasPrefix(got[2], "StopPodSandbox") {
		t.Fatalf("calls %v: want both containers stopped, then the sandbox", got)
	}
	for _, c := range got[:2] {
		if !strings.HasSuffix(c, "timeout=7") {
			t.Errorf("%s: want the pod's grace period", c)
		}
	}
	// An override shortens it, but never below two seconds (upstream's
	// minimum).
	f2 := newFixture(t)
	f2.sync(t, pod)
	zero := int64(0)
	f2.rt.ResetCalls()
	testutil.Must(t, f2.m.KillPod(context.Background(), pod, f2.status(t, pod).ToRunningPod(), &zero))
	for _, c := range calls(f2.rt, "StopContainer") {
		if !strings.HasSuffix(c, "timeout=2") {
			t.Errorf("%s: want timeout=2", c)
		}
	}
}

func TestKillPodOfAnOrphanUsesAnnotations(t *testing.T) {
	f := newFixture(t)
	pod := newPod(v1.RestartPolicyAlways, "a").pod
	grace := int64(4)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	f.sync(t, pod)
	f.rt.ResetCalls()
	running := f.status(t, pod).ToRunningPod()
	if err := f.m.KillPod(context.Background(), running.ToAPIPod(), running, nil); err != nil {
		t.Fatal(err)
	}
	if got := calls(f.rt, "StopContainer"); len(got) != 1 || !strings.HasSuffix(got[0], "timeout=4") {
		t.Fatalf("calls %v: want the grace period from the container's annotation", got)
	}
}

func TestFailedKillLeavesTheSandboxRunning(t *testing.T) {
	f := newFixture(t)
	pod := newPod(v1.RestartPolicyAlways, "a").pod
	f.sync(t, pod)
	f.rt.FailNext("StopContainer", errors.New("boom"))
	err := f.m.KillPod(context.Background(), pod, f.status(t, pod).ToRunningPod(), nil)
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("err = %v", err)
	}
	if got := calls(f.rt, "StopPodSandbox"); len(got) != 0 {
		t.Fatalf("sandbox stopped under a live container: %v", got)
	}
}

func TestSandboxFailureIsReported(t *testing.T) {
	f := newFixture(t)
	pod := newPod(v1.RestartPolicyAlways, "a").pod
	f.rt.FailNext("RunPodSandbox", errors.New("cni exploded"))
	res := f.sync(t, pod)
	if res.Error() == nil || res.OnlyBackOff() || !errors.Is(res.Results[len(res.Results)-1].Err, container.ErrCreatePodSandbox) {
		t.Fatalf("result %v", res.Error())
	}
	if ev := drain(f.recorder); !strings.Contains(ev, "FailedCreatePodSandBox") || !strings.Contains(ev, "cni exploded") {
		t.Fatalf("events %q", ev)
	}
}

func drain(r *record.FakeRecorder) string {
	var b strings.Builder
	for {
		select {
		case e := <-r.Events:
			b.WriteString(e + "\n")
		default:
			return b.String()
		}
	}
}

func TestGarbageCollect(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	live := newPod(v1.RestartPolicyAlways, "a").pod
	gone := newPod(v1.RestartPolicyAlways, "b").pod
	gone.Name, gone.UID = "gone", "gone-uid"
	f.sync(t, live)
	f.sync(t, gone)
	running := runtimeapi.ContainerState_CONTAINER_RUNNING
	// Three dead instances of "a": the newest two stay (one is its status).
	for i := 0; i < 3; i++ {
		f.rt.Exit(f.rt.ContainerIDs("a", &running)[0], 1)
		f.clock.Step(time.Hour) // past any back-off
		f.sync(t, live)
	}
	testutil.Must(t, f.m.KillPod(ctx, gone, f.status(t, gone).ToRunningPod(), nil))

	if err := f.m.ContainerGC().GarbageCollect(ctx, GCPolicy{MaxPerPodContainer: 1}, podState{removable: map[types.UID]bool{"gone-uid": true}}); err != nil {
		t.Fatal(err)
	}
	if got := len(f.rt.ContainerIDs("a", nil)); got != 2 {
		t.Errorf("live pod keeps %d instances of a, want 2 (the running one and the newest dead one)", got)
	}
	if got := len(f.rt.ContainerIDs("b", nil)); got != 0 {
		t.Errorf("finished pod keeps %d containers", got)
	}
	if sbs, _ := f.m.GetPodStatus(ctx, gone.UID, gone.Name, gone.Namespace); len(sbs.SandboxStatuses) != 0 {
		t.Errorf("finished pod keeps its sandbox")
	}
}

// Housekeeping collects from the last relist's view, which may be a
// second old: what changed since must survive, and nothing is listed.
func TestCollectFromAnOlderView(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	pod := newPod(v1.RestartPolicyAlways, "a").pod
	f.sync(t, pod)
	running := runtimeapi.ContainerState_CONTAINER_RUNNING
	restart := func() {
		f.rt.Exit(f.rt.ContainerIDs("a", &running)[0], 1)
		f.clock.Step(time.Hour) // past any back-off
		f.sync(t, pod)
	}
	restart()
	restart() // instances 1 and 2 dead, 3 running
	view, err := f.m.GetPods(ctx)
	testutil.Must(t, err)
	third := f.rt.ContainerIDs("a", &running)[0]
	restart() // 3 dead since the view, 4 started since
	fourth := f.rt.ContainerIDs("a", &running)[0]
	before := len(f.rt.Calls())

	testutil.Must(t, f.m.ContainerGC().Collect(ctx, view, GCPolicy{MaxPerPodContainer: 0}, podState{}))
	got := f.rt.ContainerIDs("a", nil)
	sort.Strings(got)
	want := []string{third, fourth}
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("containers left %v, want %v (the one running in the view, and the one started since)", got, want)
	}
	removed := calls(f.rt, "RemoveContainer")
	if len(removed) != 2 {
		t.Errorf("removals %v, want instances 1 and 2", removed)
	}
	for _, c := range f.rt.Calls()[before:] {
		if strings.HasPrefix(c, "List") {
			t.Errorf("Collect listed the runtime: %s", c)
		}
	}
}

func TestExpand(t *testing.T) {
	env := EnvMapping(map[string]string{"A": "1", "B": "two"})
	for in, want := range map[string]string{
		"plain": "plain", "$(A)": "1", "x$(A)y$(B)z": "x1ytwoz", "$$(A)": "$(A)", "$(C)": "$(C)",
		"$(A": "$(A", "$A": "$A", "$": "$", "$$": "$", "$()": "$()", "a$$b": "a$b",
	} {
		if got := Expand(in, env); got != want {
			t.Errorf("Expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTailLogMessage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	log := "2026-01-01T00:00:00Z stdout F one\n2026-01-01T00:00:01Z stderr P tw\n2026-01-01T00:00:01Z stderr F o\n2026-01-01T00:00:02Z stdout F three\n"
	testutil.Must(t, os.WriteFile(path, []byte(log), 0o644))
	got, err := tailLogMessage(path, 2, 1024)
	if err != nil || got != "two\nthree\n" {
		t.Fatalf("got %q, %v", got, err)
	}
	got, _ = tailLogMessage(path, 80, 6)
	if got != "three\n" {
		t.Fatalf("byte limit: got %q", got)
	}

	// echo -n DONE; false: the last output, with no newline, is a
	// partial line, and the message's end.
	partial := filepath.Join(t.TempDir(), "0.log")
	testutil.Must(t, os.WriteFile(partial, []byte(log+"2026-01-01T00:00:03Z stdout P DONE\n"), 0o644))
	for lines, want := range map[int]string{80: "one\ntwo\nthree\nDONE", 2: "three\nDONE", 1: "DONE"} {
		if got, err := tailLogMessage(partial, lines, 1024); err != nil || got != want {
			t.Errorf("%d lines, with a partial last one: got %q, %v; want %q", lines, got, err, want)
		}
	}
}

func TestDefaultPullPolicyUsedForInvalidImage(t *testing.T) {
	// Images with whitespace are rejected before any runtime call.
	f := newFixture(t)
	pod := newPod(v1.RestartPolicyAlways, "a").pod
	pod.Spec.Containers[0].Image = "bad image"
	res := f.sync(t, pod)
	if err := res.Error(); err == nil || !strings.Contains(err.Error(), "InvalidImageName") {
		t.Fatalf("err %v", err)
	}
	if len(calls(f.rt, "CreateContainer")) != 0 {
		t.Fatal("created a container with an invalid image")
	}
}

type failingMountHelper struct{ testHelper }

func (failingMountHelper) RunContainerOptions(ctx context.Context, pod *v1.Pod, c *v1.Container, podIPs []string) (*RunContainerOptions, error) {
	return nil, fmt.Errorf("%w: volume %q: configMap %q not found", ErrMountVolume, "cfg", "settings")
}

// A volume that cannot be set up fails the container with
// CreateContainerConfigError and reports FailedMount on the pod.
func TestVolumeFailureIsAFailedMountEvent(t *testing.T) {
	f := newFixture(t)
	f.m.helper = failingMountHelper{testHelper{t.TempDir()}}
	pod := newPod(v1.RestartPolicyAlways, "app").pod
	result := f.sync(t, pod)
	if !errors.Is(result.Error(), container.ErrCreateContainerConfig) {
		t.Fatalf("sync error %v, want CreateContainerConfigError", result.Error())
	}
	var events []string
	for len(f.recorder.Events) > 0 {
		events = append(events, <-f.recorder.Events)
	}
	if !slices.ContainsFunc(events, func(e string) bool {
		return strings.HasPrefix(e, "Warning FailedMount MountVolume.SetUp failed: volume \"cfg\"")
	}) {
		t.Fatalf("events %q: no FailedMount", events)
	}
}

// A recursive read-only mount the runtime cannot make fails the container
// with upstream's message, which upstream's "should reject recursive
// read-only mounts" [NodeConformance] spec looks for in its waiting state.
func TestUnsupportedRecursiveReadOnlyMount(t *testing.T) {
	f := newFixture(t)
	pod := newPod(v1.RestartPolicyNever, "busybox").pod
	enabled := v1.RecursiveReadOnlyEnabled
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "mnt", MountPath: "/mnt", ReadOnly: true, RecursiveReadOnly: &enabled}}
	pod.Spec.Volumes = []v1.Volume{{Name: "mnt", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	result := f.sync(t, pod)
	const want = `failed to resolve recursive read-only mode: volume "mnt" requested recursive read-only mode, but it is not supported by the runtime`
	if !errors.Is(result.Error(), container.ErrCreateContainerConfig) || !strings.Contains(result.Error().Error(), want) {
		t.Fatalf("sync error %v, want CreateContainerConfigError with %q", result.Error(), want)
	}
}

// A sidecar in crash-loop back-off does not hold back the app: the app
// container that crashed beside it is restarted at once.
func TestSidecarBackOffDoesNotBlockTheApp(t *testing.T) {
	f := newFixture(t)
	pod := newPod(v1.RestartPolicyAlways, "app").sidecar("proxy").pod
	running := runtimeapi.ContainerState_CONTAINER_RUNNING
	f.sync(t, pod) // sandbox and the sidecar
	f.sync(t, pod) // the app
	if n := len(f.rt.ContainerIDs("app", &running)); n != 1 {
		t.Fatalf("app running %d times", n)
	}
	// The sidecar crashes twice: restarted once, then backing off.
	f.rt.Exit(f.rt.ContainerIDs("proxy", &running)[0], 1)
	f.sync(t, pod)
	f.rt.Exit(f.rt.ContainerIDs("proxy", &running)[0], 1)
	// Now the app crashes too.
	f.rt.Exit(f.rt.ContainerIDs("app", &running)[0], 1)
	f.rt.ResetCalls()
	res := f.sync(t, pod)
	if !errors.Is(res.Error(), container.ErrCrashLoopBackOff) {
		t.Fatalf("sidecar not backing off: %v", res.Error())
	}
	if got := calls(f.rt, "StartContainer"); strings.Join(got, ",") != "StartContainer app" {
		t.Fatalf("started %v, want the app restarted while the sidecar backs off", got)
	}
}

// The crash-loop back-off belongs to a container's spec: a new image
// starts at once. (A static pod's new command is a new pod, with a new UID.)
func TestChangedSpecEscapesTheBackOff(t *testing.T) {
	f := newFixture(t, "img:fixed")
	pod := newPod(v1.RestartPolicyAlways, "app").pod
	running := runtimeapi.ContainerState_CONTAINER_RUNNING
	f.sync(t, pod)
	f.rt.Exit(f.rt.ContainerIDs("app", &running)[0], 1)
	f.sync(t, pod)
	f.rt.Exit(f.rt.ContainerIDs("app", &running)[0], 1)
	if res := f.sync(t, pod); !errors.Is(res.Error(), container.ErrCrashLoopBackOff) {
		t.Fatalf("want a back-off first, got %v", res.Error())
	}
	fixed := pod.DeepCopy()
	fixed.Spec.Containers[0].Image = "img:fixed"
	f.rt.ResetCalls()
	if err := f.sync(t, fixed).Error(); err != nil {
		t.Fatalf("changed container still backing off: %v", err)
	}
	if got := calls(f.rt, "StartContainer"); len(got) != 1 {
		t.Fatalf("started %v", got)
	}
}

// A pod's containers all stop at once, preStop hooks first (a sidecar's
// too: upstream's "should call sidecar container PreStop hook
// simultaneously"), but each sidecar gets SIGTERM only after the app
// containers and the sidecar declared after it have stopped.
func TestKillPodStopsSidecarsLastInReverseOrder(t *testing.T) {
	f := newFixture(t)
	pod := newPod(v1.RestartPolicyAlways, "a", "b").sidecar("s1").sidecar("s2").pod
	grace := int64(10)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	pod.Spec.InitContainers[1].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"drain"}}}}
	for i := 0; i < 3; i++ {
		f.sync(t, pod)
	}
	if n := len(f.status(t, pod).RunningContainers()); n != 4 {
		t.Fatalf("%d containers running, want 4", n)
	}
	// The app's stop waits until s2's preStop hook has run: the hook does
	// not wait for the app.
	drained := make(chan struct{})
	f.rt.OnStop = func(id string, _ int64) {
		if f.rt.ContainerConfig(id).GetMetadata().GetName() == "a" {
			select {
			case <-drained:
			case <-time.After(10 * time.Second):
				t.Error("s2's preStop hook did not run while the app was stopping")
			}
		}
	}
	f.rt.ExecResult = func(_ string, cmd []string) (*runtimeapi.ExecSyncResponse, error) {
		if len(cmd) == 1 && cmd[0] == "drain" {
			close(drained)
		}
		return &runtimeapi.ExecSyncResponse{}, nil
	}
	f.rt.ResetCalls()
	if err := f.m.KillPod(context.Background(), pod, f.status(t, pod).ToRunningPod(), nil); err != nil {
		t.Fatal(err)
	}
	got := calls(f.rt, "StopContainer", "StopPodSandbox")
	if len(got) != 5 {
		t.Fatalf("calls %v", got)
	}
	apps := []string{got[0], got[1]}
	slices.Sort(apps)
	want := []string{"StopContainer a timeout=10", "StopContainer b timeout=10", "StopContainer s2 timeout=10", "StopContainer s1 timeout=10"}
	if !slices.Equal(append(apps, got[2:4]...), want) || !strings.HasPrefix(got[4], "StopPodSandbox") {
		t.Errorf("stops %v, want %v and then the sandbox", got, want)
	}
}

// A pod torn down while its image is pulled did not fail: no Failed
// event, no ErrImagePull for its status, and no back-off for the image.
func TestCancelledPullIsNoFailure(t *testing.T) {
	f := newFixture(t)
	pod := newPod(v1.RestartPolicyAlways, "app").pod
	pod.Spec.Containers[0].Image = "remote"
	ctx, cancel := context.WithCancel(context.Background())
	f.rt.OnPull = func(context.Context, string) error {
		cancel() // the pod is deleted mid-pull
		return context.Canceled
	}
	res := f.m.SyncPod(ctx, pod, f.status(t, pod), nil, nil)
	if !errors.Is(res.Error(), context.Canceled) {
		t.Fatalf("result %v, want the cancellation", res.Error())
	}
	for _, r := range res.Results {
		if r.Action == container.StartContainer {
			t.Errorf("start of %s recorded as %v (%s)", r.Target, r.Err, r.Message)
		}
	}
	for done := false; !done; {
		select {
		case e := <-f.recorder.Events:
			if strings.HasPrefix(e, "Warning") {
				t.Errorf("event %q", e)
			}
		default:
			done = true
		}
	}
	// The image is pulled at once by the next pod that wants it.
	f.rt.OnPull = nil
	if err := f.sync(t, newPod(v1.RestartPolicyAlways, "app").pod).Error(); err != nil {
		t.Fatal(err)
	}
	other := newPod(v1.RestartPolicyAlways, "x").pod
	other.UID, other.Spec.Containers[0].Image = "uid2", "remote"
	if err := f.sync(t, other).Error(); err != nil {
		t.Fatalf("image backing off after a cancelled pull: %v", err)
	}
}

// TestNoCPUQuotaLeavesLimitsUnenforced: with cpuCFSQuota false a CPU
// limit gives the container no CFS quota; its shares stay.
func TestNoCPUQuotaLeavesLimitsUnenforced(t *testing.T) {
	for _, noQuota := range []bool{false, true} {
		clk := testingclock.NewFakeClock(t0)
		rt := fakecri.New(clk, "img")
		m := New(Options{Runtime: rt, Images: images.NewPuller(images.PullerOptions{Images: rt, Clock: clk}), Helper: testHelper{t.TempDir()}, Clock: clk, PodLogsDir: t.TempDir(), NoCPUQuota: noQuota})
		f := &fixture{m: m, rt: rt, clock: clk}
		pod := newPod(v1.RestartPolicyAlways, "a").pod
		pod.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m")}
		if err := f.sync(t, pod).Error(); err != nil {
			t.Fatal(err)
		}
		st := f.status(t, pod)
		r := rt.ContainerConfig(st.ContainerStatuses[0].ID.ID).GetLinux().GetResources()
		if wantQuota := map[bool]int64{false: 50000, true: 0}[noQuota]; r.CpuQuota != wantQuota || r.CpuShares != 512 {
			t.Errorf("NoCPUQuota=%t: quota %d shares %d, want quota %d and 512 shares", noQuota, r.CpuQuota, r.CpuShares, wantQuota)
		}
	}
}

// stepLog records the steps the runtime manager reports.
type stepLog struct {
	mu    sync.Mutex
	steps []string
}

func (l *stepLog) Begin(pod *v1.Pod, kind instrument.Kind, name string) func(error, string) {
	return func(err error, detail string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.steps = append(l.steps, fmt.Sprintf("%s %s: %v %s", kind, name, err, detail))
	}
}

// Starting and stopping a pod reports its steps for the timeline: the
// sandbox, each image (present, with its size) and container, and each
// kill with its grace period.
func TestStepsAreReported(t *testing.T) {
	f := newFixture(t)
	steps := &stepLog{}
	f.m.steps, f.m.resizer.steps = steps, steps
	pod := newPod(v1.RestartPolicyAlways, "a").pod
	pod.Spec.TerminationGracePeriodSeconds = new(int64(7))
	f.sync(t, pod)
	testutil.Must(t, f.m.KillPod(context.Background(), pod, f.status(t, pod).ToRunningPod(), nil))
	got := strings.Join(steps.steps, "\n")
	for _, want := range []string{"sandbox attempt 0: <nil> sb", "image img: <nil> ", "container a: <nil> created and started ",
		"kill a: <nil> grace period 7s"} {
		if !strings.Contains(got, want) {
			t.Fatalf("steps:\n%s\nlack %q", got, want)
		}
	}
	if !strings.Contains(got, "bytes") {
		t.Fatalf("no image size in %s", got)
	}
}

func TestSandboxChangePurgesInitContainers(t *testing.T) {
	f := newFixture(t)
	pod := newPod(v1.RestartPolicyAlways, "app").init("i1").pod
	f.sync(t, pod)
	running := runtimeapi.ContainerState_CONTAINER_RUNNING
	oldInit := f.rt.ContainerIDs("i1", &running)[0]
	f.rt.Exit(oldInit, 0)
	f.sync(t, pod)
	st, err := f.rt.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: oldInit})
	testutil.Must(t, err)
	logPath := st.GetStatus().GetLogPath()
	testutil.Must(t, os.MkdirAll(filepath.Dir(logPath), 0o755))
	testutil.Must(t, os.WriteFile(logPath, []byte("init ran\n"), 0o644))

	// The pause container dies: the sandbox is replaced.
	sandboxes := f.status(t, pod).SandboxStatuses
	f.rt.SetSandboxState(sandboxes[0].ID, false)
	f.rt.ResetCalls()
	f.sync(t, pod)

	got := calls(f.rt, "RemoveContainer", "RunPodSandbox", "StartContainer")
	if strings.Join(got, ",") != "RemoveContainer i1,RunPodSandbox p,StartContainer i1" {
		t.Fatalf("calls %v: want the old init container removed before the new sandbox, then init run again", got)
	}
	if ids := f.rt.ContainerIDs("i1", nil); len(ids) != 1 || ids[0] == oldInit {
		t.Fatalf("i1 instances %v: want only the new one", ids)
	}
	if _, err := os.Stat(logPath); !os.IsNotExist(err) {
		t.Fatalf("old init container's log: %v, want it removed", err)
	}
	// The app container waits for init in the new sandbox.
	if s := f.status(t, pod); len(s.RunningContainers()) != 1 || s.RunningContainers()[0].Name != "i1" {
		t.Fatalf("running %v: want only the new init container", s.RunningContainers())
	}
}

// rendezvous lets each of the two lists through only once the other has
// begun: a GetPodStatus that reads its halves one after the other fails.
type rendezvous struct {
	*fakecri.Runtime
	sandboxes, containers chan struct{}
}

func (r *rendezvous) meet(mine, theirs chan struct{}) error {
	close(mine)
	select {
	case <-theirs:
		return nil
	case <-time.After(10 * time.Second):
		return errors.New("the other half was not read meanwhile")
	}
}

func (r *rendezvous) ListPodSandbox(ctx context.Context, in *runtimeapi.ListPodSandboxRequest, o ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error) {
	if err := r.meet(r.sandboxes, r.containers); err != nil {
		return nil, err
	}
	return r.Runtime.ListPodSandbox(ctx, in, o...)
}

func (r *rendezvous) ListContainers(ctx context.Context, in *runtimeapi.ListContainersRequest, o ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
	if err := r.meet(r.containers, r.sandboxes); err != nil {
		return nil, err
	}
	return r.Runtime.ListContainers(ctx, in, o...)
}

// TestGetPodStatusReadsSandboxesAndContainersSideBySide: the read after a
// start is on the way to the Running status, so its two halves overlap.
func TestGetPodStatusReadsSandboxesAndContainersSideBySide(t *testing.T) {
	f := newFixture(t)
	pod := newPod(v1.RestartPolicyAlways, "app").pod
	if err := f.sync(t, pod).Error(); err != nil {
		t.Fatal(err)
	}
	rt := &rendezvous{Runtime: f.rt, sandboxes: make(chan struct{}), containers: make(chan struct{})}
	m := New(Options{Runtime: rt, Images: images.NewPuller(images.PullerOptions{Images: f.rt, Recorder: f.recorder, Clock: f.clock}), Helper: testHelper{t.TempDir()}, Recorder: f.recorder, Clock: f.clock, RuntimeName: "fake", PodLogsDir: t.TempDir()})
	s, err := m.GetPodStatus(context.Background(), pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.SandboxStatuses) != 1 || !s.SandboxStatuses[0].Ready || len(s.ContainerStatuses) != 1 || len(s.IPs) == 0 {
		t.Fatalf("status %+v", s)
	}
	// A failing half fails the read, its cause kept.
	boom := errors.New("boom")
	f.rt.FailNext("ListContainers", boom)
	if _, err := f.m.GetPodStatus(context.Background(), pod.UID, pod.Name, pod.Namespace); !errors.Is(err, boom) {
		t.Fatalf("err %v, want %v", err, boom)
	}
}

// A pod torn down while its container starts does not cancel the start
// call: containerd 2.x keeps the task of a start cancelled mid-call, and
// it can never be removed. The start runs to its end, and the container
// is then the teardown's to stop.
func TestStartIsNotCancelledWithThePodSync(t *testing.T) {
	f := newFixture(t)
	pod := newPod(v1.RestartPolicyAlways, "app").pod
	ctx, cancel := context.WithCancel(context.Background())
	var callErr error
	calls := 0
	f.rt.OnStart = func(callCtx context.Context, _ string) {
		calls++
		cancel() // the pod is deleted mid-start
		callErr = callCtx.Err()
	}
	f.m.SyncPod(ctx, pod, f.status(t, pod), nil, nil)
	if calls != 1 {
		t.Fatalf("StartContainer called %d times, want 1", calls)
	}
	if callErr != nil {
		t.Errorf("the start call's context: %v, want it live", callErr)
	}
	if got := f.rt.ContainerIDs("app", runtimeapi.ContainerState_CONTAINER_RUNNING.Enum()); len(got) != 1 {
		t.Errorf("running containers %v, want the one started", got)
	}
}

// A preStop exec hook has no deadline of its own: it runs on until its
// container is stopped. The kill waits for it the grace period only, then
// stops the container with the two seconds it is still owed, while the
// hook still runs (upstream's "should terminate sidecars simultaneously
// if prestop doesn't exit": the hook lives 32 s of a 30 s grace period).
func TestPreStopHookOutlivesTheGracePeriod(t *testing.T) {
	f := newFixture(t)
	pod := newPod(v1.RestartPolicyAlways, "app").pod
	grace := int64(30)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"loop"}}}}
	f.sync(t, pod)
	running, stopped := make(chan struct{}), make(chan struct{})
	var hookTimeout int64 = -1
	var hookDeadline bool
	f.rt.OnExec = func(ctx context.Context, in *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
		hookTimeout = in.Timeout
		_, hookDeadline = ctx.Deadline()
		close(running)
		select {
		case <-stopped:
			return nil, errors.New("container stopped")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	hookRan := false
	f.rt.OnStop = func(string, int64) {
		select {
		case <-running:
			hookRan = true
		default:
		}
		close(stopped)
	}
	f.rt.ResetCalls()
	killed := make(chan error, 1)
	go func() { killed <- f.m.KillPod(context.Background(), pod, f.status(t, pod).ToRunningPod(), nil) }()
	<-running
	// The kill waits on the grace period's timer: step past it.
	deadline := time.Now().Add(10 * time.Second)
	for !f.clock.HasWaiters() && time.Now().Before(deadline) {
		goruntime.Gosched()
	}
	f.clock.Step(30 * time.Second)
	if err := <-killed; err != nil {
		t.Fatal(err)
	}
	if hookTimeout != 0 || hookDeadline {
		t.Errorf("the hook ran with timeout %d and a deadline %v, want neither", hookTimeout, hookDeadline)
	}
	if !hookRan {
		t.Error("the container was stopped before its hook ran")
	}
	if got := calls(f.rt, "StopContainer"); !slices.Equal(got, []string{"StopContainer app timeout=2"}) {
		t.Errorf("stops %v, want the app stopped with the 2 s it is still owed", got)
	}
}
