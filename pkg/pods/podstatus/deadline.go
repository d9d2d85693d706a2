package podstatus

import (
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// The active deadline (spec.activeDeadlineSeconds) fails a pod that has
// been active on the node for longer, with upstream's reason and message.
const (
	DeadlineReason  = "DeadlineExceeded"
	DeadlineMessage = "Pod was active on the node longer than the specified deadline"
)

// pastDeadline reports whether a pod that started at start has run past
// its active deadline at now. A pod not started yet has no deadline.
func pastDeadline(pod *v1.Pod, start *metav1.Time, now time.Time) bool {
	if pod.Spec.ActiveDeadlineSeconds == nil || start == nil || start.IsZero() {
		return false
	}
	return now.Sub(start.Time) >= time.Duration(*pod.Spec.ActiveDeadlineSeconds)*time.Second
}

// DeadlinePassed reports whether a pod whose last status is s is still
// running past its active deadline at now: its worker must sync it now to
// fail it.
func DeadlinePassed(pod *v1.Pod, s v1.PodStatus, now time.Time) bool {
	return !podutil.IsTerminal(s.Phase) && pastDeadline(pod, s.StartTime, now)
}

// Reader reads the last status the status manager recorded for a pod.
type Reader interface {
	GetPodStatus(uid types.UID) (v1.PodStatus, bool)
}

// LastStatus is the status a pod's new one is computed from: nodelet's
// own, or after a restart the API's, so that what the API recorded (the
// start time above all, which the active deadline counts from) survives.
func LastStatus(store Reader, pod *v1.Pod) v1.PodStatus {
	if s, ok := store.GetPodStatus(pod.UID); ok {
		return s
	}
	return *pod.Status.DeepCopy()
}

// failPastDeadline fails a status whose pod ran past its deadline,
// whatever phase its containers' exits give: a pod stopped for its
// deadline is Failed even when its containers exit 0 on SIGTERM (pause
// does), as upstream's kubelet evicts it in every status it generates
// past the deadline. Only a terminal phase the API already shows stays
// (no pod leaves a terminal phase); the reason is the deadline's then
// too, as upstream's.
func failPastDeadline(pod *v1.Pod, s *v1.PodStatus, now time.Time) bool {
	if !pastDeadline(pod, s.StartTime, now) {
		return false
	}
	s.Phase, s.Reason, s.Message = v1.PodFailed, DeadlineReason, DeadlineMessage
	if podutil.IsTerminal(pod.Status.Phase) {
		s.Phase = pod.Status.Phase
	}
	return true
}
