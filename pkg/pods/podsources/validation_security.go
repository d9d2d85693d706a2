package podsources

import (
	"fmt"
	"regexp"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/component-helpers/node/util/sysctl"
)

// The security checks of the API server's pod-create validation, at
// v1.37, with its field paths and messages: a static pod asking for what
// the API server refuses (an unmasked /proc in the host's user namespace,
// a user ID out of range, a host namespace beside a user namespace) is
// reported and skipped, never run.

// hostUsers says whether the pod runs in the host's user namespace.
func hostUsers(s *v1.PodSpec) bool { return s.HostUsers == nil || *s.HostUsers }

func validatePodSecurity(s *v1.PodSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if sc := s.SecurityContext; sc != nil {
		p := path.Child("securityContext")
		errs = append(errs, groupID(sc.FSGroup, p.Child("fsGroup"))...)
		errs = append(errs, userID(sc.RunAsUser, p.Child("runAsUser"))...)
		errs = append(errs, groupID(sc.RunAsGroup, p.Child("runAsGroup"))...)
		for i := range sc.SupplementalGroups {
			errs = append(errs, groupID(&sc.SupplementalGroups[i], p.Child("supplementalGroups").Index(i))...)
		}
		errs = append(errs, validateSysctls(s, p.Child("sysctls"))...)
	}
	if !hostUsers(s) {
		// Upstream forbids a user namespace beside the host's network
		// (UserNamespacesHostNetworkSupport is alpha, off), PID or IPC
		// namespace, and with raw block devices (no idmapped mounts).
		if s.HostNetwork {
			errs = append(errs, field.Forbidden(path.Child("hostNetwork"), "when `hostUsers` is false"))
		}
		if s.HostPID {
			errs = append(errs, field.Forbidden(path.Child("HostPID"), "when `hostUsers` is false"))
		}
		if s.HostIPC {
			errs = append(errs, field.Forbidden(path.Child("HostIPC"), "when `hostUsers` is false"))
		}
		eachContainer(s, path, func(c *v1.Container, p *field.Path) {
			if len(c.VolumeDevices) > 0 {
				errs = append(errs, field.Forbidden(p.Child("volumeDevices"), "when `hostUsers` is false"))
			}
		})
	}
	if s.ShareProcessNamespace != nil && *s.ShareProcessNamespace && s.HostPID {
		errs = append(errs, field.Invalid(path.Child("shareProcessNamespace"), *s.ShareProcessNamespace, "ShareProcessNamespace and HostPID cannot both be enabled"))
	}
	return errs
}

// eachContainer visits init then app containers, with their paths.
func eachContainer(s *v1.PodSpec, path *field.Path, visit func(*v1.Container, *field.Path)) {
	for i := range s.InitContainers {
		visit(&s.InitContainers[i], path.Child("initContainers").Index(i))
	}
	for i := range s.Containers {
		visit(&s.Containers[i], path.Child("containers").Index(i))
	}
}

func validateContainerSecurity(sc *v1.SecurityContext, path *field.Path, hostUsers bool) field.ErrorList {
	if sc == nil {
		return nil
	}
	var errs field.ErrorList
	errs = append(errs, userID(sc.RunAsUser, path.Child("runAsUser"))...)
	errs = append(errs, groupID(sc.RunAsGroup, path.Child("runAsGroup"))...)
	if pm := sc.ProcMount; pm != nil {
		switch *pm {
		case v1.DefaultProcMount, v1.UnmaskedProcMount:
		default:
			errs = append(errs, field.NotSupported(path.Child("procMount"), *pm, []v1.ProcMountType{v1.DefaultProcMount, v1.UnmaskedProcMount}))
		}
		if hostUsers && *pm == v1.UnmaskedProcMount {
			errs = append(errs, field.Invalid(path.Child("procMount"), sc.ProcMount, "`hostUsers` must be false to use `Unmasked`"))
		}
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		if sc.Privileged != nil && *sc.Privileged {
			errs = append(errs, field.Invalid(path, sc, "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"))
		}
		if sc.Capabilities != nil {
			for _, c := range sc.Capabilities.Add {
				if c == "CAP_SYS_ADMIN" {
					errs = append(errs, field.Invalid(path, sc, "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN"))
				}
			}
		}
	}
	return errs
}

func userID(id *int64, path *field.Path) field.ErrorList {
	if id == nil {
		return nil
	}
	var errs field.ErrorList
	for _, msg := range validation.IsValidUserID(*id) {
		errs = append(errs, field.Invalid(path, *id, msg))
	}
	return errs
}

func groupID(id *int64, path *field.Path) field.ErrorList {
	if id == nil {
		return nil
	}
	var errs field.ErrorList
	for _, msg := range validation.IsValidGroupID(*id) {
		errs = append(errs, field.Invalid(path, *id, msg))
	}
	return errs
}

// sysctlName is upstream's sysctl name: dotted or slashed segments.
var sysctlName = regexp.MustCompile(`^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$`)

const sysctlMaxLength = 253

func validateSysctls(s *v1.PodSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, sc := range s.SecurityContext.Sysctls {
		p := path.Index(i).Child("name")
		switch {
		case sc.Name == "":
			errs = append(errs, field.Required(p, ""))
		case len(sc.Name) > sysctlMaxLength || !sysctlName.MatchString(sc.Name):
			errs = append(errs, field.Invalid(p, sc.Name, fmt.Sprintf("must have at most %d characters and match regex %s", sysctlMaxLength, sysctlName)))
		case seen[sc.Name]:
			errs = append(errs, field.Duplicate(p, sc.Name))
		}
		// A namespaced sysctl would be the host's where the pod shares
		// that namespace with it.
		switch ns, _, _ := sysctl.GetNamespace(sc.Name); {
		case s.HostNetwork && ns == sysctl.NetNamespace:
			errs = append(errs, field.Invalid(p, sc.Name, "may not be specified when 'hostNetwork' is true"))
		case s.HostIPC && ns == sysctl.IPCNamespace:
			errs = append(errs, field.Invalid(p, sc.Name, "may not be specified when 'hostIPC' is true"))
		}
		seen[sc.Name] = true
	}
	return errs
}
