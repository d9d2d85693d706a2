package testbed

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StartNode runs a nodelet registered as node name on runtime cd; when
// the test ends the nodelet stops and its Node object is deleted, so the
// scheduler never picks a node of an earlier test.
func (c *Cluster) StartNode(t *testing.T, name string, cd *Containerd, extraConfig string, args ...string) *Nodelet {
	t.Helper()
	kubeconfig, err := c.NodeKubeconfig(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := c.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting node %s: %v", name, err)
		}
	})
	// The API server reaches the kubelet API at the node's InternalIP
	// with its client certificate, signed by the cluster CA.
	extraConfig = fmt.Sprintf("authentication:\n  x509:\n    clientCAFile: %s\n%s", c.CAFile(), extraConfig)
	return StartNodelet(t, cd, NodeletOptions{
		NodeName: name, Kubeconfig: kubeconfig, CgroupRoot: CgroupRoot() + "/" + name,
		ExtraConfig: extraConfig, Address: "0.0.0.0", Args: args,
	})
}

// Namespace creates a namespace for the test and waits for its default
// service account; it is deleted when the test ends.
func (c *Cluster) Namespace(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	name := strings.ToLower(regexp.MustCompile(`[^a-zA-Z0-9]+`).ReplaceAllString(t.Name(), "-"))
	if len(name) > 50 {
		name = name[:50]
	}
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting namespace %s: %v", name, err)
		}
	})
	// Two minutes, as upstream's e2e framework allows: after a test that
	// stopped the API server, the controller-manager's informers retry
	// with a jittered back-off of up to a minute before they list again.
	Eventually(t, 2*time.Minute, func() (bool, string) {
		_, err := c.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprintf("no default service account: %v", err)
	})
	return name
}

// WaitPod polls the API's pod until cond holds.
func (c *Cluster) WaitPod(t *testing.T, timeout time.Duration, ns, name string, cond func(*v1.Pod) (bool, string)) *v1.Pod {
	t.Helper()
	var pod *v1.Pod
	Eventually(t, timeout, func() (bool, string) {
		p, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		return cond(p)
	})
	return pod
}

// PodRunning is a WaitPod condition: the pod's phase is Running.
func PodRunning(p *v1.Pod) (bool, string) {
	if p.Status.Phase != v1.PodRunning {
		return false, fmt.Sprintf("phase %q, status %+v", p.Status.Phase, p.Status)
	}
	return true, ""
}

// Handover checks pods keep their containers while a node passes from
// one node agent to another.
type Handover struct {
	c  *Cluster
	n  *Nodelet
	ns string
	// first holds each pod's main container as first seen.
	first map[string]*runtimeapi.Container
}

// NewHandover watches pods of namespace ns on node n.
func (c *Cluster) NewHandover(n *Nodelet, ns string) *Handover {
	return &Handover{c: c, n: n, ns: ns, first: map[string]*runtimeapi.Container{}}
}

// Note records the pod's running main container.
func (h *Handover) Note(t *testing.T, name string) {
	t.Helper()
	c := h.n.RunningPodContainer(name, "main")
	if c == nil {
		t.Fatalf("%s has no running main container", name)
	}
	h.first[name] = c
}

// Kept waits until the agent whose log is log (from offset on) has synced
// the pod, then checks its main container is the one noted, in the same
// sandbox, and its API status shows that container with restartCount 0.
func (h *Handover) Kept(t *testing.T, who string, log func() string, offset int, name string) {
	t.Helper()
	Eventually(t, 60*time.Second, func() (bool, string) {
		return strings.Contains(log()[offset:], fmt.Sprintf(`"SyncPod exit" pod=%q`, h.ns+"/"+name)), "not synced yet: " + name
	})
	first := h.first[name]
	c := h.n.RunningPodContainer(name, "main")
	if c == nil || c.Id != first.Id || c.PodSandboxId != first.PodSandboxId {
		t.Fatalf("%s replaced %s's container: %+v, was %s in sandbox %s", who, name, c, first.Id, first.PodSandboxId)
	}
	p, err := h.c.Client.CoreV1().Pods(h.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cs := p.Status.ContainerStatuses; len(cs) != 1 || cs[0].RestartCount != 0 || cs[0].ContainerID != "containerd://"+first.Id {
		t.Fatalf("%s: %s's container status %+v", who, name, cs)
	}
}
