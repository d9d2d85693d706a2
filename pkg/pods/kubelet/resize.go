package kubelet

import (
	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/pods/podworkers"
)

// retryDeferredResizes asks again for each resize that did not fit: pods
// may have left or shrunk since. A resize granted now is synced at once.
func (kl *Kubelet) retryDeferredResizes(all []*v1.Pod) {
	for _, p := range kl.resizer.Deferred() {
		current, ok := kl.pods.podByUID(p.Desired.UID)
		if !ok {
			continue
		}
		desired := current.DeepCopy()
		desired.Spec = *p.Desired.Spec.DeepCopy()
		run := kl.resizer.Resize(func() []*v1.Pod { return kl.view.activePods(all) }, desired)
		if kl.resizer.Pending(desired.UID) {
			continue
		}
		kl.pods.addOrUpdate(run)
		kl.workers.UpdatePod(podworkers.UpdatePodOptions{Pod: run, MirrorPod: kl.pods.mirrorPodOf(run), UpdateType: podworkers.UpdateUpdate, StartTime: kl.clock.Now()})
	}
}
