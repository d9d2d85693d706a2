package project

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

type ResourceName string

// A miniature older API: fields in another order, one dropped, a pointer
// that is a value, the host fields in the security context.
type older struct {
	Spec struct {
		SecurityContext    *struct{ HostNetwork bool }
		ServiceAccountName string
		Volumes            []struct {
			Name string
		}
		NodeSelector map[ResourceName]string
		Tolerations  []struct{ TolerationSeconds int64 }
	}
}

func TestPod(t *testing.T) {
	secs := int64(30)
	pod := &v1.Pod{Spec: v1.PodSpec{HostNetwork: true, DeprecatedServiceAccount: "old", Volumes: []v1.Volume{},
		NodeSelector: map[string]string{"a": "b"}, Tolerations: []v1.Toleration{{TolerationSeconds: &secs}, {}}}}
	out := As[older](pod)
	s := out.Spec
	if s.SecurityContext == nil || !s.SecurityContext.HostNetwork {
		t.Errorf("host network not in the security context: %+v", s.SecurityContext)
	}
	if s.ServiceAccountName != "old" {
		t.Errorf("service account %q, want the deprecated alias", s.ServiceAccountName)
	}
	if s.Volumes == nil || len(s.Volumes) != 0 {
		t.Errorf("an empty list became %#v", s.Volumes)
	}
	if s.NodeSelector[ResourceName("a")] != "b" {
		t.Errorf("map %v", s.NodeSelector)
	}
	if len(s.Tolerations) != 2 || s.Tolerations[0].TolerationSeconds != 30 || s.Tolerations[1].TolerationSeconds != 0 {
		t.Errorf("pointers to values: %+v", s.Tolerations)
	}
	if As[older](&v1.Pod{}).Spec.Volumes != nil {
		t.Error("a nil list became empty")
	}
}
