package admission

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/pods/allocation"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// ResizeCheck says why a resize of the pod from allocated to desired can
// never be granted (a Guaranteed pod's CPUs under the static CPU manager,
// say), or "".
type ResizeCheck func(desired, allocated *v1.Pod) string

// ResizerOptions build a Resizer.
type ResizerOptions struct {
	// Node is the node resizes are judged against.
	Node func() *v1.Node
	// Allocations keep what each admitted pod's containers were granted;
	// nil keeps nothing (no resize is granted or seen).
	Allocations *allocation.Store
	// Checks are asked before the node's room.
	Checks []ResizeCheck
}

// Resizer grants admitted pods their resources and decides in-place
// resizes, as upstream's allocation manager does.
type Resizer struct {
	o ResizerOptions
}

// NewResizer builds a Resizer.
func NewResizer(o ResizerOptions) *Resizer { return &Resizer{o: o} }

// Allocate grants an admitted pod what its spec asks for, staged: the
// pod's sync writes it before the pod's first container
// (podsync.SyncerOptions.Grants).
func (r *Resizer) Allocate(pod *v1.Pod) {
	if r.o.Allocations == nil || r.o.Allocations.Known(pod.UID) {
		return
	}
	r.o.Allocations.Stage(pod)
}

// AsRun is the pod as nodelet runs it: its containers with the resources
// they were granted.
func (r *Resizer) AsRun(pod *v1.Pod) *v1.Pod {
	if r.o.Allocations == nil || podutil.IsMirror(pod) {
		return pod
	}
	run, _ := r.o.Allocations.WithAllocation(pod)
	return run
}

// Resize decides a change of an admitted pod's resources: granted if the
// node can fit the pod as resized beside the others (counted at what they
// were granted); Infeasible if the pod alone asks for more CPU or memory
// than the node has, or a check says it never can be; Deferred otherwise
// (Deferred lists it to ask again). It returns the pod as run: resized
// once granted, as before until then. active lists the other pods that
// may run; it is called only when the pod's resources changed, since
// every pod update passes here.
func (r *Resizer) Resize(active func() []*v1.Pod, desired *v1.Pod) *v1.Pod {
	alloc := r.o.Allocations
	if alloc == nil || podutil.IsMirror(desired) {
		return desired
	}
	run, changed := alloc.WithAllocation(desired)
	if !changed {
		alloc.ClearPending(desired.UID)
		return desired
	}
	if desired.DeletionTimestamp != nil || podutil.IsTerminal(desired.Status.Phase) {
		return run
	}
	if reason, message := r.judge(active, desired, run); reason != "" {
		r.pend(desired, reason, message)
		return run
	}
	if err := alloc.Allocate(desired); err != nil {
		klog.ErrorS(err, "Failed to record a granted resize", "pod", klog.KObj(desired), "podUID", desired.UID)
		return run
	}
	alloc.ClearPending(desired.UID)
	klog.InfoS("Pod resize granted", "pod", klog.KObj(desired), "podUID", desired.UID)
	return desired
}

// judge says why the resize of run to desired is not granted now
// (allocation.ReasonInfeasible or ReasonDeferred, and a message), or "".
func (r *Resizer) judge(active func() []*v1.Pod, desired, run *v1.Pod) (reason, message string) {
	for _, check := range r.o.Checks {
		if msg := check(desired, run); msg != "" {
			return allocation.ReasonInfeasible, msg
		}
	}
	node := r.o.Node()
	req := resourcehelper.PodRequests(desired, resourcehelper.PodResourcesOptions{})
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		want, capacity := req[name], node.Status.Allocatable[name]
		if _, known := node.Status.Allocatable[name]; known && want.Cmp(capacity) > 0 {
			return allocation.ReasonInfeasible, fmt.Sprintf("Node didn't have enough capacity: %s, requested: %d, capacity: %d",
				name, amount(name, want), amount(name, capacity))
		}
	}
	all := active()
	others := make([]*v1.Pod, 0, len(all))
	for _, p := range all {
		if p.UID != desired.UID {
			others = append(others, p)
		}
	}
	if v := checkResources(others, desired, node); !v.Admitted() {
		return allocation.ReasonDeferred, v.Message
	}
	return "", ""
}

func (r *Resizer) pend(desired *v1.Pod, reason, message string) {
	alloc := r.o.Allocations
	if p, ok := alloc.PendingResize(desired.UID); !ok || p.Reason != reason || p.Message != message {
		klog.InfoS("Pod resize not granted", "pod", klog.KObj(desired), "podUID", desired.UID, "reason", reason, "message", message)
	}
	alloc.SetPending(desired.UID, allocation.Pending{Reason: reason, Message: message, Desired: desired})
}

// Deferred lists the resizes that did not fit, to be asked again: pods
// may have left or shrunk since.
func (r *Resizer) Deferred() []allocation.Pending {
	if r.o.Allocations == nil {
		return nil
	}
	return r.o.Allocations.Deferred()
}

// Pending reports whether the pod's resize still waits.
func (r *Resizer) Pending(uid types.UID) bool {
	if r.o.Allocations == nil {
		return false
	}
	_, ok := r.o.Allocations.PendingResize(uid)
	return ok
}

// Forget drops the allocations of pods no longer kept.
func (r *Resizer) Forget(keep map[types.UID]bool) {
	if r.o.Allocations == nil {
		return
	}
	if err := r.o.Allocations.Retain(func(uid types.UID) bool { return keep[uid] }); err != nil {
		klog.ErrorS(err, "Failed to forget the allocations of finished pods")
	}
}
