package podstatus

import (
	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/pods/allocation"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// resizeConditions fills in each container's resources (what it runs
// with, for a running container; the API server refuses every resize of a
// pod whose running containers report none) and what it was granted, and
// returns the resize conditions: PodResizePending while a resize waits
// (Deferred or Infeasible), PodResizeInProgress while a running container
// does not run with what it was granted yet.
func resizeConditions(in Input, s *v1.PodStatus) []v1.PodCondition {
	if in.Resources == nil {
		return nil
	}
	inProgress := false
	for _, statuses := range [][]v1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses} {
		for i := range statuses {
			cs := &statuses[i]
			spec := podutil.FindContainer(in.Pod, cs.Name)
			if spec == nil {
				continue
			}
			cs.AllocatedResources = spec.Resources.Requests.DeepCopy()
			if cs.State.Running == nil {
				continue
			}
			applied, ok := in.Resources.Actuated(in.Pod.UID, cs.Name)
			if !ok {
				applied = spec.Resources
			}
			cs.Resources = applied.DeepCopy()
			if !allocation.Equal(applied, spec.Resources) {
				inProgress = true
			}
		}
	}
	var out []v1.PodCondition
	if p, ok := in.Resources.PendingResize(in.Pod.UID); ok {
		out = append(out, v1.PodCondition{Type: v1.PodResizePending, Status: v1.ConditionTrue, Reason: p.Reason, Message: p.Message})
	}
	if inProgress {
		out = append(out, v1.PodCondition{Type: v1.PodResizeInProgress, Status: v1.ConditionTrue})
	}
	return out
}
