package kubelet

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testutil"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/node/health"
	"github.com/nodelet/nodelet/pkg/pods/podsources"
	"github.com/nodelet/nodelet/pkg/pods/podworkers"
)

// TestStuckSyncLoopIsUnhealthyAndNotReady wedges the sync loop inside an
// iteration and checks that /healthz and the node's readiness both fail
// once the threshold passes, and recover when the loop moves again.
func TestStuckSyncLoopIsUnhealthyAndNotReady(t *testing.T) {
	f := newCore(t, 10)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.workers.hook = func(o podworkers.UpdatePodOptions) {
		if o.Pod != nil && o.Pod.Name == "wedge" {
			once.Do(func() {
				close(entered)
				<-release
			})
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = f.kl.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// A loop that iterates is healthy however much time passes: the sync
	// tick keeps it going.
	for i := 0; i < 40; i++ {
		waitForWaiter(t, f.clock)
		f.clock.Step(time.Second)
	}
	testutil.WaitFor(t, "the condition", func() bool { return f.health.Healthz() == nil })
	if err := f.health.ReadyError(); err != nil {
		t.Fatalf("an iterating loop is not ready: %v", err)
	}

	f.updates <- podsources.PodUpdate{Op: podsources.ADD, Pods: []*v1.Pod{apiPod("w", "wedge", now)}, Source: "api"}
	<-entered
	f.clock.Step(health.DefaultSyncLoopThreshold - time.Second)
	if err := f.health.Healthz(); err != nil {
		t.Fatalf("unhealthy before the threshold: %v", err)
	}
	f.clock.Step(2 * time.Second)
	for name, err := range map[string]error{"healthz": f.health.Healthz(), "ready": f.health.ReadyError()} {
		if err == nil || !strings.Contains(err.Error(), "sync loop last completed an iteration") {
			t.Fatalf("%s with a wedged loop: %v", name, err)
		}
	}

	close(release)
	testutil.WaitFor(t, "the condition", func() bool { return f.health.Healthz() == nil && f.health.ReadyError() == nil })
}

// TestCleanupRequestsCoalesce: the loop never waits for the cleaner, and
// the cleaner gets the newest request.
func TestCleanupRequestsCoalesce(t *testing.T) {
	c := newCleaner(cleaner{})
	for i := 0; i < 5; i++ {
		c.request(cleanupRequest{active: make([]*v1.Pod, i)})
	}
	if r := <-c.requests; len(r.active) != 4 {
		t.Fatalf("cleaner got request %d, want the newest (4)", len(r.active))
	}
	select {
	case <-c.requests:
		t.Fatal("more than one request pending")
	default:
	}
}
