//go:build integration

package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/nodelet/nodelet/internal/testbed"
)

// A pod past its activeDeadlineSeconds is failed with DeadlineExceeded
// and its containers stopped. The deadline counts from the start time the
// API recorded: a nodelet that was down for most of it does not restart
// the count.
func TestActiveDeadlineSurvivesARestart(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-deadline", cd, "")
	waitNodeReady(t, n.NodeName, 10*time.Second)
	const deadline = 25 * time.Second
	pod := busyboxPod("limited", n.NodeName)
	pod.Spec.ActiveDeadlineSeconds = new(int64(deadline / time.Second))
	grace := int64(1)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	started := waitPod(t, 30*time.Second, ns, "limited", func(p *v1.Pod) (bool, string) {
		ok, msg := running(p)
		return ok && p.Status.StartTime != nil, msg
	}).Status.StartTime.Time

	// nodelet is down for the middle of the deadline (the scenario's
	// downtime, not a synchronisation).
	n.Stop()
	<-time.After(time.Until(started.Add(deadline / 2)))
	restarted := time.Now()
	n.Start()

	failed := waitPod(t, deadline+30*time.Second, ns, "limited", func(p *v1.Pod) (bool, string) {
		return p.Status.Phase == v1.PodFailed, fmt.Sprintf("phase %s", p.Status.Phase)
	})
	if failed.Status.Reason != "DeadlineExceeded" || failed.Status.Message != "Pod was active on the node longer than the specified deadline" {
		t.Fatalf("status %s: %q", failed.Status.Reason, failed.Status.Message)
	}
	if !failed.Status.StartTime.Time.Equal(started) {
		t.Errorf("start time moved from %v to %v", started, failed.Status.StartTime.Time)
	}
	// When nodelet failed the pod, not when Failed reached the API: that
	// waits for the runtime to stop the container, which took 12 s on a
	// loaded containerd 1.6. Counted from the start, it fails about half
	// the deadline after the restart; counted from the restart, a whole
	// deadline after it.
	if failedAt := eventTime(t, ns, "limited", "DeadlineExceeded"); failedAt.After(restarted.Add(deadline * 3 / 4)) {
		t.Errorf("failed %v after the restart: the deadline was counted from the restart, not from %v", failedAt.Sub(restarted).Round(time.Second), started)
	}
	// The containers are stopped (Failed reaches the API once they are).
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		c := n.RunningPodContainer("limited", "main")
		return c == nil, "the container still runs"
	})
	waitEvents(t, ns, "limited", "DeadlineExceeded")
}

// Two deadlines on one node. One is added by an update to a running pod
// created without one: it is enforced, counted from the pod's start. The
// other fails a pod whose container ignores SIGTERM and has a long grace
// period: the API never reads Failed while that container runs (a Job or
// ReplicaSet controller would start a replacement beside it); the final
// status, with the container's exit, comes after the kill.
func TestDeadlineAddedByAnUpdateAndHeldUntilTheKill(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-deadline-update", cd, "")
	waitNodeReady(t, n.NodeName, 10*time.Second)
	pods := cl.Client.CoreV1().Pods(ns)

	// The stubborn pod: sleep as PID 1 ignores SIGTERM.
	const grace = 20
	stubborn := busyboxPod("stubborn", n.NodeName)
	stubborn.Spec.TerminationGracePeriodSeconds = new(int64(grace))
	stubborn.Spec.ActiveDeadlineSeconds = new(int64(5))
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = "metadata.name=stubborn"
			return pods.Watch(ctx, o)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := pods.Create(ctx, stubborn, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	updated := busyboxPod("updated", n.NodeName)
	updated.Spec.TerminationGracePeriodSeconds = new(int64(1))
	if _, err := pods.Create(ctx, updated, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	started := waitPod(t, 30*time.Second, ns, "updated", func(p *v1.Pod) (bool, string) {
		ok, msg := running(p)
		return ok && p.Status.StartTime != nil, msg
	}).Status.StartTime.Time
	patch := []byte(`{"spec":{"activeDeadlineSeconds":5}}`)
	if _, err := pods.Patch(ctx, "updated", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	failed := waitPod(t, 30*time.Second, ns, "updated", func(p *v1.Pod) (bool, string) {
		return p.Status.Phase == v1.PodFailed, fmt.Sprintf("phase %s", p.Status.Phase)
	})
	if failed.Status.Reason != "DeadlineExceeded" {
		t.Fatalf("updated pod: reason %q, want DeadlineExceeded", failed.Status.Reason)
	}
	if late := time.Since(started); late > 25*time.Second {
		t.Errorf("updated pod failed %v after its start, deadline 5 s", late.Round(time.Second))
	}

	// Every stubborn pod object the API server held is checked.
	timeout := time.After(time.Duration(grace+60) * time.Second)
	for {
		var ev watch.Event
		select {
		case ev = <-w.ResultChan():
		case <-timeout:
			t.Fatal("the stubborn pod never failed")
		}
		p, ok := ev.Object.(*v1.Pod)
		if !ok {
			t.Fatalf("watch: %v", ev.Object)
		}
		if p.Status.Phase != v1.PodFailed {
			continue
		}
		cs := p.Status.ContainerStatuses
		if len(cs) != 1 || cs[0].State.Terminated == nil {
			t.Fatalf("the API reads Failed while the container may run: %+v", cs)
		}
		if c := n.RunningPodContainer("stubborn", "main"); c != nil {
			t.Fatalf("the API reads Failed while the runtime runs the container %s", c.Id)
		}
		if p.Status.Reason != "DeadlineExceeded" {
			t.Fatalf("reason %q", p.Status.Reason)
		}
		if cs[0].State.Terminated.ExitCode != 137 {
			t.Errorf("exit code %d, want 137 (killed after its grace period)", cs[0].State.Terminated.ExitCode)
		}
		break
	}
	// The held phase was not a long wait for nothing: the grace period
	// ran out first.
	p, err := pods.Get(ctx, "stubborn", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ran := p.Status.ContainerStatuses[0].State.Terminated.FinishedAt.Sub(p.Status.StartTime.Time)
	if ran < time.Duration(5+grace-2)*time.Second {
		t.Errorf("the container ran %v: want the deadline and then the grace period", ran.Round(time.Second))
	}
	waitEvents(t, ns, "stubborn", "DeadlineExceeded")
}

// eventTime is when nodelet first recorded the pod's event of that reason
// (to the second, as the API keeps it).
func eventTime(t *testing.T, ns, pod, reason string) time.Time {
	t.Helper()
	waitEvents(t, ns, pod, reason)
	list, err := cl.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", pod).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var first time.Time
	for _, e := range list.Items {
		if e.Reason == reason && e.Source.Component == "kubelet" && (first.IsZero() || e.FirstTimestamp.Time.Before(first)) {
			first = e.FirstTimestamp.Time
		}
	}
	return first
}
