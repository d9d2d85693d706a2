package kuberuntime

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/pods/admission"
)

// FeatureAdmission refuses a pod that asks for what the runtime (its
// handler) said it cannot do, rather than run it without: in a user
// namespace above all, since without one the pod's root is the host's.
// A class the node does not know is not refused here: its sandbox fails
// naming it, and starts once the class exists.
func FeatureAdmission(features func() Features, classes RuntimeClasses) admission.Handler {
	return admission.HandlerFunc(func(a admission.Attributes) admission.Verdict {
		f, pod := features(), a.Pod
		if psc := pod.Spec.SecurityContext; psc != nil && psc.SupplementalGroupsPolicy != nil &&
			*psc.SupplementalGroupsPolicy == v1.SupplementalGroupsPolicyStrict && !f.SupplementalGroupsPolicy {
			return admission.Reject("SupplementalGroupsPolicyNotSupported",
				fmt.Sprintf("SupplementalGroupsPolicy=%s is not supported in this node", v1.SupplementalGroupsPolicyStrict))
		}
		if pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers {
			handler, err := classes.Handler(pod.Spec.RuntimeClassName)
			if err == nil && !f.Handler(handler).UserNamespaces {
				return admission.Reject("UserNamespacesNotSupported", fmt.Sprintf(
					"hostUsers: false asks for a user namespace, which the container runtime's handler %q does not support", handler))
			}
		}
		return admission.Verdict{}
	})
}
