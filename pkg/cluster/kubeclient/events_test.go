package kubeclient

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

// deliveries is a sink that hands each event written to the test.
type deliveries chan *v1.Event

func (d deliveries) Create(e *v1.Event) (*v1.Event, error)          { d <- e; return e, nil }
func (d deliveries) Update(e *v1.Event) (*v1.Event, error)          { d <- e; return e, nil }
func (d deliveries) Patch(e *v1.Event, _ []byte) (*v1.Event, error) { d <- e; return e, nil }

func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// heldAfterChurn is how much live heap a broadcaster holds once the
// events of a pod start and stop (four, as nodelet writes them) have gone
// out for each of pods pods, every one deleted since.
func heldAfterChurn(t *testing.T, b record.EventBroadcaster, pods int) int64 {
	t.Helper()
	sink := make(deliveries)
	before := liveHeap()
	b.StartRecordingToSink(sink)
	r := b.NewRecorder(Scheme, v1.EventSource{Component: "kubelet", Host: "node-1"})
	for i := 0; i < pods; i++ {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "churn", Name: fmt.Sprintf("job-%d", i),
			UID: types.UID(fmt.Sprintf("9c25de54-256e-4979-b931-%012d", i))}}
		r.Eventf(pod, v1.EventTypeNormal, "Pulled", "Container image %q already present on machine", "docker.io/library/busybox:1.36")
		r.Event(pod, v1.EventTypeNormal, "Created", "Created container: main")
		r.Event(pod, v1.EventTypeNormal, "Started", "Started container main")
		r.Event(pod, v1.EventTypeNormal, "Killing", "Stopping container main")
		// One pod's events at a time: the broadcaster drops what
		// overflows its queue, and a dropped event reaches no cache.
		for n := 0; n < 4; n++ {
			select {
			case <-sink:
			case <-time.After(time.Minute):
				t.Fatalf("pod %d: event %d never reached the sink", i, n)
			}
		}
	}
	held := liveHeap() - before
	runtime.KeepAlive(b)
	return held
}

// TestEventCachesStayBoundedAsPodsComeAndGo: the correlator's caches
// keep entries for deleted pods until they are evicted, so their bound is
// what a node that has run many pods holds. client-go's default is
// measured beside nodelet's, to show the measurement sees the caches.
func TestEventCachesStayBoundedAsPodsComeAndGo(t *testing.T) {
	const pods = 2000
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	upstream := record.NewBroadcaster(record.WithContext(ctx))
	defaultHeld := heldAfterChurn(t, upstream, pods)
	upstream.Shutdown()
	if defaultHeld < 3<<20 {
		t.Fatalf("client-go's default caches held %.2f MiB after %d pods; the measurement misses them", mib(defaultHeld), pods)
	}

	ours := NewEventBroadcaster(ctx, 110)
	defer ours.Shutdown()
	held := heldAfterChurn(t, ours, pods)
	if held > 3<<19 {
		t.Fatalf("nodelet's broadcaster held %.2f MiB after %d pods (client-go's default %.2f MiB)", mib(held), pods, mib(defaultHeld))
	}
	t.Logf("after %d pods: %.2f MiB held, client-go's default %.2f MiB", pods, mib(held), mib(defaultHeld))
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func TestEventCacheSizeFollowsMaxPods(t *testing.T) {
	for maxPods, want := range map[int]int{0: 512, 110: 512, 250: 1000, 1000: 4000} {
		if got := EventCacheSize(maxPods); got != want {
			t.Errorf("EventCacheSize(%d) = %d, want %d", maxPods, got, want)
		}
	}
}
