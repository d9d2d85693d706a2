package kubelet

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/nodelet/nodelet/pkg/allocation"
	"github.com/nodelet/nodelet/pkg/podutil"
	"github.com/nodelet/nodelet/pkg/podworkers"
)

// allocate grants an admitted pod what its spec asks for, staged: the
// pod's sync writes it before the pod's first container
// (podsync.SyncerOptions.Grants).
func (a *admission) allocate(pod *v1.Pod) {
	if a.alloc == nil || a.alloc.Known(pod.UID) {
		return
	}
	a.alloc.Stage(pod)
}

// asRun is the pod as nodelet runs it: its containers with the resources
// they were granted.
func (a *admission) asRun(pod *v1.Pod) *v1.Pod {
	if a.alloc == nil || podutil.IsMirror(pod) {
		return pod
	}
	run, _ := a.alloc.WithAllocation(pod)
	return run
}

// resize decides a change of an admitted pod's resources, as upstream's
// allocation manager does: granted if the node can fit the pod as resized
// beside the others (counted at what they were granted); Infeasible if
// the pod alone asks for more CPU or memory than the node has; Deferred
// otherwise (housekeeping asks again). It returns the pod as run: resized
// once granted, as before until then. active lists the other pods that
// may run.
func (a *admission) resize(active func() []*v1.Pod, desired *v1.Pod) *v1.Pod {
	if a.alloc == nil || podutil.IsMirror(desired) {
		return desired
	}
	run, changed := a.alloc.WithAllocation(desired)
	if !changed {
		a.alloc.ClearPending(desired.UID)
		return desired
	}
	if desired.DeletionTimestamp != nil || podutil.IsTerminal(desired.Status.Phase) {
		return run
	}
	for _, check := range a.resizeChecks {
		if msg := check(desired, run); msg != "" {
			a.pend(run, desired, allocation.ReasonInfeasible, msg)
			return run
		}
	}
	node := a.node()
	req := resourcehelper.PodRequests(desired, resourcehelper.PodResourcesOptions{})
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		want, capacity := req[name], node.Status.Allocatable[name]
		if _, known := node.Status.Allocatable[name]; known && want.Cmp(capacity) > 0 {
			a.pend(run, desired, allocation.ReasonInfeasible, fmt.Sprintf("Node didn't have enough capacity: %s, requested: %d, capacity: %d",
				name, amount(name, want), amount(name, capacity)))
			return run
		}
	}
	// The active pods are listed only for a resize: every pod update
	// passes here.
	all := active()
	others := make([]*v1.Pod, 0, len(all))
	for _, p := range all {
		if p.UID != desired.UID {
			others = append(others, p)
		}
	}
	if r := checkResources(others, desired, node); r != nil {
		a.pend(run, desired, allocation.ReasonDeferred, r.Message)
		return run
	}
	if err := a.alloc.Allocate(desired); err != nil {
		klog.ErrorS(err, "Failed to record a granted resize", "pod", klog.KObj(desired), "podUID", desired.UID)
		return run
	}
	a.alloc.ClearPending(desired.UID)
	klog.InfoS("Pod resize granted", "pod", klog.KObj(desired), "podUID", desired.UID)
	return desired
}

func (a *admission) pend(run, desired *v1.Pod, reason, message string) {
	if p, ok := a.alloc.PendingResize(desired.UID); !ok || p.Reason != reason || p.Message != message {
		klog.InfoS("Pod resize not granted", "pod", klog.KObj(desired), "podUID", desired.UID, "reason", reason, "message", message)
	}
	a.alloc.SetPending(desired.UID, allocation.Pending{Reason: reason, Message: message, Desired: desired})
}

// forget drops the allocations of pods no longer kept.
func (a *admission) forget(keep map[types.UID]bool) {
	if a.alloc == nil {
		return
	}
	if err := a.alloc.Retain(func(uid types.UID) bool { return keep[uid] }); err != nil {
		klog.ErrorS(err, "Failed to forget the allocations of finished pods")
	}
}

// retryDeferredResizes asks again for each resize that did not fit: pods
// may have left or shrunk since. A resize granted now is synced at once.
func (kl *Kubelet) retryDeferredResizes(all []*v1.Pod) {
	if kl.admission.alloc == nil {
		return
	}
	for _, p := range kl.admission.alloc.Deferred() {
		current, ok := kl.pods.podByUID(p.Desired.UID)
		if !ok {
			continue
		}
		desired := current.DeepCopy()
		desired.Spec = *p.Desired.Spec.DeepCopy()
		run := kl.admission.resize(func() []*v1.Pod { return kl.activePods(all) }, desired)
		if _, still := kl.admission.alloc.PendingResize(desired.UID); still {
			continue
		}
		kl.pods.addOrUpdate(run)
		kl.workers.UpdatePod(podworkers.UpdatePodOptions{Pod: run, MirrorPod: kl.pods.mirrorPodOf(run), UpdateType: podworkers.UpdateUpdate, StartTime: kl.clock.Now()})
	}
}
