//go:build integration

package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

const outage = 60 * time.Second

// The API server and its etcd stop for a minute just after a burst of
// creates and deletes reached the node: the node carries on, and once
// they are back the API shows the new pods running and the deleted ones
// gone, as the runtime has them.
func TestAPIServerOutageDuringBurst(t *testing.T) {
	record(t, row{scenario: "API server + etcd down 60 s", load: "15 creates + 5 deletes", fault: "kube-apiserver and etcd stopped 60 s",
		invariants: []string{invNoneLost, invNoRestart, invTruth, invNoCRILeak, invNoHostLeak, invNoGoroutine}})
	ctx := context.Background()
	kubeconfig, err := cl.NodeKubeconfig("outage")
	if err != nil {
		t.Fatal(err)
	}
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{NodeName: "outage", Kubeconfig: kubeconfig,
		CgroupRoot: testbed.CgroupRoot() + "/outage", ExtraConfig: openAPI})
	t.Cleanup(func() { _ = cl.Client.CoreV1().Nodes().Delete(context.Background(), "outage", metav1.DeleteOptions{}) })
	idle := goroutines(t, n)
	pods := cl.Client.CoreV1().Pods("default")
	create := func(name string) {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PodSpec{
			NodeName: "outage", AutomountServiceAccountToken: new(false), TerminationGracePeriodSeconds: new(int64(2)),
			Containers: []v1.Container{{Name: "main", Image: testbed.BusyboxImage, ImagePullPolicy: v1.PullIfNotPresent,
				Command: []string{"sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"}}},
		}}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var old, fresh []string
	for i := 0; i < 5; i++ {
		old = append(old, fmt.Sprintf("old-%d", i))
		create(old[i])
	}
	apiRunning(t, old)
	for i := 0; i < 15; i++ {
		fresh = append(fresh, fmt.Sprintf("new-%d", i))
		create(fresh[i])
	}
	for _, name := range old {
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cl.StopAPIServer()
	cl.StopEtcd()
	down := time.Now()
	testbed.Eventually(t, outage+10*time.Second, func() (bool, string) {
		return time.Since(down) >= outage, "the outage lasts a minute"
	})
	if err := n.Healthz(); err != nil {
		t.Errorf("nodelet unhealthy during the outage: %v", err)
	}
	if err := cl.StartEtcd(); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := cl.StartAPIServer(sctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	apiRunning(t, fresh)
	apiGone(t, n, old)
	setRow(t, time.Since(start))
	apiTruth(t, n, fresh)
	for _, name := range fresh {
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	apiGone(t, n, fresh)
	checkNoHostLeaks(t, n)
	checkGoroutines(t, n, idle)
}

// apiRunning waits until the API shows every pod running, never restarted.
func apiRunning(t *testing.T, names []string) {
	t.Helper()
	testbed.Eventually(t, convergeTimeout, func() (bool, string) {
		for _, name := range names {
			p, err := cl.Client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if p.Status.Phase != v1.PodRunning || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Running == nil {
				return false, fmt.Sprintf("%s: phase %s, %+v", name, p.Status.Phase, p.Status.ContainerStatuses)
			}
			if rc := p.Status.ContainerStatuses[0].RestartCount; rc != 0 {
				t.Fatalf("%s restarted %d times", name, rc)
			}
		}
		return true, ""
	})
}

// apiGone waits until the pods are gone from the API and the runtime.
func apiGone(t *testing.T, n *testbed.Nodelet, names []string) {
	t.Helper()
	testbed.Eventually(t, convergeTimeout, func() (bool, string) {
		for _, name := range names {
			if _, err := cl.Client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("%s still in the API (%v)", name, err)
			}
			if sbs := n.PodSandboxes(name); len(sbs) > 0 {
				return false, fmt.Sprintf("%s still has %d sandboxes", name, len(sbs))
			}
		}
		return true, ""
	})
}

// apiTruth: the runtime runs, for each pod, the container its API status
// names, on one ready sandbox.
func apiTruth(t *testing.T, n *testbed.Nodelet, names []string) {
	t.Helper()
	for _, name := range names {
		p, err := cl.Client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := n.RunningPodContainer(name, "main")
		if c == nil || !strings.HasSuffix(p.Status.ContainerStatuses[0].ContainerID, c.Id) {
			t.Errorf("%s: the API names %s, the runtime runs %v", name, p.Status.ContainerStatuses[0].ContainerID, c)
		}
		ready := 0
		for _, sb := range n.PodSandboxes(name) {
			if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
				ready++
			}
		}
		if ready != 1 {
			t.Errorf("%s has %d ready sandboxes", name, ready)
		}
	}
}
