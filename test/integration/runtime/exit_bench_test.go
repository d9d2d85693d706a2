//go:build integration

package runtime

import (
	"context"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/testbed"
	"github.com/nodelet/nodelet/pkg/pods/pleg"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// BenchmarkExitSeen measures how long after a container exits (the exit
// time containerd records) the PLEG reports it died, with the exit watch
// nodelet uses (containerd's task exit events on 1.6), and with the
// one-second relist alone.
// containerd itself reports the exit only some time after it happened
// ("runtime-visible-ms", found by polling ContainerStatus every 2 ms);
// "nodelet-ms" is what nodelet adds after that.
//
//	go test -run XXX -bench ExitSeen -benchtime 10x ./test/integration/runtime/
func BenchmarkExitSeen(b *testing.B) {
	for _, watch := range []bool{true, false} {
		name := "relist-only"
		if watch {
			name = "with-watch"
		}
		b.Run(name, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			m := newManager(b)
			g := pleg.NewGeneric(pleg.GenericOptions{Runtime: m, Period: time.Second, Clock: clock.RealClock{}})
			go g.Run(ctx)
			if watch {
				go pleg.NewWatcher(pleg.WatcherOptions{Runtime: cd.Runtime, Containerd: cd.Events, Poll: 100 * time.Millisecond,
					RequestTimeout: time.Minute, StuckAfter: time.Minute, Clock: clock.RealClock{}, Notify: g.Trigger}).Run(ctx)
			}
			var total, visibleLag, nodelet time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				pod := benchPod(i)
				st, _ := m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
				if err := m.SyncPod(ctx, pod, st, nil, nil).Error(); err != nil {
					b.Fatal(err)
				}
				var id string
				testbed.Eventually(b, time.Minute, func() (bool, string) {
					st, _ := m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
					if r := st.RunningContainers(); len(r) == 1 {
						id = r[0].ID.ID
						return true, ""
					}
					return false, "not running"
				})
				drainEvents(g)
				b.StartTimer()

				visible := make(chan time.Time, 1)
				go func() { visible <- whenExited(ctx, id) }()
				// The container exits on SIGTERM, sent from inside it.
				if _, err := cd.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"kill", "-TERM", "1"}, Timeout: 5}); err != nil {
					b.Fatal(err)
				}
				seen := waitDied(b, g, id)
				vis := <-visible
				resp, err := cd.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
				if err != nil {
					b.Fatal(err)
				}
				finished := time.Unix(0, resp.Status.FinishedAt)
				total += seen.Sub(finished)
				visibleLag += vis.Sub(finished)
				if d := seen.Sub(vis); d > 0 {
					nodelet += d
				}

				b.StopTimer()
				if err := m.KillPod(ctx, pod, container.Pod{}, nil); err != nil {
					b.Fatal(err)
				}
				if err := cd.RemoveAll(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			n := float64(b.N)
			b.ReportMetric(float64(total.Microseconds())/n/1000, "exit-seen-ms")
			b.ReportMetric(float64(visibleLag.Microseconds())/n/1000, "runtime-visible-ms")
			b.ReportMetric(float64(nodelet.Microseconds())/n/1000, "nodelet-ms")
		})
	}
}

func drainEvents(g *pleg.Generic) {
	for {
		select {
		case <-g.Watch():
		default:
			return
		}
	}
}

func waitDied(b *testing.B, g *pleg.Generic, id string) time.Time {
	deadline := time.After(time.Minute)
	for {
		select {
		case e := <-g.Watch():
			if e.Type == pleg.ContainerDied && e.Data == id {
				return time.Now()
			}
		case <-deadline:
			b.Fatal("the exit was never reported")
		}
	}
}

// whenExited polls a container's status every 2 ms and returns when the
// runtime first reports it exited.
func whenExited(ctx context.Context, id string) time.Time {
	for {
		r, err := cd.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil || r.Status.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			return time.Now()
		}
		time.Sleep(2 * time.Millisecond) // polling interval
	}
}
