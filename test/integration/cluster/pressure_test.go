//go:build integration

package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// A node whose memory.available is below its eviction threshold (99% of
// memory must stay free, which no machine running tests has) reports
// MemoryPressure with upstream's reason and event, is tainted by the
// node lifecycle controller, refuses a BestEffort pod (Failed, Evicted)
// and runs a Burstable one. The threshold is soft with an hour's grace:
// the condition is set at once, but no pod is evicted, which a hard
// threshold would do to the Burstable pod at the manager's next measure,
// possibly before it ever ran (TestMemoryPressureEvictsTheHog covers
// eviction).
func TestMemoryPressure(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-pressure", cd, "evictionSoft:\n  memory.available: \"99%\"\nevictionSoftGracePeriod:\n  memory.available: 1h\n")
	node := waitNodeReady(t, n.NodeName, 10*time.Second)
	testbed.Eventually(t, 20*time.Second, func() (bool, string) {
		got, err := cl.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := nodeCondition(got, v1.NodeMemoryPressure)
		return c != nil && c.Status == v1.ConditionTrue && c.Reason == "KubeletHasInsufficientMemory" &&
			strings.Contains(c.Message, "memory.available is"), fmt.Sprintf("memory pressure %+v", c)
	})
	if c := nodeCondition(node, v1.NodeDiskPressure); c == nil || c.Status != v1.ConditionFalse || c.Reason != "KubeletHasNoDiskPressure" {
		t.Errorf("disk pressure %+v", c)
	}
	testbed.Eventually(t, 20*time.Second, func() (bool, string) {
		evs, err := cl.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + node.Name + ",reason=NodeHasInsufficientMemory"})
		return err == nil && len(evs.Items) > 0, fmt.Sprintf("no NodeHasInsufficientMemory event (%v)", err)
	})
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		got, err := cl.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, taint := range got.Spec.Taints {
			if taint.Key == v1.TaintNodeMemoryPressure {
				return true, ""
			}
		}
		return false, fmt.Sprintf("taints %v", got.Spec.Taints)
	})

	bestEffort := busyboxPod("besteffort", n.NodeName)
	burstable := busyboxPod("burstable", n.NodeName)
	burstable.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse("16Mi")}
	for _, p := range []*v1.Pod{bestEffort, burstable} {
		p.Spec.TerminationGracePeriodSeconds = new(int64(1))
		if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitPod(t, 30*time.Second, ns, "besteffort", func(p *v1.Pod) (bool, string) {
		return p.Status.Phase == v1.PodFailed && p.Status.Reason == "Evicted" && p.Status.Message == "Pod was rejected: The node had condition: [MemoryPressure]. ",
			fmt.Sprintf("phase %s reason %q message %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
	})
	waitPod(t, 30*time.Second, ns, "burstable", running)
	// The Burstable pod outlives the manager's next measure of the node:
	// the second measure since it ran is logged only after the first
	// one's eviction, had there been one, finished.
	offset := len(n.Log())
	testbed.Eventually(t, 40*time.Second, func() (bool, string) {
		got := strings.Count(n.Log()[offset:], `"Eviction manager: measured the node"`)
		return got >= 2, fmt.Sprintf("%d measures since the pod ran", got)
	})
	if strings.Contains(n.Log()[offset:], "Eviction manager: evicting pod") {
		t.Error("a pod was evicted under a soft threshold within its grace period")
	}
	if len(n.PodContainers("burstable")) == 0 {
		t.Error("the Burstable pod has no containers after two measures")
	}
	if len(n.PodContainers("besteffort")) != 0 {
		t.Error("the refused pod has containers")
	}
}
