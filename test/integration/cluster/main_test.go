//go:build integration

// Package cluster tests nodelet in cluster mode against the real upstream
// control plane (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler) on loopback ports, with real containerd instances as
// the nodes' runtimes.
package cluster

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

var (
	cd *testbed.Containerd
	cl *testbed.Cluster
)

func TestMain(m *testing.M) {
	testbed.Main(m, &cd, func(ctx context.Context) (func(), error) {
		dir, err := os.MkdirTemp("/var/lib", "nodelet-cluster-")
		if err != nil {
			return nil, err
		}
		cl, err = testbed.StartCluster(ctx, dir)
		if err != nil {
			return func() { testbed.RemoveDir(dir) }, err
		}
		return func() {
			cl.Stop()
			testbed.RemoveDir(dir)
		}, nil
	})
}

// startNode runs a nodelet registered as node name on runtime c; when
// the test ends the nodelet stops and its Node object is deleted, so the
// scheduler never picks a node of an earlier test.
func startNode(t *testing.T, name string, c *testbed.Containerd, extraConfig string, args ...string) *testbed.Nodelet {
	t.Helper()
	kubeconfig, err := cl.NodeKubeconfig(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := cl.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting node %s: %v", name, err)
		}
	})
	// The API server reaches the kubelet API at the node's InternalIP
	// with its client certificate, signed by the cluster CA.
	extraConfig = fmt.Sprintf("authentication:\n  x509:\n    clientCAFile: %s\n%s", cl.CAFile(), extraConfig)
	return testbed.StartNodelet(t, c, testbed.NodeletOptions{
		NodeName: name, Kubeconfig: kubeconfig, CgroupRoot: testbed.CgroupRoot() + "/" + name,
		ExtraConfig: extraConfig, Address: "0.0.0.0", Args: args,
	})
}

// namespace creates a namespace for the test and waits for its default
// service account; it is deleted when the test ends.
func namespace(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	name := strings.ToLower(regexp.MustCompile(`[^a-zA-Z0-9]+`).ReplaceAllString(t.Name(), "-"))
	if len(name) > 50 {
		name = name[:50]
	}
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := cl.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cl.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting namespace %s: %v", name, err)
		}
	})
	// Two minutes, as upstream's e2e framework allows: after a test that
	// stopped the API server, the controller-manager's informers retry
	// with a jittered back-off of up to a minute before they list again.
	testbed.Eventually(t, 2*time.Minute, func() (bool, string) {
		_, err := cl.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprintf("no default service account: %v", err)
	})
	return name
}

// waitPod polls the API's pod until cond holds.
func waitPod(t *testing.T, timeout time.Duration, ns, name string, cond func(*v1.Pod) (bool, string)) *v1.Pod {
	t.Helper()
	var pod *v1.Pod
	testbed.Eventually(t, timeout, func() (bool, string) {
		p, err := cl.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		return cond(p)
	})
	return pod
}

func running(p *v1.Pod) (bool, string) {
	if p.Status.Phase != v1.PodRunning {
		return false, fmt.Sprintf("phase %q, status %+v", p.Status.Phase, p.Status)
	}
	return true, ""
}

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
