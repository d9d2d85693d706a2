//go:build integration

package cluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/testbed"
)

// After a restart on a node that now fits fewer pods: the pod that still
// fits keeps running; a pod that already finished stays as it ended (it
// is not admitted again, so not rejected either); a running pod that no
// longer fits is rejected and its containers are stopped by housekeeping,
// with an event.
func TestRestartOnASmallerNode(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-smaller", cd, "maxPods: 3\n")
	waitNodeReady(t, n.NodeName, 10*time.Second)
	pods := cl.Client.CoreV1().Pods(ns)
	create := func(p *v1.Pod) {
		t.Helper()
		p.Spec.TerminationGracePeriodSeconds = new(int64(1))
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Created in this order: admission after the restart goes oldest first.
	create(busyboxPod("kept", n.NodeName))
	waitPod(t, 30*time.Second, ns, "kept", running)
	done := busyboxPod("done", n.NodeName, "true")
	done.Spec.RestartPolicy = v1.RestartPolicyNever
	create(done)
	finished := waitPod(t, 30*time.Second, ns, "done", func(p *v1.Pod) (bool, string) {
		return p.Status.Phase == v1.PodSucceeded, fmt.Sprintf("phase %s", p.Status.Phase)
	})
	create(busyboxPod("extra", n.NodeName))
	waitPod(t, 30*time.Second, ns, "extra", running)

	n.Stop()
	cfg, err := os.ReadFile(n.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.Config, []byte(strings.Replace(string(cfg), "maxPods: 3", "maxPods: 1", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	n.Start()

	waitPod(t, 30*time.Second, ns, "extra", func(p *v1.Pod) (bool, string) {
		return p.Status.Phase == v1.PodFailed && p.Status.Reason == "OutOfpods", fmt.Sprintf("phase %s reason %s", p.Status.Phase, p.Status.Reason)
	})
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		c := n.RunningPodContainer("extra", "main")
		return c == nil, "the rejected pod's container still runs"
	})
	waitEvents(t, ns, "extra", "OutOfpods", "Killing")
	if c := n.RunningPodContainer("kept", "main"); c == nil {
		t.Error("the pod that fits stopped")
	}
	// The finished pod was seen by the restarted nodelet (the API's pods
	// come in one batch, admitted oldest first: the newer pod's rejection
	// came after it) and left as it was.
	got, err := pods.Get(ctx, "done", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != v1.PodSucceeded || got.Status.Reason != finished.Status.Reason || got.Status.Message != finished.Status.Message {
		t.Errorf("finished pod's status rewritten: %s %s %q", got.Status.Phase, got.Status.Reason, got.Status.Message)
	}
	evs, err := cl.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "done").String()})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == "OutOfpods" {
			t.Errorf("the finished pod was rejected: %s", e.Message)
		}
	}
}

// Extended resources an operator advertises by patching the Node's status
// stay through nodelet's status writes, which fill in their allocatable,
// and pods are admitted against them; a pod asking for an extended
// resource the node does not offer at all (a cluster-level one) runs, as
// upstream's kubelet lets it.
func TestOperatorsExtendedResources(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-extended", cd, "")
	waitNodeReady(t, n.NodeName, 10*time.Second)
	patch := []byte(`{"status":{"capacity":{"example.com/dongle":"2"}}}`)
	if _, err := cl.Client.CoreV1().Nodes().Patch(ctx, n.NodeName, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	// Only nodelet writes allocatable: its write kept the capacity.
	testbed.Eventually(t, 20*time.Second, func() (bool, string) {
		node, err := cl.Client.CoreV1().Nodes().Get(ctx, n.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c, a := node.Status.Capacity["example.com/dongle"], node.Status.Allocatable["example.com/dongle"]
		return c.Value() == 2 && a.Value() == 2, fmt.Sprintf("capacity %s, allocatable %s", c.String(), a.String())
	})

	pods := cl.Client.CoreV1().Pods(ns)
	withLimit := func(name, resourceName, count string) *v1.Pod {
		p := busyboxPod(name, n.NodeName)
		p.Spec.TerminationGracePeriodSeconds = new(int64(1))
		p.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceName(resourceName): resource.MustParse(count)}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	withLimit("one-dongle", "example.com/dongle", "1")
	waitPod(t, 30*time.Second, ns, "one-dongle", running)
	withLimit("two-dongles", "example.com/dongle", "2")
	waitPod(t, 30*time.Second, ns, "two-dongles", func(p *v1.Pod) (bool, string) {
		return p.Status.Phase == v1.PodFailed && p.Status.Reason == "OutOfexample.com/dongle" &&
				strings.Contains(p.Status.Message, "requested: 2, used: 1, capacity: 2"),
			fmt.Sprintf("phase %s reason %s: %s", p.Status.Phase, p.Status.Reason, p.Status.Message)
	})
	withLimit("cluster-level", "example.com/site-license", "1")
	waitPod(t, 30*time.Second, ns, "cluster-level", running)

	// A restart on a node no device plugin has given devices (no device
	// manager checkpoint: it may have been recreated) sets the Node's
	// extended resources to 0, as upstream's kubelet does. The pod
	// admitted before keeps running: nodelet remembers its decisions.
	before := n.RunningPodContainer("one-dongle", "main")
	n.Stop()
	n.Start()
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		node, err := cl.Client.CoreV1().Nodes().Get(ctx, n.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c, a := node.Status.Capacity["example.com/dongle"], node.Status.Allocatable["example.com/dongle"]
		_, ok := node.Status.Capacity["example.com/dongle"]
		return ok && c.IsZero() && a.IsZero(), fmt.Sprintf("capacity %s, allocatable %s", c.String(), a.String())
	})
	waitNodeReady(t, n.NodeName, 30*time.Second)
	if after := n.RunningPodContainer("one-dongle", "main"); before == nil || after == nil || after.Id != before.Id {
		t.Fatalf("the admitted pod's container changed across the restart: %v, then %v", before, after)
	}
	waitPod(t, 10*time.Second, ns, "one-dongle", running)
}
