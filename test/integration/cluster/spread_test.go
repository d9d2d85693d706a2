//go:build integration

package cluster

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// Two nodes, each with its own containerd, root directory and pod subnet,
// join one cluster; the scheduler spreads a Deployment over both and
// every replica runs with an IP from its node's subnet.
func TestTwoNodeSpread(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	cd2, err := testbed.StartContainerdN(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cd2.Stop(); err != nil {
			t.Errorf("stopping the second containerd: %v", err)
		}
	})
	runtimes := map[string]*testbed.Containerd{"node-a": cd, "node-b": cd2}
	for name, c := range runtimes {
		startNode(t, name, c, "")
	}
	for name := range runtimes {
		waitNodeReady(t, name, 10*time.Second)
	}

	replicas := int32(4)
	labels := map[string]string{"app": "spread"}
	tmpl := busyboxPod("", "")
	tmpl.Labels = labels
	tmpl.Spec.TerminationGracePeriodSeconds = new(int64(1))
	tmpl.Spec.TopologySpreadConstraints = []v1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: v1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
	}}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "spread"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec},
		},
	}
	if _, err := cl.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testbed.Eventually(t, 90*time.Second, func() (bool, string) {
		list, err := cl.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=spread"})
		if err != nil {
			return false, err.Error()
		}
		perNode := map[string]int{}
		for _, p := range list.Items {
			if p.Status.Phase != v1.PodRunning {
				return false, fmt.Sprintf("pod %s on %q is %s", p.Name, p.Spec.NodeName, p.Status.Phase)
			}
			c := runtimes[p.Spec.NodeName]
			if c == nil {
				return false, fmt.Sprintf("pod %s on unknown node %q", p.Name, p.Spec.NodeName)
			}
			_, subnet, _ := net.ParseCIDR(c.Subnet)
			if ip := net.ParseIP(p.Status.PodIP); ip == nil || !subnet.Contains(ip) {
				return false, fmt.Sprintf("pod %s on %s has IP %q outside %s", p.Name, p.Spec.NodeName, p.Status.PodIP, c.Subnet)
			}
			perNode[p.Spec.NodeName]++
		}
		return len(list.Items) == 4 && perNode["node-a"] == 2 && perNode["node-b"] == 2, fmt.Sprintf("running per node: %v", perNode)
	})
	d, err := cl.Client.AppsV1().Deployments(ns).Get(ctx, "spread", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		d, err = cl.Client.AppsV1().Deployments(ns).Get(ctx, "spread", metav1.GetOptions{})
		return err == nil && d.Status.AvailableReplicas == 4, fmt.Sprintf("deployment status %+v", d.Status)
	})
}
