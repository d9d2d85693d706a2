package podworkers

import (
	"context"
	"fmt"
	"math/rand"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// checkingSyncer verifies the workers' guarantees as calls arrive: a
// pod's methods never run concurrently, nothing syncs a pod after its
// termination began, and the terminated step runs once, last.
type checkingSyncer struct {
	mu         sync.Mutex
	active     map[types.UID]bool
	terminated map[types.UID]bool
	finished   map[types.UID]int
	errs       []string
	calls      atomic.Int64
}

func newCheckingSyncer() *checkingSyncer {
	return &checkingSyncer{active: map[types.UID]bool{}, terminated: map[types.UID]bool{}, finished: map[types.UID]int{}}
}

func (s *checkingSyncer) enter(uid types.UID, method string) {
	s.calls.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active[uid] {
		s.errs = append(s.errs, fmt.Sprintf("%s %s while another call for the pod runs", method, uid))
	}
	s.active[uid] = true
	if method == "SyncPod" && s.terminated[uid] {
		s.errs = append(s.errs, fmt.Sprintf("SyncPod %s after termination began", uid))
	}
	if method == "SyncTerminatingPod" {
		s.terminated[uid] = true
	}
	if method == "SyncTerminatedPod" {
		if !s.terminated[uid] {
			s.errs = append(s.errs, fmt.Sprintf("SyncTerminatedPod %s before SyncTerminatingPod", uid))
		}
		s.finished[uid]++
	}
}

func (s *checkingSyncer) leave(uid types.UID) {
	// Let other goroutines interleave inside the call.
	runtime.Gosched()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active[uid] = false
}

func (s *checkingSyncer) SyncPod(ctx context.Context, _ UpdateType, pod, _ *v1.Pod, _ *container.PodStatus) (bool, error) {
	s.enter(pod.UID, "SyncPod")
	defer s.leave(pod.UID)
	return false, nil
}

func (s *checkingSyncer) SyncTerminatingPod(ctx context.Context, pod *v1.Pod, _ *container.PodStatus, _ *int64, _ PodStatusFunc) error {
	s.enter(pod.UID, "SyncTerminatingPod")
	defer s.leave(pod.UID)
	return nil
}

func (s *checkingSyncer) SyncTerminatingRuntimePod(ctx context.Context, p *container.Pod) error {
	s.enter(p.ID, "SyncTerminatingRuntimePod")
	defer s.leave(p.ID)
	return nil
}

func (s *checkingSyncer) SyncTerminatedPod(ctx context.Context, pod *v1.Pod, _ *container.PodStatus) error {
	s.enter(pod.UID, "SyncTerminatedPod")
	defer s.leave(pod.UID)
	return nil
}

type freshStatus struct{}

func (freshStatus) GetNewerThan(ctx context.Context, uid types.UID, _, _ string, _ time.Time) (*container.PodStatus, error) {
	return &container.PodStatus{ID: uid}, nil
}
func (freshStatus) Get(uid types.UID) (*container.PodStatus, error) {
	return &container.PodStatus{ID: uid}, nil
}

func TestConcurrentUpdatesKeepTheGuarantees(t *testing.T) {
	before := runtime.NumGoroutine()
	syncer := newCheckingSyncer()
	clk := clock.RealClock{}
	pw := New(Options{Syncer: syncer, Status: freshStatus{}, WorkQueue: NewWorkQueue(clk), Clock: clk,
		ResyncInterval: time.Minute, BackOffPeriod: time.Second})

	const pods = 20
	podList := make([]*v1.Pod, pods)
	for i := range podList {
		p := &v1.Pod{}
		p.UID, p.Name, p.Namespace = types.UID(fmt.Sprintf("p%d", i)), fmt.Sprintf("p%d", i), "ns"
		podList[i] = p
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			r := rand.New(rand.NewSource(seed))
			for i := 0; i < 300; i++ {
				p := podList[r.Intn(pods)]
				switch r.Intn(5) {
				case 0:
					pw.UpdatePod(UpdatePodOptions{Pod: p, UpdateType: UpdateCreate})
				case 1, 2:
					pw.UpdatePod(UpdatePodOptions{Pod: p, UpdateType: UpdateSync})
				case 3:
					pw.UpdatePod(UpdatePodOptions{Pod: p, UpdateType: UpdateUpdate})
				case 4:
					grace := int64(r.Intn(30))
					pw.UpdatePod(UpdatePodOptions{Pod: p, UpdateType: UpdateKill,
						KillPodOptions: &KillPodOptions{PodTerminationGracePeriodSecondsOverride: &grace}})
				}
			}
		}(int64(g))
	}
	wg.Wait()
	for _, p := range podList {
		pw.UpdatePod(UpdatePodOptions{Pod: p, UpdateType: UpdateKill})
	}

	deadline := time.Now().Add(10 * time.Second)
	for _, p := range podList {
		for !pw.ShouldPodBeFinished(p.UID) {
			if time.Now().After(deadline) {
				t.Fatalf("pod %s never finished", p.UID)
			}
			runtime.Gosched()
		}
	}
	syncer.mu.Lock()
	for _, e := range syncer.errs {
		t.Error(e)
	}
	for _, p := range podList {
		if n := syncer.finished[p.UID]; n != 1 {
			t.Errorf("pod %s: SyncTerminatedPod ran %d times", p.UID, n)
		}
	}
	syncer.mu.Unlock()

	// Idle workers exit: no goroutine is left per pod.
	for runtime.NumGoroutine() > before+2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left, %d before", runtime.NumGoroutine(), before)
		}
		runtime.Gosched()
	}
}

// closingSyncer stands for the runtime connection: a sync blocks in a
// "runtime call" until its context ends, and any call after the
// connection closed is an error.
type closingSyncer struct {
	checkingSyncer
	entered chan types.UID
	closed  atomic.Bool
	late    atomic.Int64
	// cancelled counts syncs that returned because their context ended.
	cancelled atomic.Int64
}

func (s *closingSyncer) SyncPod(ctx context.Context, _ UpdateType, pod, _ *v1.Pod, _ *container.PodStatus) (bool, error) {
	if s.closed.Load() {
		s.late.Add(1)
	}
	s.entered <- pod.UID
	<-ctx.Done()
	if s.closed.Load() {
		s.late.Add(1)
	}
	s.cancelled.Add(1)
	return false, ctx.Err()
}

// When nodelet stops, Run cancels the syncs under way and returns only
// once they have returned: nothing calls the runtime after its connection
// closes (run.go closes it when every component's Run has returned).
func TestRunWaitsForSyncsBeforeTheConnectionCloses(t *testing.T) {
	syncer := &closingSyncer{entered: make(chan types.UID, 10)}
	clk := clock.RealClock{}
	pw := New(Options{Syncer: syncer, Status: freshStatus{}, WorkQueue: NewWorkQueue(clk), Clock: clk,
		ResyncInterval: time.Minute, BackOffPeriod: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- pw.Run(ctx) }()
	for i := 0; i < 3; i++ {
		p := &v1.Pod{}
		p.UID, p.Name, p.Namespace = types.UID(fmt.Sprintf("p%d", i)), fmt.Sprintf("p%d", i), "ns"
		pw.UpdatePod(UpdatePodOptions{Pod: p, UpdateType: UpdateCreate})
	}
	for i := 0; i < 3; i++ {
		select {
		case <-syncer.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the syncs did not start")
		}
	}
	cancel()
	select {
	case <-ran:
	case <-time.After(stopWait + 5*time.Second):
		t.Fatal("Run did not return")
	}
	syncer.closed.Store(true)
	if got := syncer.cancelled.Load(); got != 3 {
		t.Fatalf("%d syncs returned before Run did, want all 3", got)
	}
	// A pod update after the stop starts no worker.
	p := &v1.Pod{}
	p.UID, p.Name, p.Namespace = "late", "late", "ns"
	pw.UpdatePod(UpdatePodOptions{Pod: p, UpdateType: UpdateCreate})
	// UpdatePod returned: had it started a worker, the pod would be
	// active (wake marks it before the executor runs).
	pw.mu.Lock()
	active, known := pw.active["late"], pw.statuses["late"] != nil
	pw.mu.Unlock()
	if active || !known {
		t.Fatalf("after the stop: the update was recorded %v, a worker started %v; want recorded, none started", known, active)
	}
	if syncer.late.Load() != 0 {
		t.Fatal("a sync called the runtime after its connection closed")
	}
}
