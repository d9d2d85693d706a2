package admission

import (
	"os"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// appArmorAnnotationPrefix is the annotation pods used for AppArmor
// profiles before the securityContext field existed.
const appArmorAnnotationPrefix = "container.apparmor.security.beta.kubernetes.io/"

// AppArmorEnabled reports whether the host enforces AppArmor.
func AppArmorEnabled() bool {
	b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	return err == nil && strings.TrimSpace(string(b)) == "Y"
}

// AppArmor refuses a pending pod that asks for a confined AppArmor
// profile on a host that cannot enforce one, as upstream's admission does
// (reason AppArmor; the pod fails, it does not wait). A pod already
// running or finished is not checked again.
func AppArmor(enabled bool) Handler {
	return HandlerFunc(func(a Attributes) Verdict { return checkAppArmor(a.Pod, enabled) })
}

func checkAppArmor(pod *v1.Pod, enabled bool) Verdict {
	if enabled || (pod.Status.Phase != v1.PodPending && pod.Status.Phase != "") || !wantsAppArmor(pod) {
		return Verdict{}
	}
	return Verdict{Reason: "AppArmor", Message: "Cannot enforce AppArmor: AppArmor is not enabled on the host"}
}

func wantsAppArmor(pod *v1.Pod) bool {
	confined := func(p *v1.AppArmorProfile) bool { return p != nil && p.Type != v1.AppArmorProfileTypeUnconfined }
	if sc := pod.Spec.SecurityContext; sc != nil && confined(sc.AppArmorProfile) {
		return true
	}
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if sc := cs[i].SecurityContext; sc != nil && confined(sc.AppArmorProfile) {
				return true
			}
		}
	}
	for k, v := range pod.Annotations {
		if strings.HasPrefix(k, appArmorAnnotationPrefix) && v != "unconfined" {
			return true
		}
	}
	return false
}
