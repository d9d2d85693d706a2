package kuberuntime

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/pods/admission"
)

// A pod asking for a user namespace or strict supplemental groups is
// refused, naming what it asked for, unless the runtime (the pod's
// handler) said it can; never run without.
func TestFeatureAdmission(t *testing.T) {
	strict := v1.SupplementalGroupsPolicyStrict
	userns := &v1.Pod{Spec: v1.PodSpec{HostUsers: ptr.To(false)}}
	usernsKata := &v1.Pod{Spec: v1.PodSpec{HostUsers: ptr.To(false), RuntimeClassName: ptr.To("kata")}}
	groups := &v1.Pod{Spec: v1.PodSpec{SecurityContext: &v1.PodSecurityContext{SupplementalGroupsPolicy: &strict}}}
	plain := &v1.Pod{Spec: v1.PodSpec{HostUsers: ptr.To(true)}}
	old := Features{Known: true, Handlers: map[string]HandlerFeatures{"": {}}}
	modern := Features{Known: true, SupplementalGroupsPolicy: true,
		Handlers: map[string]HandlerFeatures{"": {UserNamespaces: true, RecursiveReadOnly: true}, "kata": {}}}
	for _, tc := range []struct {
		name     string
		features Features
		pod      *v1.Pod
		reason   string
	}{
		{"userns on an old runtime", old, userns, "UserNamespacesNotSupported"},
		{"userns on a modern runtime", modern, userns, ""},
		{"userns on a handler without", modern, usernsKata, "UserNamespacesNotSupported"},
		{"strict groups on an old runtime", old, groups, "SupplementalGroupsPolicyNotSupported"},
		{"strict groups on a modern runtime", modern, groups, ""},
		{"hostUsers: true anywhere", old, plain, ""},
	} {
		v := FeatureAdmission(func() Features { return tc.features }).Admit(admission.Attributes{Pod: tc.pod})
		if v.Reason != tc.reason || v.Admitted() != (tc.reason == "") {
			t.Errorf("%s: %+v, want reason %q", tc.name, v, tc.reason)
		}
	}
}
