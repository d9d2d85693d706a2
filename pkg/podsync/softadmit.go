package podsync

import (
	"os"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Blocked says why an admitted pod cannot run for now: upstream's reason,
// and a message. The pod stays Pending, its containers stopped, until
// the check passes.
type Blocked struct {
	Reason, Message string
}

// appArmorAnnotationPrefix is the annotation pods used for AppArmor
// profiles before the securityContext field existed.
const appArmorAnnotationPrefix = "container.apparmor.security.beta.kubernetes.io/"

// appArmorEnabled reports whether the host enforces AppArmor.
func appArmorEnabled() bool {
	b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	return err == nil && strings.TrimSpace(string(b)) == "Y"
}

// AppArmorCheck returns the soft admission check of AppArmor profiles:
// a pod that asks for one cannot run on a host that cannot enforce it.
func AppArmorCheck() func(*v1.Pod) *Blocked {
	enabled := appArmorEnabled()
	return func(pod *v1.Pod) *Blocked {
		if enabled || !wantsAppArmor(pod) {
			return nil
		}
		return &Blocked{"AppArmor", "Cannot enforce AppArmor: AppArmor is not enabled on the host"}
	}
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

// SoftAdmissionChecks are the checks a pod must pass at every sync.
func SoftAdmissionChecks() []func(*v1.Pod) *Blocked {
	return []func(*v1.Pod) *Blocked{AppArmorCheck()}
}
