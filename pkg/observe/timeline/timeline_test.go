package timeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

var t0 = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)

func testPod(name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name + "-uid"),
		Annotations: map[string]string{podutil.ConfigFirstSeenAnnotationKey: t0.Format(time.RFC3339Nano), podutil.ConfigSourceAnnotationKey: "api"}}}
}

// fakeSyncer takes the time it is told per call, and reports the phase
// it is told after each sync.
type fakeSyncer struct {
	clock  *testingclock.FakeClock
	took   []time.Duration
	phases []v1.PodPhase
	// ready says, per sync, whether the pod is Ready after it (not when
	// left out).
	ready  []bool
	status map[types.UID]v1.PodStatus
	err    error
}

func (f *fakeSyncer) syncPod(pod *v1.Pod) error {
	f.clock.Step(f.took[0])
	f.took = f.took[1:]
	st := v1.PodStatus{Phase: f.phases[0]}
	f.phases = f.phases[1:]
	if len(f.ready) > 0 {
		ready := v1.ConditionFalse
		if f.ready[0] {
			ready = v1.ConditionTrue
		}
		st.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: ready}}
		f.ready = f.ready[1:]
	}
	f.status[pod.UID] = st
	return f.err
}

// observed runs the fake's calls under an observer, as the pod workers
// run theirs.
type observedSyncer struct {
	f *fakeSyncer
	o instrument.SyncObserver
}

func (s observedSyncer) run(ctx context.Context, c instrument.Call, fn func() error) error {
	return instrument.Run(ctx, []instrument.SyncObserver{s.o}, c, func(context.Context) error { return fn() })
}

func (s observedSyncer) SyncPod(ctx context.Context, updateType string, pod *v1.Pod) error {
	return s.run(ctx, instrument.Call{Stage: instrument.SyncPod, Pod: pod, UpdateType: updateType}, func() error { return s.f.syncPod(pod) })
}

func (s observedSyncer) SyncTerminatingPod(ctx context.Context, pod *v1.Pod, grace *int64) error {
	return s.run(ctx, instrument.Call{Stage: instrument.SyncTerminatingPod, Pod: pod, UpdateType: "kill", GracePeriod: grace}, func() error {
		s.f.clock.Step(2 * time.Second)
		return nil
	})
}

func (s observedSyncer) SyncTerminatedPod(ctx context.Context, pod *v1.Pod) error {
	return s.run(ctx, instrument.Call{Stage: instrument.SyncTerminatedPod, Pod: pod, UpdateType: "kill"}, func() error { return nil })
}

func (f *fakeSyncer) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	s, ok := f.status[uid]
	return s, ok
}

// The steps from first seen to running tile the start: waits and syncs
// add up to the start latency exactly, as the pod start metric measures
// it; after the pod runs, syncs are recorded without waits, and the
// first that leaves it Ready is noted; termination is recorded and the
// pod's timeline is kept among the finished ones. Every step is observed.
func TestSyncerTilesTheStart(t *testing.T) {
	clk := testingclock.NewFakeClock(t0.Add(time.Second))
	observed := 0
	r := New(Options{Clock: clk, KeepFinished: 5, Observe: func(*v1.Pod, Step) { observed++ }})
	f := &fakeSyncer{clock: clk, took: []time.Duration{2 * time.Second, time.Second, 500 * time.Millisecond, 100 * time.Millisecond},
		phases: []v1.PodPhase{v1.PodPending, v1.PodRunning, v1.PodRunning, v1.PodRunning}, ready: []bool{false, false, true, true},
		status: map[types.UID]v1.PodStatus{}}
	s := observedSyncer{f, r.Syncs(f)}
	pod := testPod("web")
	ctx := context.Background()
	mustSync := func() {
		if err := s.SyncPod(ctx, "sync", pod); err != nil {
			t.Fatal(err)
		}
	}
	mustSync() // 1s..3s, still Pending
	clk.Step(2 * time.Second)
	mustSync() // 5s..6s, Running
	clk.Step(10 * time.Second)
	mustSync() // after running: no wait step; Ready
	mustSync() // Ready again: noted once
	grace := int64(30)
	if err := s.SyncTerminatingPod(ctx, pod, &grace); err != nil {
		t.Fatal(err)
	}
	if err := s.SyncTerminatedPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	tl, ok := r.Lookup("ns", "web")
	if !ok {
		t.Fatal("no timeline")
	}
	var got []string
	var tiled time.Duration
	for _, st := range tl.Steps {
		got = append(got, fmt.Sprintf("%s %s +%v %v %s", st.Kind, st.Name, st.Start.Sub(t0), st.Duration(), st.Detail))
		if (st.Kind == instrument.KindWait || st.Kind == instrument.KindSync) && !st.End.After(t0.Add(6*time.Second)) {
			tiled += st.Duration()
		}
	}
	want := []string{
		"source seen +0s 0s source api",
		"wait waiting to be admitted and synced +0s 1s ",
		"sync sync (sync) +1s 2s ",
		"wait waiting for the next sync +3s 2s ",
		"sync sync (sync) +5s 1s ",
		"running running +6s 0s ",
		"sync sync (sync) +16s 500ms ",
		"ready ready +16.5s 0s ",
		"sync sync (sync) +16.5s 100ms ",
		"terminating stopping containers +16.6s 2s grace period 30s",
		"terminated releasing volumes and cgroups +18.6s 0s ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("steps:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if observed != len(want) {
		t.Fatalf("%d steps observed, %d recorded", observed, len(want))
	}
	if start, ok := StartLatency(tl); !ok || start != 6*time.Second || tiled != start {
		t.Fatalf("start latency %v (%v), waits and syncs add up to %v", start, ok, tiled)
	}
}

// A failed sync records its error as the outcome.
func TestSyncErrorIsTheOutcome(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	r := New(Options{Clock: clk})
	f := &fakeSyncer{clock: clk, took: []time.Duration{time.Second}, phases: []v1.PodPhase{v1.PodPending},
		status: map[types.UID]v1.PodStatus{}, err: errors.New("ErrImagePull: no such image")}
	if err := (observedSyncer{f, r.Syncs(f)}).SyncPod(context.Background(), "create", testPod("a")); err == nil {
		t.Fatal("error lost")
	}
	tl, _ := r.Get("a-uid")
	if s := tl.Steps[len(tl.Steps)-1]; s.Kind != instrument.KindSync || s.Outcome != "ErrImagePull: no such image" || s.Name != "sync (create)" {
		t.Fatalf("last step %+v", s)
	}
}

// Events about a pod or one of its containers land in its timeline and
// still reach the next recorder; events about other objects only the
// latter.
func TestEventsAreRecorded(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	r := New(Options{Clock: clk})
	next := record.NewFakeRecorder(10)
	ev := r.Events(next)
	pod := testPod("a")
	ev.Event(pod, v1.EventTypeNormal, "Scheduled", "assigned")
	ev.Eventf(&v1.ObjectReference{Kind: "Pod", UID: pod.UID, Namespace: "ns", Name: "a", FieldPath: "spec.containers{main}"},
		v1.EventTypeWarning, "BackOff", "Back-off restarting %s", "main")
	ev.Event(&v1.Node{}, v1.EventTypeNormal, "NodeReady", "ready")
	if len(next.Events) != 3 {
		t.Fatalf("%d events forwarded", len(next.Events))
	}
	tl, _ := r.Get(pod.UID)
	if len(tl.Steps) != 2 || tl.Steps[1].Name != "BackOff" || tl.Steps[1].Outcome != "warning" ||
		tl.Steps[1].Detail != "spec.containers{main}: Back-off restarting main" {
		t.Fatalf("steps %+v", tl.Steps)
	}
}

// A timeline keeps its first steps and the newest, counting the dropped;
// only the last KeepFinished finished pods stay.
func TestBounds(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	r := New(Options{Clock: clk, MaxSteps: 64, KeepFinished: 2})
	pod := testPod("a")
	for i := range 100 {
		r.Add(pod, Step{Kind: instrument.KindEvent, Name: fmt.Sprint(i)})
	}
	tl, _ := r.Get(pod.UID)
	if len(tl.Steps) != 64 || tl.Dropped != 36 || tl.Steps[keepFirst-1].Name != fmt.Sprint(keepFirst-1) || tl.Steps[63].Name != "99" ||
		tl.Steps[keepFirst].Name != fmt.Sprint(keepFirst+36) {
		t.Fatalf("%d steps, %d dropped, %s..%s", len(tl.Steps), tl.Dropped, tl.Steps[keepFirst].Name, tl.Steps[63].Name)
	}
	for _, name := range []string{"a", "b", "c"} {
		r.Add(testPod(name), Step{Kind: instrument.KindEvent})
		r.Finish(types.UID(name + "-uid"))
	}
	if _, ok := r.Lookup("ns", "a"); ok {
		t.Fatal("the oldest finished pod was kept")
	}
	for _, name := range []string{"b", "c"} {
		if _, ok := r.Lookup("ns", name); !ok {
			t.Fatalf("%s was dropped", name)
		}
	}
}

func TestWriteText(t *testing.T) {
	tl := Timeline{UID: "u", Namespace: "ns", Name: "web", Steps: []Step{
		{Kind: instrument.KindSource, Name: "seen", Start: t0, End: t0, Outcome: "ok"},
		{Kind: instrument.KindWait, Name: "waiting", Start: t0, End: t0.Add(time.Second), Outcome: "ok"},
		{Kind: instrument.KindSync, Name: "sync (create)", Start: t0.Add(time.Second), End: t0.Add(4 * time.Second), Outcome: "ok"},
		{Kind: instrument.KindRunning, Name: "running", Start: t0.Add(4 * time.Second), End: t0.Add(4 * time.Second), Outcome: "ok"},
	}}
	var b strings.Builder
	if err := WriteText(&b, tl); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"pod ns/web (uid u)", "started in 4s (first seen to running)",
		"+1s  3s    sync     sync (create)  ok       ..........##############################"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
}

// A finished pod's timeline is handed on once (to the node journal), and
// timelines kept from before a restart are readable again, within the
// same bound.
func TestFinishedAndRestored(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	var kept []string
	r := New(Options{Clock: clk, MaxSteps: 64, KeepFinished: 2, Finished: func(tl Timeline) {
		kept = append(kept, fmt.Sprintf("%s:%d", tl.Name, len(tl.Steps)))
	}})
	r.Restore([]Timeline{{UID: "old-uid", Namespace: "ns", Name: "old"}, {UID: "older-uid", Namespace: "ns", Name: "older"}})
	r.Add(testPod("a"), Step{Kind: instrument.KindEvent})
	r.Finish("a-uid")
	r.Finish("a-uid")
	if strings.Join(kept, ",") != "a:1" {
		t.Fatalf("handed on: %v", kept)
	}
	if _, ok := r.Lookup("ns", "old"); ok {
		t.Error("the oldest restored timeline was kept beyond the bound")
	}
	if _, ok := r.Lookup("ns", "older"); !ok {
		t.Error("a restored timeline is not readable")
	}
}
