//go:build integration

package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/nodelet/nodelet/internal/testbed"
)

func nodeCondition(n *v1.Node, t v1.NodeConditionType) *v1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func waitNodeReady(t *testing.T, name string, timeout time.Duration) *v1.Node {
	t.Helper()
	var node *v1.Node
	testbed.Eventually(t, timeout, func() (bool, string) {
		n, err := cl.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		node = n
		c := nodeCondition(n, v1.NodeReady)
		return c != nil && c.Status == v1.ConditionTrue, fmt.Sprintf("ready condition %+v", c)
	})
	return node
}

// A new node registers with its labels, addresses, resources and system
// information, is Ready within 10 s of nodelet starting, and holds a
// lease it renews.
func TestNodeRegistersReady(t *testing.T) {
	start := time.Now()
	n := startNode(t, "node-ready", cd, "")
	node := waitNodeReady(t, n.NodeName, 10*time.Second-time.Since(start))
	t.Logf("node Ready %v after nodelet started", time.Since(start).Round(time.Millisecond))

	for k, v := range map[string]string{"kubernetes.io/hostname": "node-ready", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"} {
		if node.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, node.Labels[k], v)
		}
	}
	addrs := map[v1.NodeAddressType]string{}
	for _, a := range node.Status.Addresses {
		addrs[a.Type] = a.Address
	}
	if addrs[v1.NodeHostName] != "node-ready" || addrs[v1.NodeInternalIP] == "" {
		t.Errorf("addresses %v, want an InternalIP and Hostname node-ready", node.Status.Addresses)
	}
	for _, r := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourcePods, v1.ResourceEphemeralStorage} {
		c, a := node.Status.Capacity[r], node.Status.Allocatable[r]
		if c.IsZero() || a.IsZero() || a.Cmp(c) > 0 {
			t.Errorf("%s: capacity %s, allocatable %s", r, c.String(), a.String())
		}
	}
	mc, ma := node.Status.Capacity[v1.ResourceMemory], node.Status.Allocatable[v1.ResourceMemory]
	if ma.Cmp(mc) >= 0 {
		t.Errorf("allocatable memory %s is not capacity %s minus the eviction threshold", ma.String(), mc.String())
	}
	info := node.Status.NodeInfo
	if !strings.HasPrefix(info.ContainerRuntimeVersion, "containerd://") || !strings.Contains(info.KubeletVersion, "nodelet") ||
		info.KernelVersion == "" || info.OSImage == "" || info.OperatingSystem != "linux" {
		t.Errorf("nodeInfo %+v", info)
	}
	if node.Status.DaemonEndpoints.KubeletEndpoint.Port != int32(n.APIPort) {
		t.Errorf("daemonEndpoints %+v", node.Status.DaemonEndpoints)
	}
	for typ, reason := range map[v1.NodeConditionType]string{
		v1.NodeReady: "KubeletReady", v1.NodeMemoryPressure: "KubeletHasSufficientMemory",
		v1.NodeDiskPressure: "KubeletHasNoDiskPressure", v1.NodePIDPressure: "KubeletHasSufficientPID",
	} {
		c := nodeCondition(node, typ)
		if c == nil || c.Reason != reason {
			t.Errorf("condition %s = %+v, want reason %s", typ, c, reason)
		}
	}

	ctx := context.Background()
	var firstRenew time.Time
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		l, err := cl.Client.CoordinationV1().Leases("kube-node-lease").Get(ctx, n.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ok := *l.Spec.HolderIdentity == n.NodeName && *l.Spec.LeaseDurationSeconds == 40 && l.Spec.RenewTime != nil &&
			len(l.OwnerReferences) == 1 && l.OwnerReferences[0].UID == node.UID
		if ok {
			firstRenew = l.Spec.RenewTime.Time
		}
		return ok, fmt.Sprintf("lease %+v %+v", l.Spec, l.OwnerReferences)
	})
	// Renewed every 10 s.
	testbed.Eventually(t, 15*time.Second, func() (bool, string) {
		l, err := cl.Client.CoordinationV1().Leases("kube-node-lease").Get(ctx, n.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return l.Spec.RenewTime.After(firstRenew), fmt.Sprintf("lease renewed at %v, first %v", l.Spec.RenewTime, firstRenew)
	})

	// Stopping nodelet (or the node being deleted) and starting it again
	// registers it again with the same labels.
	n.Stop()
	if err := cl.Client.CoreV1().Nodes().Delete(ctx, n.NodeName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n.Start()
	waitNodeReady(t, n.NodeName, 10*time.Second)
}

// A graceful node shutdown, announced by systemd-logind (the node runs in
// a systemd bed, powered off through logind), shows in the API: the node
// NotReady because it is shutting down, and its pods terminal with
// upstream's reason and a DisruptionTarget condition, all written before
// the system went down. As upstream, a pod whose containers all exit 0 on
// SIGTERM is Succeeded; one that fails is Failed. The grace period is
// room, not a wait: the pods exit on SIGTERM and the shutdown goes on once
// they have; but their terminal phase is written only after their
// sandboxes stopped, as upstream's, and with 6 s in all a loaded CI node
// (StopPodSandbox 5.5 s) went down first.
func TestGracefulShutdownInTheAPI(t *testing.T) {
	ns := namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bed, err := testbed.StartSystemd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := bed.Stop(); err != nil {
			t.Error(err)
		}
	})
	runtime, err := testbed.StartContainerdWith(ctx, 8, testbed.ContainerdOptions{Systemd: bed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := runtime.Stop(); err != nil {
			t.Error(err)
		}
	})
	kubeconfig, err := cl.NodeKubeconfig("node-shutdown")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cl.Client.CoreV1().Nodes().Delete(context.Background(), "node-shutdown", metav1.DeleteOptions{})
	})
	n := testbed.StartNodelet(t, runtime, testbed.NodeletOptions{NodeName: "node-shutdown", Kubeconfig: kubeconfig, Systemd: bed, CgroupRoot: "/",
		Address: "0.0.0.0", ExtraConfig: fmt.Sprintf("cgroupDriver: systemd\nshutdownGracePeriod: 20s\nshutdownGracePeriodCriticalPods: 2s\nauthentication:\n  x509:\n    clientCAFile: %s\n", cl.CAFile())})
	waitNodeReady(t, n.NodeName, time.Minute)
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		return strings.Contains(n.Log(), "Graceful node shutdown armed"), "no delay lock taken"
	})
	for name, code := range map[string]int{"fails": 1, "clean": 0} {
		pod := busyboxPod(name, n.NodeName, "sh", "-c", fmt.Sprintf("trap 'exit %d' TERM; sleep 3600 & wait", code))
		pod.Spec.TerminationGracePeriodSeconds = new(int64(30))
		if _, err := cl.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPod(t, time.Minute, ns, name, running)
	}

	if out, err := bed.Command(ctx, "busctl", "call", "org.freedesktop.login1", "/org/freedesktop/login1",
		"org.freedesktop.login1.Manager", "PowerOff", "b", "false").CombinedOutput(); err != nil {
		t.Fatalf("PowerOff: %v: %s", err, out)
	}
	if err := bed.Wait(time.Minute); err != nil {
		t.Fatal(err)
	}
	runtime.WentDown()
	// Already written: the node is down, nobody else writes these.
	const msg = "Pod was terminated in response to imminent node shutdown."
	for name, phase := range map[string]v1.PodPhase{"fails": v1.PodFailed, "clean": v1.PodSucceeded} {
		p, err := cl.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != phase || p.Status.Reason != "Terminated" || p.Status.Message != msg {
			t.Errorf("%s: phase %s reason %q message %q, want %s", name, p.Status.Phase, p.Status.Reason, p.Status.Message, phase)
		}
		var disruption *v1.PodCondition
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == v1.DisruptionTarget {
				disruption = &p.Status.Conditions[i]
			}
		}
		if disruption == nil || disruption.Status != v1.ConditionTrue || disruption.Reason != v1.PodReasonTerminationByKubelet || disruption.Message != msg {
			t.Errorf("%s: DisruptionTarget condition %+v", name, disruption)
		}
	}
	node, err := cl.Client.CoreV1().Nodes().Get(context.Background(), n.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := nodeCondition(node, v1.NodeReady); c == nil || c.Status != v1.ConditionFalse || c.Reason != "KubeletNotReady" || c.Message != "node is shutting down" {
		t.Errorf("Ready condition %+v", c)
	}
}

// TestExternalCloudProvider: with --cloud-provider=external the node
// registers tainted uninitialized, with --node-ip handed to the cloud
// controller in its annotation; addresses a cloud controller sets stay
// through nodelet's status writes.
func TestExternalCloudProvider(t *testing.T) {
	ctx := context.Background()
	ip := testbed.HostIP()
	n := startNode(t, "node-cloud", cd, "nodeStatusReportFrequency: 2s\nnodeStatusUpdateFrequency: 1s\n", "--cloud-provider=external", "--node-ip="+ip)
	node := waitNodeReady(t, n.NodeName, time.Minute)
	tainted := false
	for _, taint := range node.Spec.Taints {
		tainted = tainted || (taint.Key == "node.cloudprovider.kubernetes.io/uninitialized" && taint.Value == "true" && taint.Effect == v1.TaintEffectNoSchedule)
	}
	if !tainted || node.Annotations["alpha.kubernetes.io/provided-node-ip"] != ip {
		t.Fatalf("registered with taints %v and annotations %v", node.Spec.Taints, node.Annotations)
	}
	// The cloud controller initializes the node, retrying on a conflict
	// with nodelet's own status writes (every second here), as it does.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := cl.Client.CoreV1().Nodes().Get(ctx, n.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: ip}, {Type: v1.NodeInternalDNS, Address: "ip-10-0-0-7.cloud.internal"}}
		_, err = cl.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	set := time.Now()
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		node, err := cl.Client.CoreV1().Nodes().Get(ctx, n.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := nodeCondition(node, v1.NodeReady)
		return ready != nil && ready.LastHeartbeatTime.Time.After(set.Add(3*time.Second)), "no status write since the addresses were set"
	})
	node, err = cl.Client.CoreV1().Nodes().Get(ctx, n.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(node.Status.Addresses) != 2 || node.Status.Addresses[1].Address != "ip-10-0-0-7.cloud.internal" {
		t.Fatalf("nodelet overwrote the cloud controller's addresses: %v", node.Status.Addresses)
	}
}
