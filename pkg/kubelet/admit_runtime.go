package kubelet

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/kuberuntime"
)

// RuntimeFeatureCheck refuses a pod that asks for what the runtime (its
// handler) said it cannot do, rather than run it without: in a user
// namespace above all, since without one the pod's root is the host's.
func RuntimeFeatureCheck(features func() kuberuntime.Features) AdmitFunc {
	return func(pod *v1.Pod) (bool, string, string) {
		f := features()
		if psc := pod.Spec.SecurityContext; psc != nil && psc.SupplementalGroupsPolicy != nil &&
			*psc.SupplementalGroupsPolicy == v1.SupplementalGroupsPolicyStrict && !f.SupplementalGroupsPolicy {
			return false, "SupplementalGroupsPolicyNotSupported",
				fmt.Sprintf("SupplementalGroupsPolicy=%s is not supported in this node", v1.SupplementalGroupsPolicyStrict)
		}
		if pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers {
			handler := kuberuntime.RuntimeHandler(pod)
			if !f.Handler(handler).UserNamespaces {
				return false, "UserNamespacesNotSupported", fmt.Sprintf(
					"hostUsers: false asks for a user namespace, which the container runtime's handler %q does not support", handler)
			}
		}
		return true, "", ""
	}
}
