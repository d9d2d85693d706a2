//go:build integration

package cluster

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/nodelet/nodelet/internal/testbed"
)

// A pod bound to the node runs, and the API shows its IP, conditions and
// events; deleting it runs preStop, stops it within its grace period and
// removes the object; a pod the scheduler places runs too.
func TestPodLifecycle(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-pods", cd, "")
	waitNodeReady(t, n.NodeName, 10*time.Second)
	pods := cl.Client.CoreV1().Pods(ns)

	// PID 1 ignores SIGTERM, so the container lives out its grace period.
	pod := busyboxPod("bound", n.NodeName)
	pod.Spec.TerminationGracePeriodSeconds = new(int64(3))
	pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{
		Exec: &v1.ExecAction{Command: []string{"sh", "-c", "echo bye > /tmp/prestop"}},
	}}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitPod(t, 30*time.Second, ns, "bound", running)
	_, subnet, _ := net.ParseCIDR(cd.Subnet)
	if ip := net.ParseIP(got.Status.PodIP); ip == nil || !subnet.Contains(ip) {
		t.Errorf("podIP %q not in the node's pod subnet %s", got.Status.PodIP, cd.Subnet)
	}
	if got.Status.HostIP == "" || got.Status.StartTime == nil || got.Status.QOSClass != v1.PodQOSBestEffort {
		t.Errorf("status %+v", got.Status)
	}
	for _, c := range []v1.PodConditionType{v1.PodScheduled, v1.PodInitialized, v1.ContainersReady, v1.PodReady} {
		if condition(got, c) != v1.ConditionTrue {
			t.Errorf("condition %s is %q", c, condition(got, c))
		}
	}
	cs := got.Status.ContainerStatuses
	if len(cs) != 1 || cs[0].State.Running == nil || !cs[0].Ready || !strings.HasPrefix(cs[0].ContainerID, "containerd://") {
		t.Errorf("container statuses %+v", cs)
	}
	waitEvents(t, ns, "bound", "Pulled", "Created", "Started")

	// kubectl describe shows the node's status and events as for a kubelet.
	out, err := cl.Kubectl(ctx, "describe", "pod", "bound", "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{`Node:\s+` + n.NodeName + "/", `Status:\s+Running`, `IP:\s+` + regexp.QuoteMeta(got.Status.PodIP),
		`Container ID:\s+containerd://`, `Ready\s+True`, `QoS Class:\s+BestEffort`,
		`Normal\s+Started\s+\S+\s+kubelet\s+(spec.containers\{main\}: )?Started container main`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("kubectl describe lacks %s:\n%s", re, out)
		}
	}

	// Checked while it runs: once deleted, its dead containers may be
	// garbage collected at any moment.
	if len(n.PodContainers("bound")) == 0 {
		t.Error("no containers of the pod in the runtime: nodelet labelled them otherwise")
	}
	start := time.Now()
	if err := pods.Delete(ctx, "bound", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The grace period is 3 s; the rest of the deadline is the runtime's.
	// Under make test's parallel suites, containerd once took 8.5 s for
	// this pod's stop calls alone (StopContainer with a 2 s timeout 5.4 s,
	// StopPodSandbox 2.9 s), after a preStop exec of 1.2 s.
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		_, err := pods.Get(ctx, "bound", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("pod still there: %v", err)
	})
	took := time.Since(start)
	t.Logf("deleted pod gone after %v (grace period 3s)", took.Round(time.Millisecond))
	if took < 2*time.Second {
		t.Errorf("pod gone after %v: the grace period was not honoured", took)
	}
	waitEvents(t, ns, "bound", "Killing")
	if n.RunningPodContainer("bound", "main") != nil {
		t.Error("the container still runs")
	}

	// Without nodeName: the scheduler binds it to the only node.
	if _, err := pods.Create(ctx, busyboxPod("scheduled", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got = waitPod(t, 30*time.Second, ns, "scheduled", running)
	if got.Spec.NodeName != n.NodeName {
		t.Errorf("scheduled to %q", got.Spec.NodeName)
	}
}

// waitEvents waits for events with the reasons about a pod, from nodelet.
func waitEvents(t *testing.T, ns, pod string, reasons ...string) {
	t.Helper()
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		list, err := cl.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", pod).String(),
		})
		if err != nil {
			return false, err.Error()
		}
		have := map[string]bool{}
		var all []string
		for _, e := range list.Items {
			// The node agent's events carry upstream's source, kubelet.
			if e.Source.Component == "kubelet" && e.Source.Host != "" {
				have[e.Reason] = true
			}
			all = append(all, e.Reason+"("+e.Source.Component+")")
		}
		for _, r := range reasons {
			if !have[r] {
				return false, fmt.Sprintf("no %s event from nodelet; events: %v", r, all)
			}
		}
		return true, ""
	})
}
