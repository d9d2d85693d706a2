package kuberuntime

import (
	"context"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/pods/allocation"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// ResourceState is what was last applied to each running container
// (pkg/pods/allocation): a pod resized in place is compared with it.
type ResourceState interface {
	Actuated(uid types.UID, name string) (v1.ResourceRequirements, bool)
	SetActuated(uid types.UID, name string, r v1.ResourceRequirements) error
}

// noResourceState remembers nothing: no resize is ever seen.
type noResourceState struct{}

func (noResourceState) Actuated(types.UID, string) (v1.ResourceRequirements, bool) {
	return v1.ResourceRequirements{}, false
}
func (noResourceState) SetActuated(types.UID, string, v1.ResourceRequirements) error { return nil }

// resize is a running container whose granted resources differ from
// those applied.
type resize struct {
	index int
	id    container.ContainerID
	from  v1.ResourceRequirements
}

// resizer resizes running containers in place.
type resizer struct {
	runtime        RuntimeService
	resources      ResourceState
	podCgroup      func(*v1.Pod) error
	steps          instrument.StepRecorder
	noCPUQuota     bool
	requestTimeout time.Duration
}

// actions finds the running regular containers whose resources
// changed (the pod passed to SyncPod carries what nodelet granted). A
// change to a resource whose resizePolicy is RestartContainer restarts
// the container (added to a); the others are resized in place.
func (m *resizer) actions(pod *v1.Pod, status *container.PodStatus, a *podActions) []resize {
	if a.KillPod {
		return nil
	}
	var out []resize
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		s := status.FindContainerStatusByName(c.Name)
		if s == nil || s.State != container.StateRunning || slices.Contains(a.ContainersToStart, i) {
			continue
		}
		applied, ok := m.resources.Actuated(pod.UID, c.Name)
		if !ok {
			// Started before resources were tracked: what it was created
			// with is what it runs with.
			if err := m.resources.SetActuated(pod.UID, c.Name, c.Resources); err != nil {
				klog.ErrorS(err, "Failed to record a container's resources", "pod", klog.KObj(pod), "podUID", pod.UID, "container", c.Name)
			}
			continue
		}
		if allocation.Equal(applied, c.Resources) {
			continue
		}
		if needsRestart(c, applied) {
			a.ContainersToKill[s.ID] = containerToKill{name: c.Name, message: fmt.Sprintf("Container %s resized; its resize policy restarts it", c.Name)}
			a.ContainersToStart = append(a.ContainersToStart, i)
			continue
		}
		out = append(out, resize{index: i, id: s.ID, from: applied})
	}
	return out
}

// needsRestart reports whether a resource that changed has the
// RestartContainer resize policy.
func needsRestart(c *v1.Container, applied v1.ResourceRequirements) bool {
	for _, p := range c.ResizePolicy {
		if p.RestartPolicy != v1.RestartContainer {
			continue
		}
		if !quantityEqual(applied.Requests, c.Resources.Requests, p.ResourceName) || !quantityEqual(applied.Limits, c.Resources.Limits, p.ResourceName) {
			return true
		}
	}
	return false
}

func quantityEqual(a, b v1.ResourceList, name v1.ResourceName) bool {
	qa, oka := a[name]
	qb, okb := b[name]
	return oka == okb && qa.Cmp(qb) == 0
}

// apply resizes containers in place: the pod cgroup grows before
// the containers, and shrinks after them, so no container is ever allowed
// more than its pod.
func (m *resizer) apply(ctx context.Context, pod *v1.Pod, resizes []resize, result *container.PodSyncResult) {
	if len(resizes) == 0 {
		return
	}
	shrinks := false
	for _, r := range resizes {
		c := &pod.Spec.Containers[r.index]
		if memoryLimit(c.Resources) < memoryLimit(r.from) || cpuLimit(c.Resources) < cpuLimit(r.from) {
			shrinks = true
		}
	}
	if !shrinks {
		if err := m.podCgroup(pod); err != nil {
			result.Fail(fmt.Errorf("resizing the pod cgroup: %w", err))
			return
		}
	}
	for _, r := range resizes {
		c := &pod.Spec.Containers[r.index]
		end := m.steps.Begin(pod, instrument.KindResize, c.Name)
		err := m.updateResources(ctx, pod, c, r.id)
		end(err, fmt.Sprintf("%v -> %v", describe(r.from), describe(c.Resources)))
		if err != nil {
			result.Fail(fmt.Errorf("resizing container %s: %w", c.Name, err))
			return
		}
	}
	if shrinks {
		if err := m.podCgroup(pod); err != nil {
			result.Fail(fmt.Errorf("resizing the pod cgroup: %w", err))
		}
	}
}

// updateResources applies a container's granted resources to it and
// records them as applied.
func (m *resizer) updateResources(ctx context.Context, pod *v1.Pod, c *v1.Container, id container.ContainerID) error {
	res := linuxResources(pod, c)
	if m.noCPUQuota {
		res.CpuQuota, res.CpuPeriod = 0, 0
	}
	cctx, cancel := context.WithTimeout(ctx, m.requestTimeout)
	defer cancel()
	if _, err := m.runtime.UpdateContainerResources(cctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id.ID, Linux: res}); err != nil {
		return err
	}
	klog.InfoS("Resized container in place", "pod", klog.KObj(pod), "podUID", pod.UID, "container", c.Name, "resources", describe(c.Resources))
	return m.resources.SetActuated(pod.UID, c.Name, c.Resources)
}

func memoryLimit(r v1.ResourceRequirements) int64 {
	if q, ok := r.Limits[v1.ResourceMemory]; ok {
		return q.Value()
	}
	return 1<<63 - 1
}

func cpuLimit(r v1.ResourceRequirements) int64 {
	if q, ok := r.Limits[v1.ResourceCPU]; ok {
		return q.MilliValue()
	}
	return 1<<63 - 1
}

func describe(r v1.ResourceRequirements) string {
	s := "requests{"
	for _, n := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		if q, ok := r.Requests[n]; ok {
			s += fmt.Sprintf(" %s=%s", n, q.String())
		}
	}
	s += " } limits{"
	for _, n := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		if q, ok := r.Limits[n]; ok {
			s += fmt.Sprintf(" %s=%s", n, q.String())
		}
	}
	return s + " }"
}
