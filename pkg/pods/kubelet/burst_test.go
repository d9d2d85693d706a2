package kubelet

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testutil"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/pods/podworkers"
)

// TestBurstDuringRemoveDoesNotDeadlock reproduces the wedge seen under a
// pod burst: the sync loop, handling a REMOVE, asks whether every source
// is ready (which reads the merge's registered sources) while a source,
// its updates backed up past the channel's buffer, is blocked sending.
// If the merge held its lock across that send, neither would ever move.
func TestBurstDuringRemoveDoesNotDeadlock(t *testing.T) {
	f := newCoreReading(t, 1000, true)
	f.sources.Register("api")
	// The loop handles the first pod's ADD, then stalls there until the
	// source has filled the channel and has more to send.
	release := make(chan struct{})
	var once sync.Once
	f.workers.hook = func(o podworkers.UpdatePodOptions) {
		if o.Pod != nil && o.Pod.Name == "first" {
			once.Do(func() { <-release })
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loopDone := make(chan struct{})
	go func() { _ = f.kl.Run(ctx); close(loopDone) }()
	defer func() { cancel(); <-loopDone }()

	first := apiPod("first", "first", now)
	burst := 3 * cap(f.sources.Updates())
	sourceDone := make(chan struct{})
	go func() {
		defer close(sourceDone)
		f.sources.Set(ctx, "api", []*v1.Pod{first.DeepCopy()}) // ADD first
		f.sources.Set(ctx, "api", nil)                         // REMOVE first
		var set []*v1.Pod
		for i := 0; i < burst; i++ { // one ADD per set: more than the buffer
			set = append(set, apiPod(fmt.Sprintf("p%d", i), fmt.Sprintf("p%d", i), now))
			f.sources.Set(ctx, "api", copies(set))
		}
	}()
	// The channel is full and the source still has sets to send: it is
	// blocked in a send, with the REMOVE next in line for the loop.
	testutil.WaitFor(t, "the condition", func() bool { return len(f.sources.Updates()) == cap(f.sources.Updates()) })
	close(release)

	select {
	case <-sourceDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the source never finished sending: the sync loop and the merge are deadlocked")
	}
	testutil.WaitFor(t, "the condition", func() bool { return f.workers.count() >= burst+2 })
	got := f.workers.take()
	if got[0] != "create first" || got[1] != "kill first" {
		t.Fatalf("first updates %v, want the first pod created then killed", got[:2])
	}
	if last := got[len(got)-1]; last != fmt.Sprintf("create p%d", burst-1) {
		t.Fatalf("last update %q", last)
	}
}

func copies(pods []*v1.Pod) []*v1.Pod {
	out := make([]*v1.Pod, len(pods))
	for i, p := range pods {
		out[i] = p.DeepCopy()
	}
	return out
}

func (w *fakeWorkers) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.updates)
}
