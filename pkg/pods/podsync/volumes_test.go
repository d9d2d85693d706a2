package podsync

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/pods/podworkers"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// gatedVolumes holds each set-up until the test says how it ends.
type gatedVolumes struct {
	started chan string
	end     chan error
	// returned counts set-ups that have returned.
	returned atomic.Int32
	// unservable is what Unservable says.
	unservable error
}

func newGatedVolumes() *gatedVolumes {
	return &gatedVolumes{started: make(chan string, 4), end: make(chan error)}
}

func (g *gatedVolumes) WaitForAttachAndMount(ctx context.Context, pod *v1.Pod) error {
	defer g.returned.Add(1)
	g.started <- string(pod.UID)
	select {
	case err := <-g.end:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (*gatedVolumes) WaitForUnmount(context.Context, *v1.Pod) error { return nil }
func (g *gatedVolumes) Unservable(*v1.Pod) error                    { return g.unservable }

// syncAsync runs SyncPod on its own goroutine.
func syncAsync(ctx context.Context, s *PodSyncer, p *v1.Pod, st *container.PodStatus) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := s.SyncPod(ctx, podworkers.UpdateCreate, p, nil, st)
		done <- err
	}()
	return done
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func receive[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// A first start creates the sandbox while the volumes are set up, and
// creates no container before they are.
func TestFirstStartSetsVolumesUpBesideTheSandbox(t *testing.T) {
	s, st, rt := newSyncer(t, nil)
	vols := newGatedVolumes()
	s.hooks = splitHooks([]Hook{VolumesHook(vols)})
	done := syncAsync(context.Background(), s, apiPod("a", "a", now), &container.PodStatus{ID: "a"})

	receive(t, "the volume set-up", vols.started)
	waitFor(t, "the sandbox, with the volumes still being set up", func() bool { n, _ := rt.Counts(); return n == 1 })
	if _, n := rt.Counts(); n != 0 {
		t.Fatalf("%d containers created before the volumes were set up", n)
	}
	vols.end <- nil
	if err := receive(t, "the sync", done); err != nil {
		t.Fatal(err)
	}
	if _, n := rt.Counts(); n != 1 {
		t.Fatalf("containers %d after the volumes were set up, want 1", n)
	}
	if got, _ := st.GetPodStatus("a"); got.Phase != v1.PodRunning {
		t.Fatalf("phase %s", got.Phase)
	}
}

// Volumes that fail beside the sandbox's creation stop the sync before
// any container, and are its error. The next sync reuses the sandbox,
// and waits for the volumes before the runtime does anything.
func TestVolumesThatFailBesideTheSandboxStartNoContainer(t *testing.T) {
	s, _, rt := newSyncer(t, nil)
	vols := newGatedVolumes()
	s.hooks = splitHooks([]Hook{VolumesHook(vols)})
	ctx := context.Background()
	done := syncAsync(ctx, s, apiPod("a", "a", now), &container.PodStatus{ID: "a"})
	receive(t, "the volume set-up", vols.started)
	waitFor(t, "the sandbox", func() bool { n, _ := rt.Counts(); return n == 1 })
	vols.end <- errors.New("configmap \"cfg\" not found")
	err := receive(t, "the sync", done)
	if err == nil || !strings.Contains(err.Error(), "unable to attach or mount volumes") || !strings.Contains(err.Error(), "cfg") {
		t.Fatalf("err %v", err)
	}
	if sb, n := rt.Counts(); sb != 1 || n != 0 {
		t.Fatalf("sandboxes %d, containers %d: want 1 and 0", sb, n)
	}

	// The retry finds the sandbox running: the volumes come first, and
	// when they fail again the runtime is not asked for anything.
	cur, err := s.runtime.GetPodStatus(ctx, "a", "a", "ns")
	if err != nil || !sandboxReady(cur) {
		t.Fatalf("the sandbox is not ready: %v", err)
	}
	rt.ResetCalls()
	done = syncAsync(ctx, s, apiPod("a", "a", now), cur)
	receive(t, "the second set-up", vols.started)
	vols.end <- errors.New("still missing")
	if err := receive(t, "the second sync", done); err == nil {
		t.Fatal("the second sync did not fail")
	}
	if calls := rt.Calls(); len(calls) != 0 {
		t.Fatalf("the runtime was called with the volumes failing: %v", calls)
	}
	done = syncAsync(ctx, s, apiPod("a", "a", now), cur)
	receive(t, "the third set-up", vols.started)
	vols.end <- nil
	if err := receive(t, "the third sync", done); err != nil {
		t.Fatal(err)
	}
	if sb, n := rt.Counts(); sb != 1 || n != 1 {
		t.Fatalf("sandboxes %d, containers %d: want the sandbox reused and 1 container", sb, n)
	}
}

// A sync cancelled while the volumes are set up returns only once the
// set-up has: the teardown that follows must not race with it.
func TestCancelledSyncWaitsForTheVolumeSetUp(t *testing.T) {
	s, _, rt := newSyncer(t, nil)
	vols := newGatedVolumes()
	s.hooks = splitHooks([]Hook{VolumesHook(vols)})
	ctx, cancel := context.WithCancel(context.Background())
	done := syncAsync(ctx, s, apiPod("a", "a", now), &container.PodStatus{ID: "a"})
	receive(t, "the volume set-up", vols.started)
	waitFor(t, "the sandbox", func() bool { n, _ := rt.Counts(); return n == 1 })
	cancel()
	if err := receive(t, "the sync", done); err == nil {
		t.Fatal("a cancelled sync reported success")
	}
	if vols.returned.Load() != 1 {
		t.Fatal("the sync returned before the volume set-up did")
	}
	if _, n := rt.Counts(); n != 0 {
		t.Fatalf("%d containers created by a cancelled sync", n)
	}
}

// A pod whose volumes can never be set up gets no sandbox: it waits for
// them first, as upstream's does.
func TestUnservableVolumesGetNoSandbox(t *testing.T) {
	s, _, rt := newSyncer(t, nil)
	vols := newGatedVolumes()
	vols.unservable = errors.New("static pods may not refer to API objects")
	s.hooks = splitHooks([]Hook{VolumesHook(vols)})
	done := syncAsync(context.Background(), s, apiPod("a", "a", now), &container.PodStatus{ID: "a"})
	receive(t, "the volume set-up", vols.started)
	vols.end <- vols.unservable
	if err := receive(t, "the sync", done); err == nil || !strings.Contains(err.Error(), "static pods") {
		t.Fatalf("err %v", err)
	}
	if calls := rt.Calls(); len(calls) != 0 {
		t.Fatalf("the runtime was called for a pod whose volumes cannot be set up: %v", calls)
	}
}

// gatedGrants holds each write of the staged grants until the test says
// how it ends.
type gatedGrants struct {
	started chan struct{}
	end     chan error
}

func (g *gatedGrants) Commit() error {
	g.started <- struct{}{}
	return <-g.end
}

// A pod's grant is written beside its sandbox, and its first container
// waits for the write; a write that fails is logged and the pod runs, as
// it did when the sync loop wrote the grants.
func TestFirstContainerWaitsForTheGrantWrite(t *testing.T) {
	s, _, rt := newSyncer(t, nil)
	grants := &gatedGrants{started: make(chan struct{}, 1), end: make(chan error)}
	s.hooks = splitHooks([]Hook{GrantsHook(grants)})
	done := syncAsync(context.Background(), s, apiPod("a", "a", now), &container.PodStatus{ID: "a"})
	receive(t, "the grant write", grants.started)
	waitFor(t, "the sandbox, with the grant being written", func() bool { n, _ := rt.Counts(); return n == 1 })
	if _, n := rt.Counts(); n != 0 {
		t.Fatalf("%d containers created before the grant was written", n)
	}
	grants.end <- errors.New("disk full")
	if err := receive(t, "the sync", done); err != nil {
		t.Fatalf("a grant that could not be written stopped the pod: %v", err)
	}
	if _, n := rt.Counts(); n != 1 {
		t.Fatalf("containers %d, want 1", n)
	}
}
