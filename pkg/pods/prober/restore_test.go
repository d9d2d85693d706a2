package prober

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

var t1000 = time.Unix(1000, 0)

// A worker saves a settled result when it changes, and again before the
// saved one would expire (its period times its failure threshold).
func TestResultsAreSaved(t *testing.T) {
	var saved []Saved
	f := newFixture(t, v1.Container{ReadinessProbe: execSpec(0, 3, 1)}, func(o *Options) {
		o.Save = func(s Saved) { saved = append(saved, s) }
	})
	w := f.worker(Readiness)
	f.exec.queue(0, 0, 0, 1, 1, 1)
	got := func() string {
		var out []string
		for _, s := range saved {
			out = append(out, fmt.Sprintf("%s/%s/%s=%s@%v+%v", s.Pod, s.ContainerID, s.Type, s.Result, s.At.Sub(t1000), s.ValidFor))
		}
		saved = nil
		return strings.Join(out, ",")
	}
	want := []string{
		"uid/c1/Readiness=Success@0s+3s", // settled: saved
		"",                               // unchanged, saved 0 s ago
		"uid/c1/Readiness=Success@2s+3s", // unchanged, saved 2 s ago: renewed (more than half of 3 s)
		"",                               // 1st failure of 3: not settled
		"",                               // 2nd
		"uid/c1/Readiness=Failure@5s+3s", // 3rd: changed
	}
	for i, w0 := range want {
		if i > 0 {
			f.clock.Step(time.Second)
		}
		w.probeOnce()
		if g := got(); g != w0 {
			t.Fatalf("probe %d: saved %q, want %q", i, g, w0)
		}
	}
}

// A passed startup probe is not probed again, but its saved result is
// renewed while its container runs.
func TestPassedStartupIsRenewed(t *testing.T) {
	var saved []Saved
	f := newFixture(t, v1.Container{StartupProbe: execSpec(0, 2, 1)}, func(o *Options) {
		o.Save = func(s Saved) { saved = append(saved, s) }
	})
	w := f.worker(Startup)
	for range 3 {
		w.probeOnce()
		f.clock.Step(500 * time.Millisecond)
	}
	if f.exec.count() != 1 {
		t.Fatalf("a passed startup probe ran %d times", f.exec.count())
	}
	// Saved when it passed, renewed after half of its 2 s.
	if len(saved) != 2 || saved[0].Result != Success || !saved[1].At.Equal(t1000.Add(time.Second)) || saved[1].ValidFor != 2*time.Second {
		t.Fatalf("saved %+v", saved)
	}
}

// After a restart a container that is still the same instance starts
// from its saved readiness and passed startup probe; a failed liveness
// or startup probe, an expired result and another instance's are not
// trusted.
func TestRestoredResults(t *testing.T) {
	ago := func(d time.Duration) time.Time { return t1000.Add(-d) }
	restored := []Saved{
		{Pod: "uid", Container: "c", ContainerID: "c1", Type: Readiness, Result: Success, At: ago(2 * time.Second), ValidFor: 3 * time.Second},
		{Pod: "uid", Container: "c", ContainerID: "c1", Type: Startup, Result: Success, At: ago(3 * time.Second), ValidFor: 3 * time.Second},
		{Pod: "uid", Container: "c", ContainerID: "c1", Type: Liveness, Result: Failure, At: ago(time.Second), ValidFor: 3 * time.Second},
		{Pod: "other", Container: "d", ContainerID: "d1", Type: Readiness, Result: Success, At: ago(4 * time.Second), ValidFor: 3 * time.Second},
		{Pod: "other", Container: "e", ContainerID: "e1", Type: Startup, Result: Failure, At: ago(time.Second), ValidFor: 3 * time.Second},
		{Pod: "other", Container: "g", ContainerID: "g1", Type: Readiness, Result: Success, At: ago(time.Second), ValidFor: 3 * time.Second},
	}
	probe := execSpec(0, 3, 1)
	f := newFixture(t, v1.Container{ReadinessProbe: probe, StartupProbe: probe, LivenessProbe: probe}, func(o *Options) { o.Restored = restored })
	c := &f.pod.Spec.Containers[0]
	if !f.m.Started(c, "c1") || !f.m.Ready(c, "c1") || f.m.LivenessFailed("c1") {
		t.Fatalf("c1 before any probe: started %v ready %v liveness failed %v", f.m.Started(c, "c1"), f.m.Ready(c, "c1"), f.m.LivenessFailed("c1"))
	}
	for _, id := range []string{"d1", "e1"} {
		for _, typ := range []Type{Readiness, Startup} {
			if r, ok := f.m.Result(typ, id); ok {
				t.Errorf("%s %s restored as %s", id, typ, r)
			}
		}
	}
	if r, _ := f.m.Result(Readiness, "g1"); r != Success {
		t.Fatalf("g1's readiness not restored")
	}

	// The readiness worker takes the result over: one failure does not
	// overturn it, the threshold's third does.
	w := f.worker(Readiness)
	f.exec.queue(1, 1, 1)
	for i, ready := range []bool{true, true, false} {
		w.probeOnce()
		if f.m.Ready(c, "c1") != ready {
			t.Fatalf("failure %d: ready %v", i+1, !ready)
		}
	}
	// A liveness worker starts counting from zero: one failure of three.
	f.exec.queue(1)
	f.worker(Liveness).probeOnce()
	if f.m.LivenessFailed("c1") {
		t.Fatal("the saved liveness failure was counted")
	}
	// The other pod's restored result goes with it.
	f.m.CleanupPods(map[types.UID]bool{"uid": true})
	if _, ok := f.m.Result(Readiness, "g1"); ok {
		t.Fatal("a gone pod's restored result stayed")
	}
}

// A pod whose startup probe had not passed is not ready after a restart,
// even with a ready result of its container on record.
func TestUnstartedStaysUnready(t *testing.T) {
	probe := execSpec(0, 3, 1)
	f := newFixture(t, v1.Container{ReadinessProbe: probe, StartupProbe: probe}, func(o *Options) {
		o.Restored = []Saved{{Pod: "uid", Container: "c", ContainerID: "c1", Type: Readiness, Result: Success, At: t1000, ValidFor: 3 * time.Second}}
	})
	c := &f.pod.Spec.Containers[0]
	if f.m.Started(c, "c1") || f.m.Ready(c, "c1") {
		t.Fatal("started or ready without a passed startup probe")
	}
	// Another instance of the container does not inherit the result.
	f.status.run("c2", f.clock.Now())
	f.exec.queue(0)
	f.worker(Startup).probeOnce()
	if !f.m.Started(c, "c2") || f.m.Ready(c, "c2") {
		t.Fatal("c2 after its startup probe passed: want started, not ready")
	}
}
