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

// With the API server gone for 30 s, pods keep running and what happened
// meanwhile (a pod finishing) reaches the API once it is back, as do the
// node's status and lease.
func TestAPIServerOutage(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-outage", cd, "")
	waitNodeReady(t, n.NodeName, 10*time.Second)
	pods := cl.Client.CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, busyboxPod("long", n.NodeName), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// It finishes while the API server is away: it waits for the file the
	// test writes during the outage.
	short := busyboxPod("short", n.NodeName, "sh", "-c", "while [ ! -f /tmp/done ]; do sleep 0.1; done")
	short.Spec.RestartPolicy = v1.RestartPolicyNever
	if _, err := pods.Create(ctx, short, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, 30*time.Second, ns, "long", running)
	waitPod(t, 30*time.Second, ns, "short", running)
	long := n.RunningPodContainer("long", "main")
	lease, err := cl.Client.CoordinationV1().Leases("kube-node-lease").Get(ctx, n.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	cl.StopAPIServer()
	outage := time.Now()
	c := n.RunningPodContainer("short", "main")
	if c == nil {
		t.Fatal("short has no running container")
	}
	if _, err := n.Exec(c.Id, "touch", "/tmp/done"); err != nil {
		t.Fatal(err)
	}
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		return n.RunningPodContainer("short", "main") == nil, "short still runs"
	})
	// The rest of the 30 s: nothing may be stopped meanwhile.
	testbed.Eventually(t, 40*time.Second, func() (bool, string) {
		return time.Since(outage) >= 30*time.Second, "waiting out the outage"
	})
	if c := n.RunningPodContainer("long", "main"); c == nil || c.Id != long.Id {
		t.Fatal("the long-running pod's container did not survive the API server outage")
	}
	if err := n.Healthz(); err != nil {
		t.Errorf("nodelet unhealthy during the outage: %v", err)
	}
	if err := cl.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}

	waitPod(t, 30*time.Second, ns, "short", func(p *v1.Pod) (bool, string) {
		return p.Status.Phase == v1.PodSucceeded, fmt.Sprintf("phase %s", p.Status.Phase)
	})
	waitPod(t, 5*time.Second, ns, "long", running)
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		l, err := cl.Client.CoordinationV1().Leases("kube-node-lease").Get(ctx, n.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return l.Spec.RenewTime.After(outage) && l.Spec.RenewTime.After(lease.Spec.RenewTime.Time), fmt.Sprintf("lease renewed at %v", l.Spec.RenewTime)
	})
	// The node lifecycle controller may mark the node Unknown just as the
	// API server returns (its own watches were stale): nodelet puts it
	// right when its lease renewal first succeeds again (it reads the node
	// then), and at once when its node watch, itself catching up, brings
	// the change. (Before the latter, only the next 10 s check did, after
	// the watch: CI once ran past this wait.)
	waitNodeReady(t, n.NodeName, 15*time.Second)
	// The API source resumed: a new pod runs.
	if _, err := pods.Create(ctx, busyboxPod("after", n.NodeName), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, 30*time.Second, ns, "after", running)
}

// Restarting nodelet keeps the node object and every container: nothing
// is restarted, and the statuses stay.
func TestNodeletRestart(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-restart", cd, "")
	node := waitNodeReady(t, n.NodeName, 10*time.Second)
	pods := cl.Client.CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, busyboxPod("kept", n.NodeName), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, 30*time.Second, ns, "kept", running)
	n.WriteManifest("static.yaml", fmt.Sprintf(staticManifest, "one"))
	waitPod(t, 30*time.Second, "default", n.PodName("web"), running)
	containers := map[string]string{
		"kept": n.RunningPodContainer("kept", "main").Id,
		"web":  n.RunningContainer("web", "main").Id,
	}

	n.Stop()
	n.Start()
	after := waitNodeReady(t, n.NodeName, 10*time.Second)
	if after.UID != node.UID {
		t.Errorf("node re-created: UID %s, was %s", after.UID, node.UID)
	}
	// The restarted nodelet has synced both pods once its own status
	// for them (the read-only API) says Running.
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		list, err := n.Pods()
		if err != nil {
			return false, err.Error()
		}
		phases := map[string]v1.PodPhase{}
		for _, p := range list {
			phases[p.Name] = p.Status.Phase
		}
		return phases["kept"] == v1.PodRunning && phases[n.PodName("web")] == v1.PodRunning, fmt.Sprintf("phases %v", phases)
	})
	got := waitPod(t, 5*time.Second, ns, "kept", running)
	if c := n.RunningPodContainer("kept", "main"); c == nil || c.Id != containers["kept"] {
		t.Errorf("the API pod's container was replaced on restart")
	}
	if c := n.RunningContainer("web", "main"); c == nil || c.Id != containers["web"] {
		t.Errorf("the static pod's container was replaced on restart")
	}
	if got.Status.Phase != v1.PodRunning || got.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("status after restart: %+v", got.Status)
	}
	n.RemoveManifest("static.yaml")
}
