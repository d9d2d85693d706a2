package podstatus

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Once the API shows a pod terminal, its phase stays: a deadline passed
// afterwards changes the reason only, as upstream's status generation
// forces the API's terminal phase back.
func TestActiveDeadlineKeepsTheAPIsTerminalPhase(t *testing.T) {
	p := &v1.Pod{}
	p.UID, p.Name, p.Namespace = "p", "done", "ns"
	five := int64(5)
	p.Spec.ActiveDeadlineSeconds = &five
	started := metav1.NewTime(now.Add(-time.Minute))
	p.Status = v1.PodStatus{Phase: v1.PodSucceeded, StartTime: &started}
	s := v1.PodStatus{Phase: v1.PodSucceeded, StartTime: &started}
	if !failPastDeadline(p, &s, now) || s.Phase != v1.PodSucceeded || s.Reason != "DeadlineExceeded" {
		t.Fatalf("status %s/%s, want the API's Succeeded kept", s.Phase, s.Reason)
	}
}
