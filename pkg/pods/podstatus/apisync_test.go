package podstatus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/kubeclienttest"
	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// fakePods is the rest of nodelet as the syncer sees it.
type fakePods struct {
	desired map[types.UID]*v1.Pod
	api     map[types.UID]*v1.Pod
	running map[types.UID]bool
}

func (f *fakePods) PodByUID(uid types.UID) (*v1.Pod, bool) { p, ok := f.desired[uid]; return p, ok }
func (f *fakePods) APIPod(uid types.UID) *v1.Pod           { return f.api[uid] }
func (f *fakePods) CouldHaveRunningContainers(uid types.UID) bool {
	return f.running[uid]
}

func newSyncer(t testing.TB, objs ...*v1.Pod) (*APISyncer, *Manager, *fake.Clientset, *fakePods) {
	t.Helper()
	client := fake.NewClientset()
	for _, o := range objs {
		if _, err := client.CoreV1().Pods(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	m := New(clk)
	pods := &fakePods{desired: map[types.UID]*v1.Pod{}, api: map[types.UID]*v1.Pod{}, running: map[types.UID]bool{}}
	for _, o := range objs {
		pods.desired[o.UID] = o
	}
	return NewAPISyncer(APISyncerOptions{Client: kubeclienttest.Wrap(client), Status: m, Pods: pods, Clock: clk}), m, client, pods
}

func apiPod(t *testing.T, c *fake.Clientset, name string) *v1.Pod {
	t.Helper()
	p, err := c.CoreV1().Pods("ns").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// lastPatch is the body of the last patch the client was sent.
func lastPatch(c *fake.Clientset) []byte {
	var patch []byte
	for _, a := range c.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			patch = p.GetPatch()
		}
	}
	return patch
}

func countActions(c *fake.Clientset, verb, sub string) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == verb && a.GetSubresource() == sub {
			n++
		}
	}
	return n
}

func TestSyncerWritesChangedStatusesOnce(t *testing.T) {
	pod := testPod("a")
	pod.Status.Conditions = []v1.PodCondition{{Type: "example.com/gate", Status: v1.ConditionTrue}}
	s, m, client, _ := newSyncer(t, pod)
	ctx := context.Background()

	m.SetPodStatus(pod, ready(v1.ConditionTrue))
	if retry := s.SyncBatch(ctx); retry {
		t.Fatal("a successful write asked for a retry")
	}
	got := apiPod(t, client, "a")
	if got.Status.Phase != v1.PodRunning || len(got.Status.Conditions) != 2 {
		t.Fatalf("API status %+v: want Running with our Ready and the gate kept", got.Status)
	}
	// Nothing changed: no more writes.
	s.SyncBatch(ctx)
	if n := countActions(client, "patch", "status"); n != 1 {
		t.Fatalf("%d status updates, want 1", n)
	}
	m.SetPodStatus(pod, ready(v1.ConditionFalse))
	s.SyncBatch(ctx)
	if n := countActions(client, "patch", "status"); n != 2 {
		t.Fatalf("%d status updates after a change, want 2", n)
	}
}

func TestSyncerNeverRegressesATerminalPhase(t *testing.T) {
	pod := testPod("a")
	pod.Status.Phase = v1.PodFailed
	s, m, client, _ := newSyncer(t, pod)
	m.SetPodStatus(pod, ready(v1.ConditionTrue))
	s.SyncBatch(context.Background())
	if got := apiPod(t, client, "a"); got.Status.Phase != v1.PodFailed {
		t.Fatalf("phase went from Failed to %s", got.Status.Phase)
	}
}

func TestSyncerSkipsARecreatedPod(t *testing.T) {
	pod := testPod("a")
	s, m, client, _ := newSyncer(t, pod)
	other := pod.DeepCopy()
	other.UID = "a-new"
	m.SetPodStatus(other, ready(v1.ConditionTrue))
	s.SyncBatch(context.Background())
	if n := countActions(client, "patch", "status"); n != 0 {
		t.Fatalf("wrote the status of another pod with the same name (%d updates)", n)
	}
}

func TestSyncerDeletesTerminatedDeletedPods(t *testing.T) {
	pod := testPod("a")
	s, m, client, pods := newSyncer(t, pod)
	ctx := context.Background()
	m.SetPodStatus(pod, ready(v1.ConditionTrue))
	s.SyncBatch(ctx)

	deleting := pod.DeepCopy()
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	pods.desired["a"] = deleting
	pods.running["a"] = true
	m.TerminatePod(deleting)
	s.SyncBatch(ctx)
	if n := countActions(client, "delete", ""); n != 0 {
		t.Fatal("deleted a pod whose containers may still run")
	}
	pods.running["a"] = false
	s.SyncBatch(ctx)
	var del k8stesting.DeleteAction
	for _, a := range client.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok {
			del = d
		}
	}
	if del == nil {
		t.Fatal("the terminated, deleted pod was not deleted")
	}
	opts := del.GetDeleteOptions()
	if opts.GracePeriodSeconds == nil || *opts.GracePeriodSeconds != 0 || opts.Preconditions == nil || *opts.Preconditions.UID != "a" {
		t.Fatalf("delete options %+v: want grace 0 and a UID precondition", opts)
	}
	s.SyncBatch(ctx)
	if n := countActions(client, "delete", ""); n != 1 {
		t.Fatalf("%d deletes, want 1", n)
	}
}

// TestSyncerRetriesAConflictingDeleteOfAPodStillThere: a delete the API
// server answers with a conflict or a not-found while the pod is still
// there (as after a restart of the API server and etcd) is tried again,
// not taken for done; a conflict because the name is another pod's now
// is done.
func TestSyncerRetriesAConflictingDeleteOfAPodStillThere(t *testing.T) {
	pod := testPod("a")
	s, m, client, pods := newSyncer(t, pod)
	ctx := context.Background()
	deleting := pod.DeepCopy()
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	pods.desired["a"] = deleting
	// The source's copy: the syncer deletes without reading first.
	pods.api["a"] = apiPod(t, client, "a")
	m.TerminatePod(deleting)
	client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(v1.Resource("pods"), "a", errors.New("storage conflict"))
	})
	if retry := s.SyncBatch(ctx); !retry {
		t.Fatal("a conflicting delete of a pod still there was taken for done")
	}
	if n := countActions(client, "delete", ""); n != 1 {
		t.Fatalf("%d deletes, want 1", n)
	}
	// A not-found for a pod still there (the NodeRestriction admission's
	// cache, empty just after the API server restarted) is not proof.
	client.ReactionChain[0] = &k8stesting.SimpleReactor{Verb: "delete", Resource: "pods", Reaction: func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(v1.Resource("pods"), "a")
	}}
	if retry := s.SyncBatch(ctx); !retry {
		t.Fatal("a not-found delete of a pod still there was taken for done")
	}
	if n := countActions(client, "delete", ""); n != 2 {
		t.Fatalf("%d deletes, want 2", n)
	}
	// The API server applies deletes again.
	client.ReactionChain = client.ReactionChain[1:]
	if retry := s.SyncBatch(ctx); retry {
		t.Fatal("retry after the pod was deleted")
	}
	if _, err := client.CoreV1().Pods("ns").Get(ctx, "a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the pod is still in the API: %v", err)
	}

	// A conflict because the name is another pod's now: ours is gone.
	other := testPod("a")
	other.UID = "another"
	if _, err := client.CoreV1().Pods("ns").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(v1.Resource("pods"), "a", errors.New("precondition failed: UID"))
	})
	if outcome, err := s.deletePod(ctx, pod); err != nil || outcome != "replaced by another pod of the name" {
		t.Fatalf("delete of a pod whose name is another's now: %q, %v", outcome, err)
	}
}

func TestSyncerWritesStaticPodStatusToItsMirror(t *testing.T) {
	static := testPod("web")
	static.Annotations = map[string]string{podutil.ConfigSourceAnnotationKey: "file", podutil.ConfigHashAnnotationKey: "h1"}
	mirror := testPod("web")
	mirror.UID = "mirror-1"
	mirror.Annotations = map[string]string{podutil.ConfigMirrorAnnotationKey: "h1"}
	s, m, client, pods := newSyncer(t, mirror)
	pods.desired = map[types.UID]*v1.Pod{"web": static}
	ctx := context.Background()
	m.SetPodStatus(static, ready(v1.ConditionTrue))
	s.SyncBatch(ctx)
	if got := apiPod(t, client, "web"); got.Status.Phase != v1.PodRunning {
		t.Fatalf("mirror status %+v", got.Status)
	}

	// The mirror is recreated (new UID, empty status): the unchanged
	// status is written to it again.
	if err := client.CoreV1().Pods("ns").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fresh := mirror.DeepCopy()
	fresh.UID = "mirror-2"
	if _, err := client.CoreV1().Pods("ns").Create(ctx, fresh, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods.api["web"] = fresh
	s.SyncBatch(ctx)
	if got := apiPod(t, client, "web"); got.Status.Phase != v1.PodRunning {
		t.Fatalf("recreated mirror status %+v", got.Status)
	}
}

// TestSyncerPatchesWithoutReadingWhenItHasTheObject: with the source's
// copy of the pod at hand a write is one PATCH carrying the UID; after a
// failed patch the object is read before the next one.
func TestSyncerPatchesWithoutReadingWhenItHasTheObject(t *testing.T) {
	pod := testPod("a")
	s, m, client, pods := newSyncer(t, pod)
	pods.api["a"] = apiPod(t, client, "a")
	ctx := context.Background()
	m.SetPodStatus(pod, ready(v1.ConditionTrue))
	if retry := s.SyncBatch(ctx); retry {
		t.Fatal("retry after a successful write")
	}
	if n := countActions(client, "get", ""); n != 1 { // the test's own read above
		t.Fatalf("%d reads, want none by the syncer", n-1)
	}
	patch := lastPatch(client)
	if !strings.Contains(string(patch), `"uid":"a"`) {
		t.Fatalf("patch %s carries no UID precondition", patch)
	}

	// A failing patch: the next attempt reads the object first.
	client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(v1.Resource("pods"), "a", errors.New("stale"))
	})
	m.SetPodStatus(pod, ready(v1.ConditionFalse))
	if retry := s.SyncBatch(ctx); !retry {
		t.Fatal("no retry after a failed patch")
	}
	client.ReactionChain = client.ReactionChain[1:]
	gets := countActions(client, "get", "")
	if retry := s.SyncBatch(ctx); retry {
		t.Fatal("retry after a successful write")
	}
	if countActions(client, "get", "") != gets+1 {
		t.Fatal("the object was not read again after a failed patch")
	}
	if got := apiPod(t, client, "a"); got.Status.Conditions[0].Status != v1.ConditionFalse {
		t.Fatalf("API status %+v", got.Status)
	}
}

// TestSyncerTakesTheOldestChangeFirst: pods are written in the order their
// statuses changed, so a pod that became Ready first is written first.
func TestSyncerTakesTheOldestChangeFirst(t *testing.T) {
	var objs []*v1.Pod
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		objs = append(objs, testPod(name))
	}
	s, m, _, _ := newSyncer(t, objs...)
	for _, name := range []string{"d", "b", "e", "a", "c"} {
		m.SetPodStatus(testPod(name), ready(v1.ConditionTrue))
	}
	if got := dueUIDs(s); got != "[d b e a c]" {
		t.Fatalf("due %s", got)
	}
}

func dueUIDs(s *APISyncer) string {
	var out []types.UID
	for _, d := range s.due() {
		out = append(out, d.uid)
	}
	return fmt.Sprint(out)
}

// TestSyncerTakesStartedPodsFirst: in a burst, pods that started (or
// stopped, or may be deleted) are written before pods only just seen,
// whose Pending status says nothing a client waits for; each class in
// the order of change.
func TestSyncerTakesStartedPodsFirst(t *testing.T) {
	var objs []*v1.Pod
	for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
		objs = append(objs, testPod(name))
	}
	s, m, _, _ := newSyncer(t, objs...)
	pending := v1.PodStatus{Phase: v1.PodPending}
	m.SetPodStatus(testPod("a"), pending)
	m.SetPodStatus(testPod("b"), pending)
	m.SetPodStatus(testPod("c"), ready(v1.ConditionTrue))
	m.SetPodStatus(testPod("d"), pending)
	m.SetPodStatus(testPod("e"), v1.PodStatus{Phase: v1.PodFailed})
	m.SetPodStatus(testPod("b"), ready(v1.ConditionFalse))
	m.SetPodStatus(testPod("f"), pending)
	var got []string
	for _, d := range s.due() {
		got = append(got, fmt.Sprintf("%s:%v", d.uid, d.urgent))
	}
	if want := "[c:true e:true b:true a:false d:false f:false]"; fmt.Sprint(got) != want {
		t.Fatalf("due %v, want %s", got, want)
	}
}

// TestSyncerRunWritesEveryPodConcurrently runs the real loop with its
// writers against many pods (with the race detector in CI).
func TestSyncerRunWritesEveryPodConcurrently(t *testing.T) {
	var objs []*v1.Pod
	for i := 0; i < 40; i++ {
		objs = append(objs, testPod(fmt.Sprintf("p%d", i)))
	}
	s, m, client, _ := newSyncer(t, objs...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for _, o := range objs {
		m.SetPodStatus(o, ready(v1.ConditionTrue))
	}
	testutil.WaitFor(t, "every status written", func() bool { return written(t, client, objs) == len(objs) })
}

func written(t *testing.T, client *fake.Clientset, objs []*v1.Pod) int {
	n := 0
	for _, o := range objs {
		if p := apiPod(t, client, o.Name); p.Status.Phase == v1.PodRunning {
			n++
		}
	}
	return n
}

// Flush returns once Run wrote every status, and gives up when its
// context ends (a pod whose object is gone is never written).
func TestSyncerFlush(t *testing.T) {
	objs := []*v1.Pod{testPod("a"), testPod("b")}
	s, m, client, _ := newSyncer(t, objs...)
	clk := s.clock.(*testingclock.FakeClock)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	flush := func(ctx context.Context) <-chan struct{} {
		flushed := make(chan struct{})
		go func() { s.Flush(ctx); close(flushed) }()
		return flushed
	}
	for _, o := range objs {
		m.SetPodStatus(o, ready(v1.ConditionTrue))
	}
	flushed := flush(context.Background())
	testutil.WaitFor(t, "flushed", func() bool {
		clk.Step(retryDelay)
		select {
		case <-flushed:
			return true
		default:
			return false
		}
	})
	if n := written(t, client, objs); n != len(objs) {
		t.Fatalf("Flush returned with %d of %d statuses written", n, len(objs))
	}
	// A status that cannot be written (the API server failing) keeps
	// Flush waiting until its context ends.
	var refused atomic.Int32
	client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		refused.Add(1)
		return true, nil, errors.New("etcdserver: request timed out")
	})
	m.SetPodStatus(objs[0], ready(v1.ConditionFalse))
	fctx, fcancel := context.WithCancel(context.Background())
	flushed = flush(fctx)
	testutil.WaitFor(t, "the write refused twice", func() bool {
		clk.Step(retryDelay)
		return refused.Load() >= 2
	})
	select {
	case <-flushed:
		t.Fatal("Flush returned with a status unwritten")
	default:
	}
	fcancel()
	<-flushed
}

type stepLog []string

func (l *stepLog) Begin(pod *v1.Pod, kind instrument.Kind, name string) func(error, string) {
	return func(err error, detail string) {
		*l = append(*l, fmt.Sprintf("%s %s %s: %v %s", pod.UID, kind, name, err, detail))
	}
}

// Each status written to the API is a step of the pod's timeline; a
// status already there is not written, so not a step.
func TestWritesAreTimelineSteps(t *testing.T) {
	pod := testPod("a")
	s, m, _, _ := newSyncer(t, pod)
	steps := &stepLog{}
	s.steps = steps
	m.SetPodStatus(pod, ready(v1.ConditionTrue))
	s.SyncBatch(context.Background())
	s.SyncBatch(context.Background())
	if got := strings.Join(*steps, "; "); got != string(pod.UID)+" status written to the API: <nil> phase Running, version 1" {
		t.Fatalf("steps %q", got)
	}
}

// TestSyncerHoldsTheTerminalPhaseWhileContainersMayRun: a pod decided
// Failed (past its deadline, evicted) whose containers are still being
// stopped is written with everything but the terminal phase, which the
// API gets only once the containers are gone; the rest of the status
// (here, Ready false) goes at once.
func TestSyncerHoldsTheTerminalPhaseWhileContainersMayRun(t *testing.T) {
	pod := testPod("a")
	pod.Status.Phase = v1.PodRunning
	s, m, client, pods := newSyncer(t, pod)
	pods.running[pod.UID] = true
	failed := ready(v1.ConditionFalse)
	failed.Phase, failed.Reason, failed.Message = v1.PodFailed, "DeadlineExceeded", "Pod was active on the node longer than the specified deadline"
	m.SetPodStatus(pod, failed)
	ctx := context.Background()
	if retry := s.SyncBatch(ctx); !retry {
		t.Fatal("a held status was taken as written")
	}
	got := apiPod(t, client, "a")
	if got.Status.Phase != v1.PodRunning || got.Status.Reason != "" || len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Status != v1.ConditionFalse {
		t.Fatalf("while the containers may run: phase %s reason %q conditions %+v", got.Status.Phase, got.Status.Reason, got.Status.Conditions)
	}
	pods.running[pod.UID] = false
	if retry := s.SyncBatch(ctx); retry {
		t.Fatal("nothing left to write, yet a retry")
	}
	if got := apiPod(t, client, "a"); got.Status.Phase != v1.PodFailed || got.Status.Reason != "DeadlineExceeded" {
		t.Fatalf("once the containers are gone: phase %s reason %q", got.Status.Phase, got.Status.Reason)
	}
}

// TestSyncerRunWritesAStartedPodBeforeWaitingFirstSightings: with every
// writer busy and Pending pods waiting, a pod that starts is written by
// the next free writer, ahead of them.
func TestSyncerRunWritesAStartedPodBeforeWaitingFirstSightings(t *testing.T) {
	var objs []*v1.Pod
	for i := 0; i < writers+4; i++ {
		objs = append(objs, testPod(fmt.Sprintf("p%d", i)))
	}
	_, m, client, pods := newSyncer(t, objs...)
	// Each write blocks just before its PATCH (the fake client serializes
	// its reactors, so they cannot hold the writers).
	steps := &blockingSteps{entered: make(chan string, 2*len(objs)), release: make(chan struct{})}
	s := NewAPISyncer(APISyncerOptions{Client: kubeclienttest.Wrap(client), Status: m, Pods: pods,
		Clock: testingclock.NewFakeClock(time.Unix(1000, 0)), Steps: steps})
	for _, o := range objs {
		m.SetPodStatus(o, v1.PodStatus{Phase: v1.PodPending})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); close(steps.release); <-done }()
	first := map[string]bool{}
	for i := 0; i < writers; i++ {
		first[<-steps.entered] = true
	}
	last := objs[len(objs)-1]
	if first[last.Name] {
		t.Fatalf("writers took %v first, not the oldest changes", first)
	}
	m.SetPodStatus(last, ready(v1.ConditionTrue))
	testutil.WaitFor(t, "the started pod waiting as urgent", func() bool {
		urgent, _ := s.queue.classes.waiting()
		return len(urgent) == 1 && urgent[0] == last.UID
	})
	steps.release <- struct{}{}
	if next := <-steps.entered; next != last.Name {
		t.Fatalf("the next write was %s's, not the started pod %s's", next, last.Name)
	}
}

type blockingSteps struct {
	entered chan string
	release chan struct{}
}

func (b *blockingSteps) Begin(pod *v1.Pod, _ instrument.Kind, _ string) func(error, string) {
	b.entered <- pod.Name
	<-b.release
	return func(error, string) {}
}

// runningOverCopy is a syncer of the running pod "a" whose source holds
// the API's copy of it (returned last) at resourceVersion 10.
func runningOverCopy(t *testing.T) (*v1.Pod, *APISyncer, *Manager, *fake.Clientset, *fakePods, *v1.Pod) {
	t.Helper()
	pod := testPod("a")
	pod.Status.Phase = v1.PodRunning
	s, m, client, pods := newSyncer(t, pod)
	cp := apiPod(t, client, "a")
	cp.ResourceVersion = "10"
	pods.api["a"] = cp
	return pod, s, m, client, pods, cp
}

// TestSyncerDoesNotRepeatAWriteTheWatchHasNotBroughtBack: until the source
// holds a newer copy of the object than the one a write was patched over,
// that copy's differing status is our own write still on its way, not a
// change to reconcile: neither a resync nor the deletion that follows the
// terminal write patches it again. A newer copy that differs (somebody
// else's write) is still reconciled.
func TestSyncerDoesNotRepeatAWriteTheWatchHasNotBroughtBack(t *testing.T) {
	pod, s, m, client, pods, _ := runningOverCopy(t)
	ctx := context.Background()
	m.SetPodStatus(pod, ready(v1.ConditionTrue))
	s.SyncBatch(ctx)
	if n := countActions(client, "patch", "status"); n != 1 {
		t.Fatalf("%d status writes, want 1", n)
	}
	if len(s.due()) != 0 {
		t.Fatalf("due again while the write comes back: %s", dueUIDs(s))
	}

	// The pod is deleted and stops: its terminal status is written over
	// the same stale copy, and once the pod is finished (TerminatePod,
	// a new version of the same status) it is deleted without writing
	// that status again.
	deleting := pod.DeepCopy()
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	pods.desired["a"] = deleting
	done := ready(v1.ConditionFalse)
	done.Phase = v1.PodSucceeded
	m.SetPodStatus(deleting, done)
	s.SyncBatch(ctx)
	if n, d := countActions(client, "patch", "status"), countActions(client, "delete", ""); n != 2 || d != 0 {
		t.Fatalf("%d status writes and %d deletes, want 2 and 0", n, d)
	}
	m.TerminatePod(deleting)
	s.SyncBatch(ctx)
	if n, d := countActions(client, "patch", "status"), countActions(client, "delete", ""); n != 2 || d != 1 {
		t.Fatalf("%d status writes and %d deletes, want 2 and 1", n, d)
	}
	if last := lastPatch(client); !strings.Contains(string(last), `"phase":"Succeeded"`) {
		t.Fatalf("the last write %s is not the terminal phase", last)
	}

	// Somebody else's write arrives as a newer copy: reconciled.
	other := testPod("b")
	s2, m2, client2, pods2 := newSyncer(t, other)
	m2.SetPodStatus(other, ready(v1.ConditionTrue))
	cp := apiPod(t, client2, "b")
	cp.ResourceVersion = "10"
	pods2.api["b"] = cp
	s2.SyncBatch(ctx)
	changed := apiPod(t, client2, "b")
	changed.ResourceVersion = "12"
	changed.Status.Conditions[0].Status = v1.ConditionFalse
	pods2.api["b"] = changed
	if len(s2.due()) != 1 {
		t.Fatal("a newer copy that differs is not due")
	}
	s2.SyncBatch(ctx)
	if n := countActions(client2, "patch", "status"); n != 2 {
		t.Fatalf("%d status writes, want 2 (the reconcile)", n)
	}
}

// TestSyncerKeysTheWrittenObjectToTheCopyBeforeTheWrite: a copy the watch
// delivers while a write is under way (ours, or somebody else's after it)
// is newer than what the write returned, so it is the one compared next.
func TestSyncerKeysTheWrittenObjectToTheCopyBeforeTheWrite(t *testing.T) {
	pod, s, m, client, pods, old := runningOverCopy(t)
	client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		newer := old.DeepCopy()
		newer.ResourceVersion = "11"
		newer.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}, {Type: "example.com/gate", Status: v1.ConditionTrue}}
		pods.api["a"] = newer
		return false, nil, nil
	})
	m.SetPodStatus(pod, ready(v1.ConditionTrue))
	s.SyncBatch(context.Background())
	obj, _, _ := s.base(context.Background(), func() pending { p, _ := s.m.pending("a"); return p }())
	if obj.ResourceVersion != "11" || len(obj.Status.Conditions) != 2 {
		t.Fatalf("the next write's base is version %q with %d conditions, want the copy delivered during the write", obj.ResourceVersion, len(obj.Status.Conditions))
	}
}

// countingPods is fakePods behind a lock (Run reads it from its own
// goroutine), counting the pods the syncer asked about.
type countingPods struct {
	mu    sync.Mutex
	pods  *fakePods
	asked map[types.UID]int
}

func (c *countingPods) PodByUID(uid types.UID) (*v1.Pod, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked[uid]++
	return c.pods.PodByUID(uid)
}

func (c *countingPods) APIPod(uid types.UID) *v1.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pods.APIPod(uid)
}

func (c *countingPods) CouldHaveRunningContainers(uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pods.CouldHaveRunningContainers(uid)
}

// askedAbout returns and forgets the pods asked about.
func (c *countingPods) askedAbout() []types.UID {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Sorted(maps.Keys(c.asked))
	clear(c.asked)
	return out
}

func (c *countingPods) set(fn func(*fakePods)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fn(c.pods)
}

func manyPods(n int) []*v1.Pod {
	objs := make([]*v1.Pod, n)
	for i := range objs {
		objs[i] = testPod(fmt.Sprintf("p%03d", i))
	}
	return objs
}

// TestSyncerChecksOnlyTheChangedPodsOnAChange: a status change costs the
// syncer the check of the pods that changed since it last looked, not of
// every pod (over a burst that was the square of the pods); the resync
// still looks at every pod.
func TestSyncerChecksOnlyTheChangedPodsOnAChange(t *testing.T) {
	objs := manyPods(100)
	s, m, _, fp := newSyncer(t, objs...)
	pods := &countingPods{pods: fp, asked: map[types.UID]int{}}
	s.pods = pods
	for _, o := range objs {
		m.SetPodStatus(o, ready(v1.ConditionTrue))
	}
	if s.SyncBatch(context.Background()) {
		t.Fatal("a write asked for a retry")
	}
	if n := len(s.dueChanged()); n != 0 {
		t.Fatalf("%d pods due after every status was written", n)
	}
	pods.askedAbout()

	m.SetPodStatus(objs[7], ready(v1.ConditionFalse))
	m.SetPodStatus(objs[3], v1.PodStatus{Phase: v1.PodPending})
	if got := dueUIDs2(s.dueChanged()); got != "[p007:true p003:false]" {
		t.Fatalf("due on the change: %s", got)
	}
	if got := pods.askedAbout(); fmt.Sprint(got) != "[p003 p007]" {
		t.Fatalf("the change checked %v, want only the two pods that changed", got)
	}
	if n := len(s.dueChanged()); n != 0 {
		t.Fatalf("the same changes were due twice (%d)", n)
	}
	if got := s.due(); len(got) != 2 {
		t.Fatalf("the resync found %d pods due, want the 2 changed", len(got))
	}
	if got := pods.askedAbout(); len(got) != len(objs) {
		t.Fatalf("the resync checked %d pods, want all %d", len(got), len(objs))
	}
	// A pod forgotten after its change is not listed.
	m.SetPodStatus(objs[5], ready(v1.ConditionFalse))
	keep := map[types.UID]bool{}
	for _, o := range objs[6:] {
		keep[o.UID] = true
	}
	m.RemoveOrphanedStatuses(keep)
	if got := dueUIDs2(s.dueChanged()); got != "[]" {
		t.Fatalf("due after the changed pod was forgotten: %s", got)
	}
}

func dueUIDs2(ds []dueWrite) string {
	out := []string{}
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%s:%v", d.uid, d.urgent))
	}
	return fmt.Sprint(out)
}

// TestSyncerRunDeletesAPodThatBecameDeletableWithoutAChange: a deleted
// pod's final status is written while its containers may still run (the
// API has its terminal phase already, so nothing is held back and
// retried); when they are known gone, nothing changes in its status, and
// the resync deletes it.
func TestSyncerRunDeletesAPodThatBecameDeletableWithoutAChange(t *testing.T) {
	pod := testPod("a")
	pod.Status.Phase = v1.PodSucceeded
	client := fake.NewClientset(pod)
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	m := New(clk)
	deleting := pod.DeepCopy()
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	pods := &countingPods{asked: map[types.UID]int{}, pods: &fakePods{
		desired: map[types.UID]*v1.Pod{"a": deleting}, api: map[types.UID]*v1.Pod{}, running: map[types.UID]bool{"a": true}}}
	s := NewAPISyncer(APISyncerOptions{Client: kubeclienttest.Wrap(client), Status: m, Pods: pods, Clock: clk})
	// The final status is there before Run, whose first look (at every
	// pod) queues it once: taken as a change too, it could be queued
	// again and its second turn come after its containers are gone.
	m.TerminatePod(deleting)
	m.takeChanged()
	<-m.Changed()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	testutil.WaitFor(t, "the final status written", func() bool { return countActions(client, "patch", "status") == 1 })
	pods.set(func(f *fakePods) { f.running["a"] = false })
	// Another pod's change makes the syncer look at the changes, which
	// do not include the deletable pod.
	m.SetPodStatus(testPod("b"), ready(v1.ConditionTrue))
	testutil.WaitFor(t, "the other pod's change checked", func() bool { return slices.Contains(pods.askedAbout(), "b") })
	if n := countActions(client, "delete", ""); n != 0 {
		t.Fatalf("%d deletes before the resync", n)
	}
	testutil.WaitFor(t, "the resync ticker", func() bool { return clk.HasWaiters() })
	clk.Step(resyncPeriod)
	testutil.WaitFor(t, "the pod deleted", func() bool { return countActions(client, "delete", "") == 1 })
}
