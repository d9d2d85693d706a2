//go:build integration

package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	failedAt := time.Now()
	if failed.Status.Reason != "DeadlineExceeded" || failed.Status.Message != "Pod was active on the node longer than the specified deadline" {
		t.Fatalf("status %s: %q", failed.Status.Reason, failed.Status.Message)
	}
	if !failed.Status.StartTime.Time.Equal(started) {
		t.Errorf("start time moved from %v to %v", started, failed.Status.StartTime.Time)
	}
	if failedAt.After(restarted.Add(deadline)) {
		t.Errorf("failed %v after the restart: the deadline was counted from the restart, not from %v", failedAt.Sub(restarted).Round(time.Second), started)
	}
	// Failed is reported first; the worker then stops the containers.
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		c := n.RunningPodContainer("limited", "main")
		return c == nil, "the container still runs"
	})
	waitEvents(t, ns, "limited", "DeadlineExceeded")
}
