package kuberuntime

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Security is what the node decides for pods that leave a security
// setting unset.
type Security struct {
	// SeccompDefault (seccompDefault) gives containers and sandboxes
	// without a seccomp profile the runtime's default profile rather
	// than none.
	SeccompDefault bool
	// SeccompRoot holds Localhost seccomp profiles (<root-dir>/seccomp);
	// a profile's name is a path below it.
	SeccompRoot string
}

// seccomp is the profile of a container (csc non-nil) or of the sandbox
// (csc nil): the container's own, else the pod's, else the node's
// default, as upstream resolves it.
func (s Security) seccomp(psc *v1.PodSecurityContext, csc *v1.SecurityContext) (*runtimeapi.SecurityProfile, error) {
	var p *v1.SeccompProfile
	if csc != nil && csc.SeccompProfile != nil {
		p = csc.SeccompProfile
	} else if psc != nil {
		p = psc.SeccompProfile
	}
	if p == nil {
		if s.SeccompDefault {
			return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
	}
	switch p.Type {
	case v1.SeccompProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
	case v1.SeccompProfileTypeUnconfined:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
	case v1.SeccompProfileTypeLocalhost:
		name := ""
		if p.LocalhostProfile != nil {
			name = *p.LocalhostProfile
		}
		if err := descendingPath(name); err != nil {
			return nil, fmt.Errorf("seccompProfile.localhostProfile %q: %w", name, err)
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost,
			LocalhostRef: filepath.Join(s.SeccompRoot, name)}, nil
	}
	return nil, fmt.Errorf("unknown seccomp profile type %q", p.Type)
}

// descendingPath refuses a profile name that would leave the profile
// directory: the API server refuses it too, but static pods never went
// through it.
func descendingPath(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("a Localhost profile needs a name")
	case filepath.IsAbs(name):
		return fmt.Errorf("must be a relative path")
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return fmt.Errorf("must not contain '..'")
		}
	}
	return nil
}

// appArmor is a container's AppArmor profile, in the field and in the
// deprecated string form older runtimes read: the container's field,
// else the deprecated pod annotation for it, else the pod's field. nil
// leaves the runtime's default.
func appArmor(pod *v1.Pod, c *v1.Container) (*runtimeapi.SecurityProfile, string, error) {
	p := appArmorProfile(pod, c)
	if p == nil {
		return nil, "", nil
	}
	switch p.Type {
	case v1.AppArmorProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
			v1.DeprecatedAppArmorBetaProfileRuntimeDefault, nil
	case v1.AppArmorProfileTypeUnconfined:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined},
			v1.DeprecatedAppArmorBetaProfileNameUnconfined, nil
	case v1.AppArmorProfileTypeLocalhost:
		if p.LocalhostProfile == nil || *p.LocalhostProfile == "" {
			return nil, "", fmt.Errorf("appArmorProfile: a Localhost profile needs localhostProfile")
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: *p.LocalhostProfile},
			v1.DeprecatedAppArmorBetaProfileNamePrefix + *p.LocalhostProfile, nil
	}
	return nil, "", fmt.Errorf("unknown AppArmor profile type %q", p.Type)
}

func appArmorProfile(pod *v1.Pod, c *v1.Container) *v1.AppArmorProfile {
	if c.SecurityContext != nil && c.SecurityContext.AppArmorProfile != nil {
		return c.SecurityContext.AppArmorProfile
	}
	// Static pods may carry only the annotation.
	if val, ok := pod.Annotations[v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+c.Name]; ok {
		switch {
		case val == v1.DeprecatedAppArmorBetaProfileRuntimeDefault:
			return &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}
		case val == v1.DeprecatedAppArmorBetaProfileNameUnconfined:
			return &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeUnconfined}
		case strings.HasPrefix(val, v1.DeprecatedAppArmorBetaProfileNamePrefix):
			name := strings.TrimPrefix(val, v1.DeprecatedAppArmorBetaProfileNamePrefix)
			return &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeLocalhost, LocalhostProfile: &name}
		}
	}
	if pod.Spec.SecurityContext != nil {
		return pod.Spec.SecurityContext.AppArmorProfile
	}
	return nil
}

// seLinux passes the pod's or container's SELinux label through; nil
// leaves the runtime's.
func seLinux(psc *v1.PodSecurityContext, csc *v1.SecurityContext) *runtimeapi.SELinuxOption {
	o := psc.SELinuxOptions
	if csc != nil && csc.SELinuxOptions != nil {
		o = csc.SELinuxOptions
	}
	if o == nil {
		return nil
	}
	return &runtimeapi.SELinuxOption{User: o.User, Role: o.Role, Type: o.Type, Level: o.Level}
}

// supplementalGroupsPolicy: Strict keeps the image's /etc/group out of
// the container's groups. Admission refuses it where the runtime cannot.
func supplementalGroupsPolicy(psc *v1.PodSecurityContext) runtimeapi.SupplementalGroupsPolicy {
	if psc.SupplementalGroupsPolicy != nil && *psc.SupplementalGroupsPolicy == v1.SupplementalGroupsPolicyStrict {
		return runtimeapi.SupplementalGroupsPolicy_Strict
	}
	return runtimeapi.SupplementalGroupsPolicy_Merge
}

// hasPrivileged: a sandbox must be privileged for any of its containers
// to be (containerd refuses otherwise).
func hasPrivileged(pod *v1.Pod) bool {
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if sc := cs[i].SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
				return true
			}
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if sc := pod.Spec.EphemeralContainers[i].SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
			return true
		}
	}
	return false
}

// defaultReadonlyPaths are upstream's read-only /proc paths for
// procMount Default.
var defaultReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}

// defaultMaskedPaths are upstream's masked paths for procMount Default:
// the kernel's and the machine's secrets, and each CPU's thermal
// throttling counters where the machine has them.
var defaultMaskedPaths = sync.OnceValue(func() []string {
	out := []string{"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap"}
	for _, cpu := range possibleCPUs() {
		path := fmt.Sprintf("/sys/devices/system/cpu/cpu%d/thermal_throttle", cpu)
		if _, err := os.Stat(path); err == nil {
			out = append(out, path)
		}
	}
	return out
})

// possibleCPUs reads the kernel's list of possible CPUs ("0-3,6").
func possibleCPUs() []int {
	data, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return nil
	}
	var out []int
	for _, r := range strings.Split(strings.TrimSpace(string(data)), ",") {
		lo, hi, found := strings.Cut(r, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			continue
		}
		b := a
		if found {
			if b, err = strconv.Atoi(hi); err != nil {
				continue
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out
}
