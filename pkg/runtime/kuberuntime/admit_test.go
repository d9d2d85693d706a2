package kuberuntime

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/pods/admission"
	"github.com/nodelet/nodelet/pkg/runtime/runtimeclass"
)

// A pod asking for a user namespace or strict supplemental groups is
// refused, naming what it asked for, unless the runtime (the pod's
// handler) said it can; never run without.
func TestFeatureAdmission(t *testing.T) {
	strict := v1.SupplementalGroupsPolicyStrict
	userns := &v1.Pod{Spec: v1.PodSpec{HostUsers: ptr.To(false)}}
	usernsKata := &v1.Pod{Spec: v1.PodSpec{HostUsers: ptr.To(false), RuntimeClassName: ptr.To("kata")}}
	usernsFast := &v1.Pod{Spec: v1.PodSpec{HostUsers: ptr.To(false), RuntimeClassName: ptr.To("fast")}}
	usernsUnknown := &v1.Pod{Spec: v1.PodSpec{HostUsers: ptr.To(false), RuntimeClassName: ptr.To("nope")}}
	// The classes name handlers other than themselves, as Kata's do.
	classes := runtimeclass.Static([]*nodev1.RuntimeClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "kata"}, Handler: "kata-qemu"},
		{ObjectMeta: metav1.ObjectMeta{Name: "fast"}, Handler: "crun"},
	})
	groups := &v1.Pod{Spec: v1.PodSpec{SecurityContext: &v1.PodSecurityContext{SupplementalGroupsPolicy: &strict}}}
	plain := &v1.Pod{Spec: v1.PodSpec{HostUsers: ptr.To(true)}}
	old := Features{Known: true, Handlers: map[string]HandlerFeatures{"": {}}}
	modern := Features{Known: true, SupplementalGroupsPolicy: true,
		Handlers: map[string]HandlerFeatures{"": {UserNamespaces: true, RecursiveReadOnly: true}, "kata-qemu": {},
			"kata": {UserNamespaces: true}, "crun": {UserNamespaces: true}}}
	for _, tc := range []struct {
		name     string
		features Features
		pod      *v1.Pod
		reason   string
	}{
		{"userns on an old runtime", old, userns, "UserNamespacesNotSupported"},
		{"userns on a modern runtime", modern, userns, ""},
		{"userns on a handler without", modern, usernsKata, "UserNamespacesNotSupported"},
		{"userns on the class's handler, not its name", modern, usernsFast, ""},
		// Not refused here: the sandbox fails naming the class, and the
		// pod starts once the class exists.
		{"userns with a class the node does not know", modern, usernsUnknown, ""},
		{"strict groups on an old runtime", old, groups, "SupplementalGroupsPolicyNotSupported"},
		{"strict groups on a modern runtime", modern, groups, ""},
		{"hostUsers: true anywhere", old, plain, ""},
	} {
		v := FeatureAdmission(func() Features { return tc.features }, classes).Admit(admission.Attributes{Pod: tc.pod})
		if v.Reason != tc.reason || v.Admitted() != (tc.reason == "") {
			t.Errorf("%s: %+v, want reason %q", tc.name, v, tc.reason)
		}
	}
}
