//go:build integration

package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/nodelet/nodelet/internal/testbed"
)

// A RuntimeClass of the API server names the handler a pod's sandbox runs
// with ("test-handler", runc again in the test containerd, under a class
// named otherwise), and its overhead, which the API server's RuntimeClass
// admission puts in the pod, is charged to the pod's cgroup. A class
// deleted while a pod bound to the node waited fails that pod's sandbox
// with upstream's error and event, and the pod starts once the class is
// back: the node follows the classes, it does not read them once.
func TestRuntimeClassesFromTheAPIServer(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-runtimeclass", cd, "")
	waitNodeReady(t, n.NodeName, 10*time.Second)
	classes := cl.Client.NodeV1().RuntimeClasses()
	newClass := func(name string) {
		t.Helper()
		rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: "test-handler",
			Overhead: &nodev1.Overhead{PodFixed: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("32Mi")}}}
		if _, err := classes.Create(ctx, rc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = classes.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	pods := cl.Client.CoreV1().Pods(ns)
	classy := func(name, class string) *v1.Pod {
		p := busyboxPod(name, n.NodeName)
		p.Spec.TerminationGracePeriodSeconds = new(int64(1))
		p.Spec.RuntimeClassName = &class
		q := v1.ResourceList{v1.ResourceCPU: resource.MustParse("200m"), v1.ResourceMemory: resource.MustParse("64Mi")}
		p.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: q, Limits: q}
		return p
	}

	fast := "fast-" + ns
	newClass(fast)
	if _, err := pods.Create(ctx, classy("classy", fast), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, 60*time.Second, ns, "classy", running)
	if o := p.Spec.Overhead.Memory(); o.Cmp(resource.MustParse("32Mi")) != 0 {
		t.Fatalf("the API server put overhead %v in the pod", p.Spec.Overhead)
	}
	if h, err := cd.SandboxHandler(ctx, ns, "classy"); err != nil || h != "test-handler" {
		t.Errorf("the sandbox runs with handler %q (%v), want test-handler", h, err)
	}
	cgs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/memory/*", n.NodeName, "kubepods", "pod"+string(p.UID), "memory.limit_in_bytes"))
	if len(cgs) != 1 {
		t.Fatalf("the pod's cgroup: %v", cgs)
	}
	if b, err := os.ReadFile(cgs[0]); err != nil || strings.TrimSpace(string(b)) != fmt.Sprint((64+32)<<20) {
		t.Errorf("pod memory limit %q (%v), want the container's 64Mi and the class's 32Mi", b, err)
	}

	// The class goes while the node is down and a pod waits for it.
	gone := "gone-" + ns
	newClass(gone)
	n.Stop()
	if _, err := pods.Create(ctx, classy("orphan", gone), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := classes.Delete(ctx, gone, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n.Start()
	want := fmt.Sprintf(`Failed to create pod sandbox: runtimeclass.node.k8s.io %q not found`, gone)
	testbed.Eventually(t, 60*time.Second, func() (bool, string) {
		evs, err := cl.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "orphan").String()})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Reason == "FailedCreatePodSandBox" && e.Message == want {
				return true, ""
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, fmt.Sprintf("events %q", seen)
	})
	if p, err := pods.Get(ctx, "orphan", metav1.GetOptions{}); err != nil || p.Status.Phase != v1.PodPending {
		t.Fatalf("the pod of a deleted class: %v (%v)", p.Status.Phase, err)
	}
	newClass(gone)
	waitPod(t, 90*time.Second, ns, "orphan", running)
	if h, err := cd.SandboxHandler(ctx, ns, "orphan"); err != nil || h != "test-handler" {
		t.Errorf("once its class is back, the sandbox runs with handler %q (%v)", h, err)
	}
}
