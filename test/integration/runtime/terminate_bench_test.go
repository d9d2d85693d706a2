//go:build integration

package runtime

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/testbed"
	"github.com/nodelet/nodelet/pkg/pods/pleg"
	"github.com/nodelet/nodelet/pkg/pods/podstatus"
	"github.com/nodelet/nodelet/pkg/pods/podsync"
	"github.com/nodelet/nodelet/pkg/pods/podworkers"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/containeropts"
	"github.com/nodelet/nodelet/pkg/runtime/images"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
)

// timedRuntime notes when StopContainer calls return and how long they
// and StopPodSandbox took.
type timedRuntime struct {
	kuberuntime.RuntimeService
	mu          sync.Mutex
	stopped     time.Time
	stopCost    time.Duration
	sandboxCost time.Duration
}

func (r *timedRuntime) StopPodSandbox(ctx context.Context, in *runtimeapi.StopPodSandboxRequest, opts ...grpc.CallOption) (*runtimeapi.StopPodSandboxResponse, error) {
	start := time.Now()
	resp, err := r.RuntimeService.StopPodSandbox(ctx, in, opts...)
	r.mu.Lock()
	r.sandboxCost += time.Since(start)
	r.mu.Unlock()
	return resp, err
}

func (r *timedRuntime) StopContainer(ctx context.Context, in *runtimeapi.StopContainerRequest, opts ...grpc.CallOption) (*runtimeapi.StopContainerResponse, error) {
	start := time.Now()
	resp, err := r.RuntimeService.StopContainer(ctx, in, opts...)
	r.mu.Lock()
	r.stopped, r.stopCost = time.Now(), time.Since(start)
	r.mu.Unlock()
	return resp, err
}

// timedSyncer signals when SyncTerminatedPod finished.
type timedSyncer struct {
	podworkers.Syncer
	done chan time.Time
}

func (s *timedSyncer) SyncTerminatedPod(ctx context.Context, pod *v1.Pod, st *container.PodStatus) error {
	err := s.Syncer.SyncTerminatedPod(ctx, pod, st)
	if err == nil {
		s.done <- time.Now()
	}
	return err
}

// BenchmarkDeleteToTerminated measures, on real containerd, how long a
// deleted pod whose container exits at once on SIGTERM takes to be fully
// terminated (SyncTerminatedPod done), next to the StopContainer call
// itself. "after-stop-ms" is the time from StopContainer returning to
// SyncTerminatedPod finishing; most of it is the runtime stopping the
// sandbox ("stop-sandbox-ms": killing the pause process and tearing down
// the CNI network). "nodelet-ms" is the rest: the final status reads and
// the moves between worker states, which wait for no relist.
//
//	go test -run XXX -bench DeleteToTerminated -benchtime 10x ./test/integration/runtime/
func BenchmarkDeleteToTerminated(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := clock.RealClock{}
	rt := &timedRuntime{RuntimeService: cd.Runtime}
	root := b.TempDir()
	manager := kuberuntime.New(kuberuntime.Options{
		Runtime: rt, Images: images.NewPuller(images.PullerOptions{Images: cd.Images}), Helper: containeropts.New(containeropts.Options{RootDir: root, NodeName: "bench"}),
		Recorder: record.NewFakeRecorder(10000), Clock: clk, PodLogsDir: b.TempDir(),
	})
	gpleg := pleg.NewGeneric(pleg.GenericOptions{Runtime: manager, Period: time.Second, Clock: clk})
	go gpleg.Run(ctx)
	statusManager := podstatus.New(clk)
	syncer := &timedSyncer{
		Syncer: podsync.NewPodSyncer(podsync.SyncerOptions{Runtime: manager, Status: statusManager, RootDir: root,
			Recorder: record.NewFakeRecorder(10000), Clock: clk}),
		done: make(chan time.Time, 1),
	}
	workers := podworkers.New(podworkers.Options{Syncer: syncer, Status: gpleg, WorkQueue: podworkers.NewWorkQueue(clk),
		Clock: clk, ResyncInterval: time.Minute, BackOffPeriod: time.Second})

	var total, afterStop, stopCost, sandboxCost time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		rt.mu.Lock()
		rt.sandboxCost = 0
		rt.mu.Unlock()
		pod := benchPod(i)
		workers.UpdatePod(podworkers.UpdatePodOptions{Pod: pod, UpdateType: podworkers.UpdateCreate})
		testbed.Eventually(b, time.Minute, func() (bool, string) {
			s, err := manager.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
			return err == nil && len(s.RunningContainers()) == 1, "container not running"
		})
		b.StartTimer()

		start := time.Now()
		deleted := pod.DeepCopy()
		grace := int64(30)
		deleted.DeletionGracePeriodSeconds = &grace
		now := deleted.CreationTimestamp
		deleted.DeletionTimestamp = &now
		workers.UpdatePod(podworkers.UpdatePodOptions{Pod: deleted, UpdateType: podworkers.UpdateUpdate})
		var end time.Time
		select {
		case end = <-syncer.done:
		case <-time.After(time.Minute):
			b.Fatal("pod never terminated")
		}
		total += end.Sub(start)
		rt.mu.Lock()
		afterStop += end.Sub(rt.stopped)
		stopCost += rt.stopCost
		sandboxCost += rt.sandboxCost
		rt.mu.Unlock()

		b.StopTimer()
		if err := cd.RemoveAll(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(float64(total.Microseconds())/n/1000, "delete-to-terminated-ms")
	b.ReportMetric(float64(stopCost.Microseconds())/n/1000, "stop-container-ms")
	b.ReportMetric(float64(afterStop.Microseconds())/n/1000, "after-stop-ms")
	b.ReportMetric(float64(sandboxCost.Microseconds())/n/1000, "stop-sandbox-ms")
	b.ReportMetric(float64((afterStop-sandboxCost).Microseconds())/n/1000, "nodelet-ms")
	b.ReportMetric(float64(total)/float64(stopCost), "ratio")
}

func benchPod(i int) *v1.Pod {
	p := &v1.Pod{}
	p.Name, p.Namespace, p.UID = fmt.Sprintf("term-%d", i), "default", types.UID(uuid.NewUUID())
	grace := int64(30)
	p.Spec.TerminationGracePeriodSeconds = &grace
	p.Spec.RestartPolicy = v1.RestartPolicyAlways
	p.Spec.Containers = []v1.Container{{Name: "main", Image: testbed.BusyboxImage,
		Command: []string{"sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"}}}
	return p
}
