package kuberuntime

import (
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/pkg/pods/allocation"
)

func resources(cpuReq, cpuLim, memLim string) v1.ResourceRequirements {
	return v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpuReq)},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpuLim), v1.ResourceMemory: resource.MustParse(memLim)},
	}
}

// A running container whose granted resources change is resized in place
// (UpdateContainerResources, the pod cgroup re-applied, no restart); a
// change to a resource whose resize policy is RestartContainer restarts
// it instead; an equivalent quantity (1 and 1000m) is no change.
func TestResizeInPlace(t *testing.T) {
	f := newFixture(t)
	store, err := allocation.Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	cgroups := 0
	f.m.resources, f.m.resizer.resources, f.m.resizer.podCgroup = store, store, func(*v1.Pod) error { cgroups++; return nil }
	pod := newPod(v1.RestartPolicyAlways, "a").pod
	pod.Spec.Containers[0].Resources = resources("100m", "200m", "64Mi")
	pod.Spec.Containers[0].ResizePolicy = []v1.ContainerResizePolicy{{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer}}
	f.sync(t, pod)
	if got, ok := store.Actuated(pod.UID, "a"); !ok || !allocation.Equal(got, pod.Spec.Containers[0].Resources) {
		t.Fatalf("actuated %v %v after the start", got, ok)
	}

	f.rt.ResetCalls()
	pod.Spec.Containers[0].Resources = resources("100m", "1", "64Mi")
	f.sync(t, pod)
	got := calls(f.rt, "UpdateContainerResources", "StopContainer", "CreateContainer")
	if len(got) != 1 || !strings.Contains(got[0], "shares=102 quota=100000 memory=67108864") || cgroups != 1 {
		t.Fatalf("cpu resize: calls %v, pod cgroup applied %d times", got, cgroups)
	}

	f.rt.ResetCalls()
	pod.Spec.Containers[0].Resources = resources("100m", "1000m", "64Mi")
	f.sync(t, pod)
	if got := calls(f.rt, "UpdateContainerResources", "StopContainer"); len(got) != 0 {
		t.Fatalf("1000m is 1: calls %v", got)
	}

	f.rt.ResetCalls()
	pod.Spec.Containers[0].Resources = resources("100m", "1", "128Mi")
	f.sync(t, pod)
	if got := calls(f.rt, "UpdateContainerResources", "StopContainer", "CreateContainer"); len(got) != 2 ||
		!strings.HasPrefix(got[0], "StopContainer") || !strings.HasPrefix(got[1], "CreateContainer") {
		t.Fatalf("memory with RestartContainer: calls %v", got)
	}
	if got, _ := store.Actuated(pod.UID, "a"); got.Limits.Memory().String() != "128Mi" {
		t.Fatalf("actuated after the restart %v", got)
	}
}
