package podsync

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/fakecri"
	"github.com/nodelet/nodelet/pkg/pods/podstatus"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/pods/podworkers"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/containeropts"
	"github.com/nodelet/nodelet/pkg/runtime/images"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
)

// Syncer tests run the real runtime manager on the fake CRI.

func newSyncer(t *testing.T, network func() error) (*PodSyncer, *podstatus.Manager, *fakecri.Runtime) {
	clk := testingclock.NewFakeClock(now)
	rt := fakecri.New(clk, "img")
	st := podstatus.New(clk)
	rm := kuberuntime.New(kuberuntime.Options{Runtime: rt, Images: images.NewPuller(images.PullerOptions{Images: rt}), Helper: containeropts.New(containeropts.Options{RootDir: t.TempDir(), NodeName: "n"}),
		Recorder: record.NewFakeRecorder(100), Clock: clk, PodLogsDir: t.TempDir()})
	return NewPodSyncer(SyncerOptions{Runtime: rm, Status: st, Network: network, RootDir: t.TempDir(),
		Recorder: record.NewFakeRecorder(100), Clock: clk}), st, rt
}

func TestSyncPodWaitsForTheNetwork(t *testing.T) {
	s, _, rt := newSyncer(t, func() error { return errors.New("cni not ready") })
	_, err := s.SyncPod(context.Background(), podworkers.UpdateCreate, apiPod("a", "a", now), nil, &container.PodStatus{ID: "a"})
	if !errors.Is(err, podworkers.ErrNetworkNotReady) {
		t.Fatalf("err %v", err)
	}
	if n, _ := rt.Counts(); n != 0 {
		t.Fatal("a sandbox started without a network")
	}
	host := apiPod("h", "h", now)
	host.Spec.HostNetwork = true
	if _, err := s.SyncPod(context.Background(), podworkers.UpdateCreate, host, nil, &container.PodStatus{ID: "h"}); err != nil {
		t.Fatalf("host network pod: %v", err)
	}
}

func TestSyncPodReportsTerminal(t *testing.T) {
	s, st, _ := newSyncer(t, nil)
	p := apiPod("a", "a", now)
	p.Spec.RestartPolicy = v1.RestartPolicyNever
	exited := runtimeStatus(false, container.StateExited)
	terminal, err := s.SyncPod(context.Background(), podworkers.UpdateSync, p, nil, exited)
	if err != nil || !terminal {
		t.Fatalf("terminal=%v err=%v", terminal, err)
	}
	if got, _ := st.GetPodStatus("a"); got.Phase != v1.PodSucceeded {
		t.Fatalf("phase %s", got.Phase)
	}
}

// The sync that starts a pod's containers reports them running, and the
// pod Ready, without waiting for the next sync: a single start would
// otherwise wait a relist for it.
func TestSyncPodReportsWhatItStarted(t *testing.T) {
	s, st, rt := newSyncer(t, nil)
	p := apiPod("a", "a", now)
	if _, err := s.SyncPod(context.Background(), podworkers.UpdateCreate, p, nil, &container.PodStatus{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	got, _ := st.GetPodStatus("a")
	if got.Phase != v1.PodRunning || len(got.ContainerStatuses) != 1 || got.ContainerStatuses[0].State.Running == nil {
		t.Fatalf("after the starting sync: phase %s, containers %+v", got.Phase, got.ContainerStatuses)
	}
	if !podutil.IsPodReady(got) {
		t.Fatalf("not Ready after the starting sync: %+v", got.Conditions)
	}

	// A sync that starts nothing reports what it was given.
	rt.FailNext("StartContainer", errors.New("no"))
	if _, err := s.SyncPod(context.Background(), podworkers.UpdateCreate, apiPod("b", "b", now), nil, &container.PodStatus{ID: "b"}); err == nil {
		t.Fatal("the start did not fail")
	}
	if got, _ := st.GetPodStatus("b"); got.Phase != v1.PodPending || got.ContainerStatuses[0].State.Waiting == nil {
		t.Fatalf("nothing started, yet: phase %s, containers %+v", got.Phase, got.ContainerStatuses)
	}
}

type stubbornRuntime struct{ syncRuntime }

func (stubbornRuntime) KillPod(context.Context, *v1.Pod, container.Pod, *int64) error { return nil }
func (stubbornRuntime) GetPodStatus(ctx context.Context, uid types.UID, name, ns string) (*container.PodStatus, error) {
	return runtimeStatus(true, container.StateRunning), nil
}

func TestSyncTerminatingPodVerifiesNothingRuns(t *testing.T) {
	s, st, rt := newSyncer(t, nil)
	p := apiPod("a", "a", now)
	ctx := context.Background()
	if _, err := s.SyncPod(ctx, podworkers.UpdateCreate, p, nil, &container.PodStatus{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	cur, _ := s.runtime.GetPodStatus(ctx, "a", "a", "ns")
	statusFnCalled := false
	if err := s.SyncTerminatingPod(ctx, p, cur, nil, func(s *v1.PodStatus) { statusFnCalled = true }); err != nil {
		t.Fatal(err)
	}
	if _, n := rt.Counts(); n != 1 || !statusFnCalled {
		t.Fatalf("containers %d, status function called %v", n, statusFnCalled)
	}
	final, _ := st.GetPodStatus("a")
	if final.ContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("final container state %+v", final.ContainerStatuses[0].State)
	}

	// A runtime that says it killed the pod but still runs it is caught.
	s.runtime = stubbornRuntime{s.runtime}
	s.reads = runtimeReads{s.runtime}
	if err := s.SyncTerminatingPod(ctx, p, cur, nil, nil); err == nil || !strings.Contains(err.Error(), "CRI violation") {
		t.Fatalf("err %v", err)
	}
}

func TestSyncPodWaitingForABackOffAsksToRetryWhenItEnds(t *testing.T) {
	s, _, rt := newSyncer(t, nil)
	ctx := context.Background()
	p := apiPod("a", "a", now)
	sync := func() error {
		st, _ := s.runtime.GetPodStatus(ctx, "a", "a", "ns")
		_, err := s.SyncPod(ctx, podworkers.UpdateSync, p, nil, st)
		return err
	}
	if err := sync(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		running := runtimeapi.ContainerState_CONTAINER_RUNNING
		ids := rt.ContainerIDs("c", &running)
		if len(ids) != 1 {
			t.Fatalf("running containers %v", ids)
		}
		rt.Exit(ids[0], 1)
		err := sync()
		var retry *podworkers.RetryAfterError
		switch {
		case i == 0 && err != nil:
			t.Fatalf("first failure restarts at once, got %v", err)
		case i == 1 && (!errors.As(err, &retry) || retry.Delay != 10*time.Second):
			t.Fatalf("second failure: %v, want a retry after the 10 s back-off", err)
		}
	}
	// The container shows why it waits.
	if r := s.reasons.get("a")["c"]; !errors.Is(r.Err, container.ErrCrashLoopBackOff) {
		t.Fatalf("reason %v", r.Err)
	}
}

// A pod past its active deadline fails with DeadlineExceeded and an event;
// the deadline counts from the start time the API recorded, so it holds
// across a nodelet restart (no status of nodelet's own yet).
func TestActiveDeadline(t *testing.T) {
	clk := testingclock.NewFakeClock(now)
	rt := fakecri.New(clk, "img")
	st := podstatus.New(clk)
	rec := record.NewFakeRecorder(100)
	rm := kuberuntime.New(kuberuntime.Options{Runtime: rt, Images: images.NewPuller(images.PullerOptions{Images: rt}), Helper: containeropts.New(containeropts.Options{RootDir: t.TempDir(), NodeName: "n"}),
		Recorder: record.NewFakeRecorder(100), Clock: clk, PodLogsDir: t.TempDir()})
	s := NewPodSyncer(SyncerOptions{Runtime: rm, Status: st, RootDir: t.TempDir(), Recorder: rec, Clock: clk})

	deadline := int64(30)
	young, old := apiPod("young", "young", now), apiPod("old", "old", now)
	for i, p := range []*v1.Pod{young, old} {
		p.Spec.ActiveDeadlineSeconds = &deadline
		started := metav1.NewTime(now.Add(-time.Duration(10+20*i) * time.Second))
		p.Status = v1.PodStatus{Phase: v1.PodRunning, StartTime: &started}
	}
	ctx := context.Background()
	if terminal, err := s.SyncPod(ctx, podworkers.UpdateCreate, young, nil, &container.PodStatus{ID: "young"}); terminal || err != nil {
		t.Fatalf("pod within its deadline: terminal=%v err=%v", terminal, err)
	}
	if got, _ := st.GetPodStatus("young"); !got.StartTime.Equal(young.Status.StartTime) {
		t.Fatalf("start time %v, want the API's %v", got.StartTime, young.Status.StartTime)
	}
	if terminal, err := s.SyncPod(ctx, podworkers.UpdateCreate, old, nil, &container.PodStatus{ID: "old"}); !terminal || err != nil {
		t.Fatalf("pod past its deadline: terminal=%v err=%v", terminal, err)
	}
	got, _ := st.GetPodStatus("old")
	if got.Phase != v1.PodFailed || got.Reason != "DeadlineExceeded" || got.Message != "Pod was active on the node longer than the specified deadline" {
		t.Fatalf("status %s %s %q", got.Phase, got.Reason, got.Message)
	}
	if e := <-rec.Events; e != "Normal DeadlineExceeded Pod was active on the node longer than the specified deadline" {
		t.Fatalf("event %q", e)
	}
	if n, _ := rt.Counts(); n != 1 {
		t.Fatalf("%d sandboxes: want only the young pod's", n)
	}
}

// A deadline added by an update fails the pod with DeadlineExceeded even
// when its container exits 0 on SIGTERM, as the pause container of
// upstream's "Pods should allow activeDeadlineSeconds to be updated"
// [NodeConformance] spec does: the kubelet evicts the pod past its
// deadline whatever phase its containers' exits give (upstream's
// activeDeadlineHandler overrides every status it generates then). The
// fake runtime's containers exit 0 when stopped.
func TestActiveDeadlineSetByUpdateFailsAPodWhoseContainerExitsZero(t *testing.T) {
	clk := testingclock.NewFakeClock(now)
	rt := fakecri.New(clk, "img")
	st := podstatus.New(clk)
	rm := kuberuntime.New(kuberuntime.Options{Runtime: rt, Images: images.NewPuller(images.PullerOptions{Images: rt}), Helper: containeropts.New(containeropts.Options{RootDir: t.TempDir(), NodeName: "n"}),
		Recorder: record.NewFakeRecorder(100), Clock: clk, PodLogsDir: t.TempDir()})
	rec := record.NewFakeRecorder(100)
	s := NewPodSyncer(SyncerOptions{Runtime: rm, Status: st, RootDir: t.TempDir(), Recorder: rec, Clock: clk})
	ctx := context.Background()

	p := apiPod("p", "pod-update-activedeadlineseconds", now)
	if _, err := s.SyncPod(ctx, podworkers.UpdateCreate, p, nil, &container.PodStatus{ID: "p"}); err != nil {
		t.Fatal(err)
	}
	running, _ := rm.GetPodStatus(ctx, "p", p.Name, p.Namespace)
	if _, err := s.SyncPod(ctx, podworkers.UpdateSync, p, nil, running); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.GetPodStatus("p"); got.Phase != v1.PodRunning {
		t.Fatalf("phase %s before the update, want Running", got.Phase)
	}

	// The spec's update: a deadline of 5 s, which the running pod has
	// passed by the next sync.
	updated := p.DeepCopy()
	five := int64(5)
	updated.Spec.ActiveDeadlineSeconds = &five
	clk.Step(6 * time.Second)
	terminal, err := s.SyncPod(ctx, podworkers.UpdateSync, updated, nil, running)
	if !terminal || err != nil {
		t.Fatalf("past its deadline: terminal=%v err=%v", terminal, err)
	}
	if err := s.SyncTerminatingPod(ctx, updated, running, nil, nil); err != nil {
		t.Fatal(err)
	}
	final, _ := rm.GetPodStatus(ctx, "p", p.Name, p.Namespace)
	if c := final.FindContainerStatusByName("c"); c == nil || c.State != container.StateExited || c.ExitCode != 0 {
		t.Fatalf("the container should have exited 0 on its stop, got %+v", c)
	}
	got, _ := st.GetPodStatus("p")
	if got.Phase != v1.PodFailed || got.Reason != "DeadlineExceeded" {
		t.Fatalf("final status %s/%s, want Failed/DeadlineExceeded whatever the exit code", got.Phase, got.Reason)
	}
}

// A pod that ended keeps the IPs it ran with in its terminal status,
// though its stopped sandbox reports none: upstream's "Pod IPs when pod
// gets terminated should contain podIPs in status for succeeded pod"
// [NodeConformance] spec watches every status of a restartPolicy Never
// pod whose container exits 0 and wants an IP in each one not Pending.
func TestTerminalStatusKeepsThePodIPs(t *testing.T) {
	clk := testingclock.NewFakeClock(now)
	rt := fakecri.New(clk, "img")
	st := podstatus.New(clk)
	rm := kuberuntime.New(kuberuntime.Options{Runtime: rt, Images: images.NewPuller(images.PullerOptions{Images: rt}), Helper: containeropts.New(containeropts.Options{RootDir: t.TempDir(), NodeName: "n"}),
		Recorder: record.NewFakeRecorder(100), Clock: clk, PodLogsDir: t.TempDir()})
	s := NewPodSyncer(SyncerOptions{Runtime: rm, Status: st, RootDir: t.TempDir(), Recorder: record.NewFakeRecorder(100), Clock: clk})
	ctx := context.Background()

	p := apiPod("p", "pod-ips-success", now)
	p.Spec.RestartPolicy = v1.RestartPolicyNever
	if _, err := s.SyncPod(ctx, podworkers.UpdateCreate, p, nil, &container.PodStatus{ID: "p"}); err != nil {
		t.Fatal(err)
	}
	running, _ := rm.GetPodStatus(ctx, "p", p.Name, p.Namespace)
	if len(running.IPs) == 0 {
		t.Fatal("the running pod has no IP to keep")
	}
	rt.Exit(rt.ContainerIDs("c", nil)[0], 0) // sleep 1; exit 0
	exited, _ := rm.GetPodStatus(ctx, "p", p.Name, p.Namespace)
	if terminal, err := s.SyncPod(ctx, podworkers.UpdateSync, p, nil, exited); !terminal || err != nil {
		t.Fatalf("pod whose only container exited 0: terminal=%v err=%v", terminal, err)
	}
	if err := s.SyncTerminatingPod(ctx, p, exited, nil, nil); err != nil {
		t.Fatal(err)
	}
	if stopped, _ := rm.GetPodStatus(ctx, "p", p.Name, p.Namespace); len(stopped.IPs) != 0 {
		t.Fatalf("the stopped sandbox still reports %v: this test would prove nothing", stopped.IPs)
	}
	got, _ := st.GetPodStatus("p")
	if got.Phase != v1.PodSucceeded || got.PodIP != running.IPs[0] || len(got.PodIPs) != 1 {
		t.Fatalf("terminal status %s with podIP %q %v, want Succeeded with %s", got.Phase, got.PodIP, got.PodIPs, running.IPs[0])
	}
}

var now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// runtimeStatus is what the runtime reports of a pod whose one container
// "c" is in state.
func runtimeStatus(sandboxReady bool, state container.State) *container.PodStatus {
	c := &container.Status{ID: container.ContainerID{Type: "fake", ID: "c1"}, Name: "c", State: state,
		CreatedAt: now, StartedAt: now, FinishedAt: now.Add(time.Second)}
	return &container.PodStatus{ID: "uid", ContainerStatuses: []*container.Status{c},
		SandboxStatuses: []*container.SandboxStatus{{ID: "sb", Ready: sandboxReady}}}
}

func apiPod(uid, name string, created time.Time) *v1.Pod {
	p := &v1.Pod{}
	p.UID, p.Name, p.Namespace = types.UID(uid), name, "ns"
	p.CreationTimestamp = metav1.NewTime(created)
	p.Spec.Containers = []v1.Container{{Name: "c", Image: "img"}}
	return p
}
