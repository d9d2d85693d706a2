package kubelet

import (
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/pkg/podutil"
)

// The active deadline (spec.activeDeadlineSeconds) fails a pod that has
// been active on the node for longer, with upstream's reason and message.
const (
	deadlineReason  = "DeadlineExceeded"
	deadlineMessage = "Pod was active on the node longer than the specified deadline"
)

// pastDeadline reports whether a pod that started at start has run past
// its active deadline at now. A pod not started yet has no deadline.
func pastDeadline(pod *v1.Pod, start *metav1.Time, now time.Time) bool {
	if pod.Spec.ActiveDeadlineSeconds == nil || start == nil || start.IsZero() {
		return false
	}
	return now.Sub(start.Time) >= time.Duration(*pod.Spec.ActiveDeadlineSeconds)*time.Second
}

// oldStatus is the status a pod's new one is computed from: nodelet's
// own, or after a restart the API's, so that what the API recorded (the
// start time above all, which the active deadline counts from) survives.
func oldStatus(store statusStore, pod *v1.Pod) v1.PodStatus {
	if s, ok := store.GetPodStatus(pod.UID); ok {
		return s
	}
	return *pod.Status.DeepCopy()
}

// failPastDeadline fails a status whose pod ran past its deadline.
func failPastDeadline(pod *v1.Pod, s *v1.PodStatus, now time.Time) bool {
	if podutil.IsTerminal(s.Phase) || !pastDeadline(pod, s.StartTime, now) {
		return false
	}
	s.Phase, s.Reason, s.Message = v1.PodFailed, deadlineReason, deadlineMessage
	return true
}
