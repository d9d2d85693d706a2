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
)

// In-place resize through the API: kubectl patch --subresource resize
// changes a running container's CPU and memory (resizePolicy NotRequired)
// and adds requests to a second container that had none; nodelet applies
// them to the running containers (their cgroup files change) without a
// restart, and reports the new resources and no resize condition. A PUT
// to the resize subresource with an equivalent quantity (1 for 1000m) and
// a new memory limit under RestartContainer restarts only that container.
// A resize that does not fit beside the other pods is Deferred, changes
// nothing, and is granted once room is made.
func TestResizeInPlace(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-resize", cd, "")
	waitNodeReady(t, n.NodeName, 10*time.Second)
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range strings.Split(n.Log(), "\n") {
				if strings.Contains(strings.ToLower(l), "resize") {
					t.Log(l)
				}
			}
		}
	})
	pod := busyboxPod("resizable", n.NodeName)
	pod.Spec.TerminationGracePeriodSeconds = new(int64(1))
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("200m"), v1.ResourceMemory: resource.MustParse("128Mi")},
	}
	side := pod.Spec.Containers[0]
	side.Name, side.Resources = "side", v1.ResourceRequirements{}
	side.ResizePolicy = []v1.ContainerResizePolicy{{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer}}
	pod.Spec.Containers = append(pod.Spec.Containers, side)
	if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, 60*time.Second, ns, "resizable", running)
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Resources == nil {
			t.Fatalf("%s reports no resources: the API server would refuse every resize", cs.Name)
		}
	}
	mainID, sideID := n.RunningPodContainer("resizable", "main").Id, n.RunningPodContainer("resizable", "side").Id
	cgroupFile := func(container, file string) string {
		t.Helper()
		c := n.RunningPodContainer("resizable", container)
		out, err := n.Exec(c.Id, "cat", file)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	if q := cgroupFile("main", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); q != "20000" {
		t.Fatalf("quota before the resize: %s", q)
	}

	patch := `{"spec":{"containers":[` +
		`{"name":"main","resources":{"requests":{"cpu":"150m","memory":"64Mi"},"limits":{"cpu":"400m","memory":"192Mi"}}},` +
		`{"name":"side","resources":{"requests":{"cpu":"50m"}}}]}}`
	if out, code := kubectl(ctx, "", "patch", "-n", ns, "pod", "resizable", "--subresource", "resize", "--patch", patch); code != 0 {
		t.Fatalf("kubectl patch --subresource resize: %s", out)
	}
	resized := func(cpuLimit, memLimit string) func(p *v1.Pod) (bool, string) {
		return func(p *v1.Pod) (bool, string) {
			var got string
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Name == "main" && cs.Resources != nil {
					got = cs.Resources.Limits.Cpu().String() + "/" + cs.Resources.Limits.Memory().String()
				}
			}
			for _, c := range p.Status.Conditions {
				if c.Type == v1.PodResizePending || c.Type == v1.PodResizeInProgress {
					return false, fmt.Sprintf("condition %s %s %s", c.Type, c.Reason, c.Message)
				}
			}
			return got == cpuLimit+"/"+memLimit, "main runs with " + got
		}
	}
	p = waitPod(t, 60*time.Second, ns, "resizable", resized("400m", "192Mi"))
	if q := cgroupFile("main", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); q != "40000" {
		t.Fatalf("quota after the resize: %s", q)
	}
	if m := cgroupFile("main", "/sys/fs/cgroup/memory/memory.limit_in_bytes"); m != fmt.Sprint(192<<20) {
		t.Fatalf("memory limit after the resize: %s", m)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.RestartCount != 0 {
			t.Fatalf("%s restarted: %+v", cs.Name, cs)
		}
		if cs.Name == "side" && cs.AllocatedResources.Cpu().String() != "50m" {
			t.Fatalf("side's allocated resources %v", cs.AllocatedResources)
		}
	}
	if n.RunningPodContainer("resizable", "main").Id != mainID || n.RunningPodContainer("resizable", "side").Id != sideID {
		t.Fatal("a container was replaced by a NotRequired resize")
	}

	// PUT: main's CPU limit as "1" after "400m" (a change), its request
	// 150m spelt the same; side gets a memory request and limit, which
	// its policy says needs a restart.
	cur, err := cl.Client.CoreV1().Pods(ns).Get(ctx, "resizable", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Containers[0].Resources.Limits[v1.ResourceCPU] = resource.MustParse("1")
	cur.Spec.Containers[1].Resources.Requests[v1.ResourceMemory] = resource.MustParse("32Mi")
	if _, err := cl.Client.CoreV1().Pods(ns).UpdateResize(ctx, "resizable", cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, 60*time.Second, ns, "resizable", resized("1", "192Mi"))
	waitPod(t, 60*time.Second, ns, "resizable", func(p *v1.Pod) (bool, string) {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == "side" {
				return cs.RestartCount == 1 && cs.State.Running != nil && cs.AllocatedResources.Memory().String() == "32Mi",
					fmt.Sprintf("side: restarts %d, allocated %v", cs.RestartCount, cs.AllocatedResources)
			}
		}
		return false, "no status for side"
	})
	if q := cgroupFile("main", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); q != "100000" {
		t.Fatalf("quota after the second resize: %s", q)
	}
	if n.RunningPodContainer("resizable", "main").Id != mainID {
		t.Fatal("main was replaced")
	}

	// Deferred: a pod taking most of the node's CPU leaves no room for
	// a bigger request; once it is gone, housekeeping grants the resize.
	filler := busyboxPod("filler", n.NodeName)
	filler.Spec.TerminationGracePeriodSeconds = new(int64(1))
	filler.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("1700m")}
	if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, filler, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, 60*time.Second, ns, "filler", running)
	patch = `{"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":"400m"},"limits":{"cpu":"1500m"}}}]}}`
	if out, code := kubectl(ctx, "", "patch", "-n", ns, "pod", "resizable", "--subresource", "resize", "--patch", patch); code != 0 {
		t.Fatalf("kubectl patch: %s", out)
	}
	waitPod(t, 30*time.Second, ns, "resizable", func(p *v1.Pod) (bool, string) {
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodResizePending {
				return c.Reason == "Deferred" && strings.Contains(c.Message, "Node didn't have enough resource: cpu"), c.Reason + " " + c.Message
			}
		}
		return false, "no PodResizePending condition"
	})
	if q := cgroupFile("main", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); q != "100000" {
		t.Fatalf("a deferred resize changed the quota: %s", q)
	}
	if err := cl.Client.CoreV1().Pods(ns).Delete(ctx, "filler", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, 60*time.Second, ns, "resizable", resized("1500m", "192Mi"))
	if q := cgroupFile("main", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); q != "150000" {
		t.Fatalf("quota after the deferred resize: %s", q)
	}
}
