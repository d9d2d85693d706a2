package kubelet

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/pkg/node/health"
	"github.com/nodelet/nodelet/pkg/node/nodestatus"
	"github.com/nodelet/nodelet/pkg/pods/admission"
	"github.com/nodelet/nodelet/pkg/pods/allocation"
	"github.com/nodelet/nodelet/pkg/pods/pleg"
	"github.com/nodelet/nodelet/pkg/pods/podsources"
	"github.com/nodelet/nodelet/pkg/pods/podstatus"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/pods/podworkers"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
)

// fakeWorkers records what the core asks of the pod workers.
type fakeWorkers struct {
	mu         sync.Mutex
	updates    []string
	known      map[types.UID]podworkers.PodWorkerSync
	terminated map[types.UID]bool
	// mirrorTerminating holds the full names of static pods terminating.
	mirrorTerminating map[string]bool
	// hook, if set, runs first in every UpdatePod, outside the mutex.
	hook func(podworkers.UpdatePodOptions)
}

func (w *fakeWorkers) UpdatePod(o podworkers.UpdatePodOptions) {
	if w.hook != nil {
		w.hook(o)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case o.RunningPod != nil:
		w.updates = append(w.updates, fmt.Sprintf("%s runtime:%s grace=%d", o.UpdateType, o.RunningPod.ID, *o.KillPodOptions.PodTerminationGracePeriodSecondsOverride))
	case o.Pod.DeletionTimestamp != nil:
		w.updates = append(w.updates, fmt.Sprintf("%s %s deleted", o.UpdateType, o.Pod.Name))
	default:
		w.updates = append(w.updates, fmt.Sprintf("%s %s", o.UpdateType, o.Pod.Name))
	}
}
func (w *fakeWorkers) SyncKnownPods(desired []*v1.Pod) map[types.UID]podworkers.PodWorkerSync {
	return w.known
}
func (w *fakeWorkers) IsPodKnownTerminated(uid types.UID) bool      { return w.terminated[uid] }
func (w *fakeWorkers) IsPodTerminationRequested(uid types.UID) bool { return false }
func (w *fakeWorkers) ShouldPodContentBeRemoved(uid types.UID) bool { return false }
func (w *fakeWorkers) IsPodForMirrorPodTerminatingByFullName(fullName string) bool {
	return w.mirrorTerminating[fullName]
}
func (w *fakeWorkers) peek() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.updates...)
}
func (w *fakeWorkers) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.updates
	w.updates = nil
	return out
}

type fakeRuntime struct {
	pods []*container.Pod
	gc   int
	// collected holds the UIDs of the view the last collection was given.
	collected []string
	// pruned receives "uid keep=N" for each PruneDeadContainers.
	pruned chan string
}

func (r *fakeRuntime) PruneDeadContainers(ctx context.Context, uid types.UID, keep int) error {
	if r.pruned != nil {
		r.pruned <- fmt.Sprintf("%s keep=%d", uid, keep)
	}
	return nil
}

func (r *fakeRuntime) Collect(ctx context.Context, pods []*container.Pod, p kuberuntime.GCPolicy, s kuberuntime.PodState) error {
	r.gc++
	r.collected = nil
	for _, p := range pods {
		r.collected = append(r.collected, string(p.ID))
	}
	sort.Strings(r.collected)
	return nil
}
func (r *fakeRuntime) ForgetBackOffs() {}

// fakePLEG lists what the fake runtime holds.
type fakePLEG struct {
	ch chan *pleg.Event
	rt *fakeRuntime
}

func (p fakePLEG) Watch() <-chan *pleg.Event { return p.ch }
func (p fakePLEG) Healthy() error            { return nil }
func (p fakePLEG) RuntimePods(ctx context.Context) ([]*container.Pod, error) {
	return p.rt.pods, nil
}

type coreFixture struct {
	kl       *Kubelet
	workers  *fakeWorkers
	runtime  *fakeRuntime
	status   *podstatus.Manager
	sources  *podsources.PodConfig
	recorder *record.FakeRecorder
	clock    *testingclock.FakeClock
	updates  chan podsources.PodUpdate
	health   *countingHealth
	node     func() *v1.Node
}

// countingHealth counts the sync loop's questions, so a test can prove
// the loop ran while it dispatched nothing.
type countingHealth struct {
	*health.Node
	asked atomic.Int32
}

func (h *countingHealth) SyncError() error {
	h.asked.Add(1)
	return h.Node.SyncError()
}

// newCore builds the core on fakes; the loop reads f.updates, and the
// runtime is healthy until the test says otherwise.
func newCore(t *testing.T, maxPods int) *coreFixture {
	return newCoreReading(t, maxPods, false)
}

// newCoreReading builds the core reading the pod sources' merged updates,
// or f.updates.
func newCoreReading(t *testing.T, maxPods int, fromSources bool) *coreFixture {
	clk := testingclock.NewFakeClock(now)
	f := &coreFixture{workers: &fakeWorkers{known: map[types.UID]podworkers.PodWorkerSync{}}, runtime: &fakeRuntime{},
		status: podstatus.New(clk), recorder: record.NewFakeRecorder(100), clock: clk}
	f.sources = podsources.New(f.recorder, clk)
	f.updates = make(chan podsources.PodUpdate, 10)
	var updates <-chan podsources.PodUpdate = f.updates
	if fromSources {
		updates = f.sources.Updates()
	}
	f.health = &countingHealth{Node: health.New(health.Options{Clock: clk})}
	f.health.SetRuntime(nil, nil)
	node := nodestatus.Node(nodestatus.Config{NodeName: "n", MaxPods: maxPods},
		nodestatus.Machine{CPUs: 4, MemoryBytes: 8 << 30, EphemeralStorage: 100 << 30})
	f.node = func() *v1.Node { return node }
	f.kl = New(Config{NodeName: "n", RootDir: t.TempDir(), DeadContainersKept: 1,
		Admitter: admission.New(admission.Options{Node: f.node, Handlers: f.admitHandlers()}),
		Resizer:  admission.NewResizer(admission.ResizerOptions{Node: f.node}),
	}, Deps{
		Workers: f.workers, WorkQueue: podworkers.NewWorkQueue(clk), Runtime: f.runtime, GC: f.runtime, PLEG: fakePLEG{make(chan *pleg.Event, 10), f.runtime},
		Status: f.status, Sources: podsources.NewSourcesReady(f.sources.Sources), Recorder: f.recorder, Clock: clk,
		Updates: updates, Health: f.health,
	})
	return f
}

// admitHandlers are the node's checks a pod meets in these tests.
func (f *coreFixture) admitHandlers() []admission.Handler {
	return []admission.Handler{admission.Fields, admission.NodeName, admission.Resources}
}

var now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func apiPod(uid, name string, created time.Time) *v1.Pod {
	p := &v1.Pod{}
	p.UID, p.Name, p.Namespace = types.UID(uid), name, "ns"
	p.CreationTimestamp = metav1.NewTime(created)
	p.Spec.Containers = []v1.Container{{Name: "c", Image: "img"}}
	return p
}

func TestAdditionsAreAdmittedOldestFirstUpToMaxPods(t *testing.T) {
	f := newCore(t, 2)
	f.kl.HandlePodAdditions([]*v1.Pod{
		apiPod("c", "third", now.Add(3*time.Second)), apiPod("a", "first", now.Add(time.Second)), apiPod("b", "second", now.Add(2*time.Second)),
	})
	if got := strings.Join(f.workers.take(), ";"); got != "create first;create second" {
		t.Fatalf("workers got %q", got)
	}
	s, ok := f.status.GetPodStatus("c")
	if !ok || s.Phase != v1.PodFailed || s.Reason != "OutOfpods" || !strings.Contains(s.Message, "capacity: 2") {
		t.Fatalf("rejected pod status %+v", s)
	}
	if e := <-f.recorder.Events; !strings.Contains(e, "OutOfpods") {
		t.Fatalf("event %q", e)
	}
	// A finished pod frees its place.
	f.workers.terminated = map[types.UID]bool{"a": true}
	f.kl.HandlePodAdditions([]*v1.Pod{apiPod("d", "fourth", now.Add(4*time.Second))})
	if got := strings.Join(f.workers.take(), ";"); got != "create fourth" {
		t.Fatalf("workers got %q", got)
	}
	// A batch that brings a known pod again counts it once: "second"
	// again beside a new pod fills the node (second, fourth) without
	// rejecting the new one... and the one after that is rejected.
	again := apiPod("b", "second", now.Add(2*time.Second))
	again.Labels = map[string]string{"changed": "yes"}
	f.workers.terminated = map[types.UID]bool{"a": true, "d": true}
	f.kl.HandlePodAdditions([]*v1.Pod{again, apiPod("e", "fifth", now.Add(5*time.Second)), apiPod("g", "sixth", now.Add(6*time.Second))})
	if got := strings.Join(f.workers.take(), ";"); got != "create second;create fifth" {
		t.Fatalf("workers got %q", got)
	}
	if s, _ := f.status.GetPodStatus("g"); s.Reason != "OutOfpods" {
		t.Fatalf("the pod past maxPods: %+v", s)
	}
}

// A pod that already finished is not admitted again (after a restart, on
// a full node): its status is not rewritten to a rejection, and the
// worker, which knows a terminal pod, gets it to finish its teardown.
func TestTerminalPodsAreNotAdmittedAgain(t *testing.T) {
	f := newCore(t, 1)
	f.kl.HandlePodAdditions([]*v1.Pod{apiPod("a", "running", now)})
	done := apiPod("b", "done", now.Add(time.Second))
	done.Status = v1.PodStatus{Phase: v1.PodSucceeded, Reason: "Completed"}
	f.kl.HandlePodAdditions([]*v1.Pod{done})
	if got := strings.Join(f.workers.take(), ";"); got != "create running;create done" {
		t.Fatalf("workers got %q", got)
	}
	if s, ok := f.status.GetPodStatus("b"); ok {
		t.Fatalf("a finished pod's status was rewritten: %+v", s)
	}
	select {
	case e := <-f.recorder.Events:
		t.Fatalf("event %q", e)
	default:
	}
	// The check ran: a new pod on the full node is rejected.
	f.kl.HandlePodAdditions([]*v1.Pod{apiPod("c", "new", now.Add(2*time.Second))})
	if s, ok := f.status.GetPodStatus("c"); !ok || s.Reason != "OutOfpods" {
		t.Fatalf("new pod status %+v", s)
	}
}

func TestRemovesWaitForAllSources(t *testing.T) {
	f := newCore(t, 10)
	f.sources.Register("file")
	f.sources.Register("api")
	p := apiPod("a", "a", now)
	f.kl.HandlePodAdditions([]*v1.Pod{p})
	f.workers.take()
	f.kl.HandlePodRemoves([]*v1.Pod{p})
	if got := f.workers.take(); len(got) != 0 {
		t.Fatalf("killed before every source reported: %v", got)
	}
	f.kl.sources.AddSource("file")
	f.kl.sources.AddSource("api")
	f.kl.HandlePodAdditions([]*v1.Pod{p})
	f.workers.take()
	f.kl.HandlePodRemoves([]*v1.Pod{p})
	if got := strings.Join(f.workers.take(), ";"); got != "kill a" {
		t.Fatalf("workers got %q", got)
	}
}

func TestDispatch(t *testing.T) {
	f := newCore(t, 10)
	p := apiPod("a", "a", now)
	deleted := p.DeepCopy()
	ts := metav1.NewTime(now)
	deleted.DeletionTimestamp = &ts
	for _, u := range []podsources.PodUpdate{
		{Op: podsources.ADD, Pods: []*v1.Pod{p}, Source: "api"},
		{Op: podsources.UPDATE, Pods: []*v1.Pod{p}, Source: "api"},
		{Op: podsources.DELETE, Pods: []*v1.Pod{deleted}, Source: "api"},
		{Op: podsources.RECONCILE, Pods: []*v1.Pod{p}, Source: "api"},
	} {
		f.kl.dispatch(u)
	}
	want := "create a;update a;update a deleted"
	if got := strings.Join(f.workers.take(), ";"); got != want {
		t.Fatalf("workers got %q, want %q", got, want)
	}
}

func TestPLEGEventsSyncKnownPods(t *testing.T) {
	f := newCore(t, 10)
	f.kl.HandlePodAdditions([]*v1.Pod{apiPod("a", "a", now)})
	f.workers.take()
	plegCh := make(chan *pleg.Event, 3)
	plegCh <- &pleg.Event{ID: "a", Type: pleg.ContainerDied}
	plegCh <- &pleg.Event{ID: "a", Type: pleg.ContainerRemoved}
	plegCh <- &pleg.Event{ID: "unknown", Type: pleg.ContainerStarted}
	for i := 0; i < 3; i++ {
		f.kl.syncLoopIteration(context.Background(), nil, nil, nil, plegCh, nil)
	}
	if got := strings.Join(f.workers.take(), ";"); got != "sync a" {
		t.Fatalf("workers got %q", got)
	}
	// The died container's pod is handed on for pruning, off the loop.
	select {
	case uid := <-f.kl.cleaner.deadContainers:
		if uid != "a" {
			t.Fatalf("pruning %s", uid)
		}
	default:
		t.Fatal("a died container's pod was not queued for pruning")
	}
}

func TestHousekeeping(t *testing.T) {
	f := newCore(t, 10)
	desired := apiPod("desired", "desired", now)
	done := apiPod("done", "done", now)
	f.kl.HandlePodAdditions([]*v1.Pod{desired, done})
	f.status.SetPodStatus(done, v1.PodStatus{Phase: v1.PodSucceeded})
	f.workers.take()
	// "rejected" was not admitted after a restart, but its containers
	// from before still run.
	rejected := apiPod("rejected", "rejected", now)
	f.kl.pods.addOrUpdate(rejected)
	f.kl.rejectPod(rejected, "OutOfmemory", "Node didn't have enough resource: memory")
	<-f.recorder.Events
	f.runtime.pods = []*container.Pod{
		{ID: "orphan", Name: "orphan", Namespace: "ns", Containers: []*container.Container{{Name: "c", State: container.StateRunning}}},
		{ID: "dead", Name: "dead", Namespace: "ns", Containers: []*container.Container{{Name: "c", State: container.StateExited}}},
		// Created but never started (nodelet was killed in between), its
		// sandbox stopped: nothing runs, and stopping a Created container
		// leaves it Created, so killing it again would never end (and
		// hid it from garbage collection).
		{ID: "unstarted", Name: "unstarted", Namespace: "ns", Containers: []*container.Container{{Name: "c", State: container.StateCreated}},
			Sandboxes: []*container.Sandbox{{ID: "s", Ready: false}}},
		{ID: "desired", Name: "desired", Namespace: "ns", Containers: []*container.Container{{Name: "c", State: container.StateRunning}}},
		{ID: "rejected", Name: "rejected", Namespace: "ns", Containers: []*container.Container{{Name: "c", State: container.StateRunning}}},
	}
	// No desired pod is known to the workers: "desired" is started
	// again, "done" (terminal) and "rejected" are not; the orphan and the
	// rejected pod's containers are killed at once, the dead and
	// unstarted leftovers are garbage collected.
	if err := f.kl.HandlePodCleanups(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := f.workers.take()
	sort.Strings(got)
	if strings.Join(got, ";") != "create desired;kill runtime:orphan grace=1;kill runtime:rejected grace=1" {
		t.Fatalf("workers got %v", got)
	}
	if e := <-f.recorder.Events; !strings.Contains(e, "Killing") || !strings.Contains(e, "not admitted (OutOfmemory)") {
		t.Fatalf("event %q", e)
	}
	// The slow part is handed to the cleaner, off the loop.
	if f.runtime.gc != 0 {
		t.Fatal("garbage collection ran on the sync loop")
	}
	select {
	case r := <-f.kl.cleaner.requests:
		if !r.keep["desired"] || !r.keep["orphan"] || !r.keep["dead"] || r.keep["gone"] {
			t.Fatalf("cleanup keeps %v", r.keep)
		}
		if err := f.kl.cleaner.cleanup(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("housekeeping requested no cleanup")
	}
	if f.runtime.gc != 1 {
		t.Fatalf("garbage collection ran %d times", f.runtime.gc)
	}
	// It works from housekeeping's view of the runtime, not a listing of
	// its own.
	if got := strings.Join(f.runtime.collected, ","); got != "dead,desired,orphan,rejected,unstarted" {
		t.Fatalf("garbage collection was given the runtime pods %s", got)
	}
}

func TestSyncLoopStopsWithContext(t *testing.T) {
	f := newCore(t, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = f.kl.Run(ctx); close(done) }()
	cancel()
	testutil.Closed(t, "the sync loop after its context ended", done)
}

func TestRuntimeBackOffDoublesUpToFiveSeconds(t *testing.T) {
	d, got := runtimeBackOffBase, []time.Duration{}
	for i := 0; i < 8; i++ {
		got = append(got, d)
		d = nextRuntimeBackOff(d)
	}
	want := "[100ms 200ms 400ms 800ms 1.6s 3.2s 5s 5s]"
	if fmt.Sprint(got) != want {
		t.Fatalf("back-off %v, want %s", got, want)
	}
}

func TestSyncLoopWaitsWhileTheRuntimeIsUnhealthy(t *testing.T) {
	f := newCore(t, 10)
	f.health.SetRuntime(errors.New("runtime down"), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = f.kl.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	f.updates <- podsources.PodUpdate{Op: podsources.ADD, Pods: []*v1.Pod{apiPod("a", "a", now)}, Source: "file"}
	// While unhealthy, time passes and nothing is dispatched: the loop
	// asks, backs off and asks again (counted), but never reads the update.
	for i := 0; i < 20; i++ {
		asked := f.health.asked.Load()
		stepUntil(t, f.clock, time.Second, func() bool { return f.health.asked.Load() > asked })
	}
	if got := f.workers.take(); len(got) != 0 {
		t.Fatalf("dispatched %v while the runtime was down", got)
	}
	if len(f.updates) != 1 {
		t.Fatal("the update was read while the runtime was down")
	}
	// Healthy again: the update goes through.
	f.health.SetRuntime(nil, nil)
	stepUntil(t, f.clock, time.Second, func() bool { return len(f.workers.peek()) > 0 })
	for _, g := range f.workers.take() {
		// Housekeeping may dispatch the pod a second time: the fake
		// workers never report it known.
		if g != "create a" {
			t.Fatalf("dispatched %q", g)
		}
	}
}

// stepUntil moves the fake clock on by d until cond holds: whatever the
// goroutine under test waits for comes, however late it starts waiting.
func stepUntil(t *testing.T, clk *testingclock.FakeClock, d time.Duration, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, "the condition while the clock moved on", func() bool {
		if cond() {
			return true
		}
		clk.Step(d)
		return false
	})
}

// waitForWaiter waits until something waits on the fake clock.
func waitForWaiter(t *testing.T, clk *testingclock.FakeClock) {
	t.Helper()
	testutil.WaitFor(t, "something to wait on the clock", clk.HasWaiters)
}

// The sync loop hands a pod to its worker the moment its deadline passes,
// not at its next periodic resync.
func TestDeadlineMakesThePodDue(t *testing.T) {
	f := newCore(t, 10)
	deadline := int64(30)
	p := apiPod("a", "a", now)
	p.Spec.ActiveDeadlineSeconds = &deadline
	f.kl.HandlePodAdditions([]*v1.Pod{p, apiPod("b", "b", now)})
	f.status.SetPodStatus(p, v1.PodStatus{Phase: v1.PodRunning})
	if due := f.kl.podsToSync(); len(due) != 0 {
		t.Fatalf("due before the deadline: %v", due)
	}
	f.clock.Step(30 * time.Second)
	if due := f.kl.podsToSync(); len(due) != 1 || due[0].UID != "a" {
		t.Fatalf("due at the deadline: %v", due)
	}

	// A deadline added by an update counts from the pod's start too.
	b := apiPod("b", "b", now)
	f.status.SetPodStatus(b, v1.PodStatus{Phase: v1.PodRunning, StartTime: &metav1.Time{Time: now}})
	if due := f.kl.podsToSync(); len(due) != 1 {
		t.Fatalf("due before b has a deadline: %v", due)
	}
	five := int64(5)
	b.Spec.ActiveDeadlineSeconds = &five
	f.kl.HandlePodUpdates([]*v1.Pod{b})
	if due := f.kl.podsToSync(); len(due) != 2 {
		t.Fatalf("due once b's deadline, added by an update, passed: %v", due)
	}
}

// Reconcile: a readiness-gate pod is synced only when its Ready condition
// disagrees with its gates; an evicted pod's dead containers all go.
func TestReconcile(t *testing.T) {
	f := newCore(t, 10)
	gated := apiPod("g", "gated", now)
	gated.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/lb"}}
	gated.Status = v1.PodStatus{Phase: v1.PodRunning,
		ContainerStatuses: []v1.ContainerStatus{{Name: "c", Ready: true, State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}},
		Conditions: []v1.PodCondition{
			{Type: "example.com/lb", Status: v1.ConditionFalse},
			{Type: v1.PodReady, Status: v1.ConditionFalse, Reason: "ReadinessGatesNotReady",
				Message: `corresponding condition of pod readiness gate ["example.com/lb"] does not exist or is not true`},
		}}
	f.kl.HandlePodAdditions([]*v1.Pod{gated})
	f.workers.take()
	f.kl.HandlePodReconcile([]*v1.Pod{gated})
	if got := f.workers.take(); len(got) != 0 {
		t.Fatalf("synced a pod whose Ready condition agrees with its gates: %v", got)
	}
	opened := gated.DeepCopy()
	opened.Status.Conditions[0].Status = v1.ConditionTrue
	f.kl.HandlePodReconcile([]*v1.Pod{opened})
	if got := strings.Join(f.workers.take(), ";"); got != "sync gated" {
		t.Fatalf("gate opened: workers got %q", got)
	}

	f.runtime.pruned = make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.kl.cleaner.run(ctx)
	evicted := apiPod("e", "evicted", now)
	f.kl.HandlePodAdditions([]*v1.Pod{evicted})
	evicted = evicted.DeepCopy()
	evicted.Status = v1.PodStatus{Phase: v1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: memory."}
	f.kl.HandlePodReconcile([]*v1.Pod{evicted})
	if got := <-f.runtime.pruned; got != "e keep=0" {
		t.Fatalf("pruned %q, want every dead container of the evicted pod", got)
	}
}

// KillPod stops a pod that stays desired: the workers get a kill with the
// grace period and status amendment, and the pod is still active until the
// workers know it terminated.
func TestKillPodKeepsThePodDesired(t *testing.T) {
	f := newCore(t, 10)
	f.kl.HandlePodAdditions([]*v1.Pod{apiPod("a", "first", now)})
	var got podworkers.UpdatePodOptions
	f.workers.hook = func(o podworkers.UpdatePodOptions) { got = o }
	f.workers.take()
	pod := f.kl.View().ActivePods()[0]
	done := f.kl.KillPod(pod, 7, func(s *v1.PodStatus) { s.Reason = "Terminated" })
	if u := strings.Join(f.workers.take(), ";"); u != "kill first" {
		t.Fatalf("workers got %q", u)
	}
	k := got.KillPodOptions
	if k == nil || *k.PodTerminationGracePeriodSecondsOverride != 7 || k.CompletedCh == nil || k.PodStatusFunc == nil || k.Evict {
		t.Fatalf("kill options %+v", k)
	}
	var s v1.PodStatus
	k.PodStatusFunc(&s)
	if s.Reason != "Terminated" {
		t.Fatalf("status func gave %+v", s)
	}
	close(k.CompletedCh)
	<-done
	if len(f.kl.View().ActivePods()) != 1 {
		t.Fatal("a killed pod left the active pods before its worker finished")
	}
	f.workers.terminated = map[types.UID]bool{"a": true}
	if len(f.kl.View().ActivePods()) != 0 {
		t.Fatal("a terminated pod is still active")
	}
}

// A resize of an admitted pod is granted when the pod fits beside the
// others, Deferred while it does not (and granted by housekeeping once it
// does), and Infeasible when the pod alone exceeds the node; until granted
// the pod runs with what it had, and the status says why.
func TestResizeDecisions(t *testing.T) {
	f := newCore(t, 10)
	store, err := allocation.Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	f.kl.resizer = admission.NewResizer(admission.ResizerOptions{Node: f.node, Allocations: store})
	withCPU := func(p *v1.Pod, cpu string) *v1.Pod {
		p = p.DeepCopy()
		p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}
		return p
	}
	a := withCPU(apiPod("a", "a", now), "500m")
	b := withCPU(apiPod("b", "b", now), "2")
	f.kl.HandlePodAdditions([]*v1.Pod{a, b})
	f.workers.take()
	cpuOf := func(uid types.UID) string {
		p, _ := f.kl.pods.podByUID(uid)
		return p.Spec.Containers[0].Resources.Requests.Cpu().String()
	}
	f.kl.HandlePodUpdates([]*v1.Pod{withCPU(a, "1")})
	if got := cpuOf("a"); got != "1" {
		t.Fatalf("a fitting resize was not granted: a runs with %s", got)
	}
	f.kl.HandlePodUpdates([]*v1.Pod{withCPU(a, "2500m")})
	p, pending := store.PendingResize("a")
	if got := cpuOf("a"); got != "1" || !pending || p.Reason != "Deferred" || !strings.Contains(p.Message, "Node didn't have enough resource: cpu") {
		t.Fatalf("a runs with %s; pending %v %+v", got, pending, p)
	}
	f.kl.HandlePodUpdates([]*v1.Pod{withCPU(a, "64")})
	if p, _ := store.PendingResize("a"); p.Reason != "Infeasible" || !strings.Contains(p.Message, "capacity: cpu, requested: 64000") {
		t.Fatalf("pending %+v", p)
	}
	f.kl.HandlePodUpdates([]*v1.Pod{withCPU(a, "2500m")})
	// b leaves: housekeeping grants a's deferred resize and syncs it.
	f.kl.HandlePodRemoves([]*v1.Pod{b})
	f.workers.take()
	if err := f.kl.HandlePodCleanups(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, still := store.PendingResize("a"); still || cpuOf("a") != "2500m" {
		t.Fatalf("deferred resize not granted after b left: a runs with %s", cpuOf("a"))
	}
	if got := f.workers.take(); !slices.Contains(got, "update a") {
		t.Fatalf("workers got %v", got)
	}
}

type decisionLog map[types.UID]string

func (d decisionLog) Decision(uid types.UID) (bool, string, string, bool) {
	r, ok := d[uid]
	return r == "admitted", r, "decided before the restart", ok
}

func (d decisionLog) Decide(pod *v1.Pod, admitted bool, reason, _ string) {
	if admitted {
		reason = "admitted"
	}
	d[pod.UID] = reason
}

// A pod restored from the journal keeps its admission decision, whatever
// the node's state now: admitted on a node that is full, rejected on one
// with room. A pod its source delivers is decided again against the node
// as it is (upstream's behaviour after a restart), and every decision is
// kept.
func TestAdmissionDecisionsStand(t *testing.T) {
	f := newCore(t, 1)
	d := decisionLog{"old-admitted": "admitted", "old-rejected": "OutOfcpu", "live": "admitted"}
	f.kl.admitter = admission.New(admission.Options{Node: f.node, Handlers: f.admitHandlers(), Decisions: d})
	restore := func(p *v1.Pod) {
		f.kl.dispatch(podsources.PodUpdate{Op: podsources.ADD, Pods: []*v1.Pod{p}, Source: "api", Restored: true})
	}
	f.kl.HandlePodAdditions([]*v1.Pod{apiPod("new", "new", now)})
	restore(apiPod("old-admitted", "old-admitted", now.Add(time.Second)))
	f.kl.HandlePodAdditions([]*v1.Pod{apiPod("live", "live", now.Add(time.Second))}) // the node is full
	f.workers.terminated = map[types.UID]bool{"new": true, "old-admitted": true}     // room again
	restore(apiPod("old-rejected", "old-rejected", now.Add(2*time.Second)))
	f.kl.HandlePodAdditions([]*v1.Pod{apiPod("newer", "newer", now.Add(3*time.Second))})
	if got := strings.Join(f.workers.take(), ";"); got != "create new;create old-admitted;create newer" {
		t.Fatalf("workers got %q", got)
	}
	if s, _ := f.status.GetPodStatus("live"); s.Reason != "OutOfpods" || d["live"] != "OutOfpods" {
		t.Errorf("a pod from its source was not decided again: %+v, kept %q", s, d["live"])
	}
	if s, _ := f.status.GetPodStatus("old-rejected"); s.Phase != v1.PodFailed || s.Reason != "OutOfcpu" || !strings.Contains(s.Message, "before the restart") {
		t.Errorf("old-rejected: %+v", s)
	}
	if d["new"] != "admitted" || d["newer"] != "admitted" || len(d) != 5 {
		t.Errorf("decisions kept: %v", d)
	}
}

// Pods the node journal restored do not make their source ready: only
// the source itself can, once it reports. They make the node's pods
// known, once applied.
func TestRestoredUpdatesDoNotMakeTheSourceReady(t *testing.T) {
	f := newCore(t, 10)
	f.sources.Register("api")
	ctx := context.Background()
	f.updates <- podsources.PodUpdate{Op: podsources.ADD, Pods: []*v1.Pod{apiPod("a", "a", now)}, Source: "api", Restored: true}
	select {
	case <-f.kl.View().PodsKnown():
		t.Fatal("the pods are known before any update was applied")
	default:
	}
	f.kl.syncLoopIteration(ctx, f.updates, nil, nil, nil, nil)
	if got := strings.Join(f.workers.take(), ";"); got != "create a" {
		t.Fatalf("workers got %q", got)
	}
	if f.kl.sources.AllReady() {
		t.Fatal("restored pods made the source ready")
	}
	select {
	case <-f.kl.View().PodsKnown():
	default:
		t.Fatal("the restored pods, applied, did not make the node's pods known")
	}
	if n := len(f.kl.View().ActivePods()); n != 1 {
		t.Fatalf("%d active pods once known, want 1", n)
	}
	f.updates <- podsources.PodUpdate{Op: podsources.ADD, Source: "api"}
	f.kl.syncLoopIteration(ctx, f.updates, nil, nil, nil, nil)
	if !f.kl.sources.AllReady() {
		t.Fatal("the source's own report did not make it ready")
	}
}

// TestRestartedPodStatusStartsAfresh: a static pod run again under the
// same UID (its manifest moved out and back while it terminated) gets a
// status that follows its new run: the finished record of the old one
// no longer refuses every update.
func TestRestartedPodStatusStartsAfresh(t *testing.T) {
	f := newCore(t, 10)
	pod := apiPod("static", "static", now)
	pod.Annotations = map[string]string{podutil.ConfigSourceAnnotationKey: podutil.FileSource, podutil.ConfigHashAnnotationKey: "h"}
	f.kl.pods.addOrUpdate(pod)
	f.status.SetPodStatus(pod, v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{Name: "c", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}})
	f.status.TerminatePod(pod)
	finished, _ := f.status.GetPodStatus(pod.UID)
	if finished.ContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("TerminatePod left %+v", finished.ContainerStatuses[0].State)
	}
	// The workers forgot the old run; the pod is desired: it starts again.
	if err := f.kl.HandlePodCleanups(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.workers.take(); strings.Join(got, ";") != "create static" {
		t.Fatalf("workers got %v", got)
	}
	running := v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{Name: "c", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}}
	f.status.SetPodStatus(pod, running)
	got, _ := f.status.GetPodStatus(pod.UID)
	if got.ContainerStatuses[0].State.Running == nil {
		t.Fatalf("the new run's status was refused: %+v", got.ContainerStatuses[0].State)
	}
}

// TestEvictPodIsAnEviction: an eviction's kill tells the workers so, and
// the pod's content goes as soon as it stopped (seed 003's
// ShouldPodContentBeRemoved: evicted, or deleted and terminated).
func TestEvictPodIsAnEviction(t *testing.T) {
	f := newCore(t, 10)
	f.kl.HandlePodAdditions([]*v1.Pod{apiPod("a", "first", now)})
	var got podworkers.UpdatePodOptions
	f.workers.hook = func(o podworkers.UpdatePodOptions) { got = o }
	f.kl.EvictPod(f.kl.View().ActivePods()[0], 0, func(*v1.PodStatus) {})
	if k := got.KillPodOptions; got.UpdateType != podworkers.UpdateKill || k == nil || !k.Evict || *k.PodTerminationGracePeriodSecondsOverride != 0 {
		t.Fatalf("eviction's update %v, kill options %+v", got.UpdateType, k)
	}
}
