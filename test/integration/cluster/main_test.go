//go:build integration

// Package cluster tests nodelet in cluster mode against the real upstream
// control plane (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler) on loopback ports, with real containerd instances as
// the nodes' runtimes.
package cluster

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

var (
	cd *testbed.Containerd
	cl *testbed.Cluster
)

func TestMain(m *testing.M) {
	testbed.Main(m, &cd, testbed.WithCluster(&cl, "nodelet-cluster-"))
}

// startNode runs a nodelet registered as node name on runtime c (see
// Cluster.StartNode).
func startNode(t *testing.T, name string, c *testbed.Containerd, extraConfig string, args ...string) *testbed.Nodelet {
	t.Helper()
	return cl.StartNode(t, name, c, extraConfig, args...)
}

// namespace creates a namespace for the test (see Cluster.Namespace).
func namespace(t *testing.T) string {
	t.Helper()
	return cl.Namespace(t)
}

// waitPod polls the API's pod until cond holds.
func waitPod(t *testing.T, timeout time.Duration, ns, name string, cond func(*v1.Pod) (bool, string)) *v1.Pod {
	t.Helper()
	return cl.WaitPod(t, timeout, ns, name, cond)
}

func running(p *v1.Pod) (bool, string) { return testbed.PodRunning(p) }

// busyboxPod is a pod that sleeps. It asks for no service account token:
// only TestServiceAccountTokenAndVolumes needs one.
func busyboxPod(name, nodeName string, cmd ...string) *v1.Pod {
	if len(cmd) == 0 {
		cmd = []string{"sleep", "3600"}
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: v1.PodSpec{
			NodeName:                     nodeName,
			AutomountServiceAccountToken: new(false),
			Containers: []v1.Container{{
				Name: "main", Image: testbed.BusyboxImage, Command: cmd, ImagePullPolicy: v1.PullIfNotPresent,
			}},
		},
	}
}

func condition(p *v1.Pod, t v1.PodConditionType) v1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}
