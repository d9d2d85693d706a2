package kubelet

import (
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/pods/podsources"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// PodView answers what the node's pods are: the desired pods with their
// statuses (the kubelet API), the active ones (eviction, shutdown, the
// pod-resources API), and a pod's API object (the status writer). It reads
// the sync loop's pod manager, which is safe for concurrent use.
type PodView struct {
	pods    *podManager
	status  StatusStore
	workers PodWorkers
	sources *podsources.SourcesReady
}

// terminalInStatus reports whether the pod reached a terminal phase, by
// its source or by our own account.
func (v *PodView) terminalInStatus(pod *v1.Pod) bool {
	if podutil.IsTerminal(pod.Status.Phase) {
		return true
	}
	phase, ok := v.status.Phase(pod.UID)
	return ok && podutil.IsTerminal(phase)
}

// activePods are the pods that count against the node's capacity: not
// known to be finished, and not terminal unless still being torn down.
func (v *PodView) activePods(pods []*v1.Pod) []*v1.Pod {
	out := make([]*v1.Pod, 0, len(pods))
	for _, p := range pods {
		if v.workers.IsPodKnownTerminated(p.UID) {
			continue
		}
		if v.terminalInStatus(p) && !v.workers.IsPodTerminationRequested(p.UID) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// ActivePods are the desired pods that may still run.
func (v *PodView) ActivePods() []*v1.Pod { return v.activePods(v.pods.pods()) }

// PodsKnown is closed once ActivePods is the node's whole set: every pod
// source delivered, or the node journal stood in for it.
func (v *PodView) PodsKnown() <-chan struct{} { return v.sources.Known() }

// PodByUID returns a desired pod.
func (v *PodView) PodByUID(uid types.UID) (*v1.Pod, bool) { return v.pods.podByUID(uid) }

// APIPod returns a pod's API object as the sources last delivered it:
// the pod itself, or for a static pod its mirror pod (nil if none).
func (v *PodView) APIPod(uid types.UID) *v1.Pod {
	pod, ok := v.pods.podByUID(uid)
	if !ok {
		return nil
	}
	if podutil.IsStatic(pod) {
		return v.pods.mirrorPodOf(pod)
	}
	return pod
}

// Pods returns every desired pod with its current status.
func (v *PodView) Pods() []*v1.Pod {
	pods := v.pods.pods()
	out := make([]*v1.Pod, 0, len(pods))
	for _, p := range pods {
		c := p.DeepCopy()
		if s, ok := v.status.GetPodStatus(p.UID); ok {
			c.Status = s
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}
