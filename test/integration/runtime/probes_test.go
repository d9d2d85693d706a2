//go:build integration

package runtime

import (
	"context"
	goruntime "runtime"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/testbed"
	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/pkg/pods/pleg"
	"github.com/nodelet/nodelet/pkg/pods/podstatus"
	"github.com/nodelet/nodelet/pkg/pods/podsync"
	"github.com/nodelet/nodelet/pkg/pods/podworkers"
	"github.com/nodelet/nodelet/pkg/pods/prober"
	"github.com/nodelet/nodelet/pkg/runtime/containeropts"
	"github.com/nodelet/nodelet/pkg/runtime/images"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
)

// Deleting a probed pod leaves no probe worker behind: the goroutine
// count returns to what it was before the pod existed.
func TestNoProbeWorkerLeftBehind(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := clock.RealClock{}
	root := t.TempDir()
	statusManager := podstatus.New(clk)
	probes := prober.New(prober.Options{Exec: cd.Runtime, Status: statusManager, Recorder: record.NewFakeRecorder(1000), Clock: clk})
	manager := kuberuntime.New(kuberuntime.Options{
		Runtime: cd.Runtime, Images: images.NewPuller(images.PullerOptions{Images: cd.Images}), Helper: containeropts.New(containeropts.Options{RootDir: root, NodeName: "probes"}),
		Recorder: record.NewFakeRecorder(1000), Clock: clk, PodLogsDir: t.TempDir(), Health: probes,
	})
	gpleg := pleg.NewGeneric(pleg.GenericOptions{Runtime: manager, Period: time.Second, Clock: clk})
	syncer := podsync.NewPodSyncer(podsync.SyncerOptions{Runtime: manager, Status: statusManager, RootDir: root,
		Recorder: record.NewFakeRecorder(1000), Clock: clk, Probes: probes})
	workers := podworkers.New(podworkers.Options{Syncer: syncer, Status: gpleg, WorkQueue: podworkers.NewWorkQueue(clk),
		Clock: clk, ResyncInterval: time.Minute, BackOffPeriod: time.Second})
	t.Cleanup(func() { testutil.Must(t, cd.RemoveAll(context.Background())) })

	before := goruntime.NumGoroutine()
	pod := benchPod(0)
	probe := &v1.Probe{PeriodSeconds: 1, TimeoutSeconds: 1, FailureThreshold: 3, SuccessThreshold: 1,
		ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}
	pod.Spec.Containers[0].LivenessProbe = probe
	pod.Spec.Containers[0].ReadinessProbe = probe.DeepCopy()
	workers.UpdatePod(podworkers.UpdatePodOptions{Pod: pod, UpdateType: podworkers.UpdateCreate})

	// Running, and the probes have run against it.
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		st, err := manager.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
		if err != nil || len(st.RunningContainers()) != 1 {
			return false, "not running"
		}
		// The status must show the container for the probes to find it.
		workers.UpdatePod(podworkers.UpdatePodOptions{Pod: pod, UpdateType: podworkers.UpdateSync})
		return probes.Ready(&pod.Spec.Containers[0], st.RunningContainers()[0].ID.ID), "readiness probe has not passed"
	})
	if probes.Workers() != 2 || goruntime.NumGoroutine() <= before {
		t.Fatalf("%d probe workers, %d goroutines (%d before)", probes.Workers(), goruntime.NumGoroutine(), before)
	}

	deleted := pod.DeepCopy()
	now := metav1.Now()
	deleted.DeletionTimestamp = &now
	workers.UpdatePod(podworkers.UpdatePodOptions{Pod: deleted, UpdateType: podworkers.UpdateUpdate})
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		return workers.ShouldPodBeFinished(pod.UID), "pod not finished"
	})
	if probes.Workers() != 0 {
		t.Fatalf("%d probe workers left", probes.Workers())
	}
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		return goruntime.NumGoroutine() <= before, "goroutines not back to their baseline"
	})
}
