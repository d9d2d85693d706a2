package podsources

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

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

func validatePodSecurityContext(s *v1.PodSpec, p *field.Path) field.ErrorList {
	sc := s.SecurityContext
	if sc == nil {
		return nil
	}
	errs := groupID(sc.FSGroup, p.Child("fsGroup"))
	errs = append(errs, userID(sc.RunAsUser, p.Child("runAsUser"))...)
	errs = append(errs, groupID(sc.RunAsGroup, p.Child("runAsGroup"))...)
	for i := range sc.SupplementalGroups {
		errs = append(errs, groupID(&sc.SupplementalGroups[i], p.Child("supplementalGroups").Index(i))...)
	}
	errs = append(errs, validateSysctls(s, p.Child("sysctls"))...)
	if f := sc.FSGroupChangePolicy; f != nil && *f != v1.FSGroupChangeAlways && *f != v1.FSGroupChangeOnRootMismatch {
		errs = append(errs, field.NotSupported(p.Child("fsGroupChangePolicy"), f, []string{"Always", "OnRootMismatch"}))
	}
	errs = append(errs, validateSeccompProfile(sc.SeccompProfile, p.Child("seccompProfile"))...)
	errs = append(errs, validateWindowsOptions(sc.WindowsOptions, p.Child("windowsOptions"))...)
	errs = append(errs, validateAppArmorProfile(sc.AppArmorProfile, p.Child("appArmorProfile"))...)
	if g := sc.SupplementalGroupsPolicy; g != nil && *g != v1.SupplementalGroupsPolicyMerge && *g != v1.SupplementalGroupsPolicyStrict {
		errs = append(errs, field.NotSupported(p.Child("supplementalGroupsPolicy"), g, []string{"Merge", "Strict"}))
	}
	if c := sc.SELinuxChangePolicy; c != nil && *c != v1.SELinuxChangePolicyRecursive && *c != v1.SELinuxChangePolicyMountOption {
		errs = append(errs, field.NotSupported(p.Child("seLinuxChangePolicy"), *c, []string{"MountOption", "Recursive"}))
	}
	return errs
}

// validateHostUsers: a user namespace beside the host's network
// (UserNamespacesHostNetworkSupport is alpha, off), PID or IPC namespace,
// or with raw block devices (no idmapped mounts), is refused.
func validateHostUsers(s *v1.PodSpec, path *field.Path) field.ErrorList {
	if hostUsers(s) {
		return nil
	}
	var errs field.ErrorList
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
	return errs
}

// eachContainer visits init, app and ephemeral containers, with their
// paths, in the API server's order.
func eachContainer(s *v1.PodSpec, path *field.Path, visit func(*v1.Container, *field.Path)) {
	for i := range s.InitContainers {
		visit(&s.InitContainers[i], path.Child("initContainers").Index(i))
	}
	for i := range s.Containers {
		visit(&s.Containers[i], path.Child("containers").Index(i))
	}
	for i := range s.EphemeralContainers {
		visit((*v1.Container)(&s.EphemeralContainers[i].EphemeralContainerCommon), path.Child("ephemeralContainers").Index(i))
	}
}

func validateContainerSecurity(sc *v1.SecurityContext, path *field.Path, hostUsers bool) field.ErrorList {
	if sc == nil {
		return nil
	}
	// privileged: the kubelet allows it (capabilities.AllowPrivileged).
	errs := userID(sc.RunAsUser, path.Child("runAsUser"))
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
	errs = append(errs, validateSeccompProfile(sc.SeccompProfile, path.Child("seccompProfile"))...)
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
	errs = append(errs, validateWindowsOptions(sc.WindowsOptions, path.Child("windowsOptions"))...)
	return append(errs, validateAppArmorProfile(sc.AppArmorProfile, path.Child("appArmorProfile"))...)
}

func validateSeccompProfile(sp *v1.SeccompProfile, path *field.Path) field.ErrorList {
	if sp == nil {
		return nil
	}
	var errs field.ErrorList
	switch sp.Type {
	case v1.SeccompProfileTypeLocalhost, v1.SeccompProfileTypeRuntimeDefault, v1.SeccompProfileTypeUnconfined:
	case "":
		errs = append(errs, field.Required(path.Child("type"), "type is required when seccompProfile is set"))
	default:
		errs = append(errs, field.NotSupported(path.Child("type"), sp.Type, []string{"Localhost", "RuntimeDefault", "Unconfined"}))
	}
	switch {
	case sp.Type == v1.SeccompProfileTypeLocalhost && sp.LocalhostProfile == nil:
		errs = append(errs, field.Required(path.Child("localhostProfile"), "must be set when seccomp type is Localhost"))
	case sp.Type == v1.SeccompProfileTypeLocalhost:
		errs = append(errs, localDescendingPath(*sp.LocalhostProfile, path.Child("localhostProfile"))...)
	case sp.LocalhostProfile != nil:
		errs = append(errs, field.Invalid(path.Child("localhostProfile"), sp, "can only be set when seccomp type is Localhost"))
	}
	return errs
}

func validateAppArmorProfile(ap *v1.AppArmorProfile, path *field.Path) field.ErrorList {
	if ap == nil {
		return nil
	}
	var errs field.ErrorList
	switch ap.Type {
	case v1.AppArmorProfileTypeLocalhost:
		lp := ap.LocalhostProfile
		switch {
		case lp == nil:
			return field.ErrorList{field.Required(path.Child("localhostProfile"), "must be set when AppArmor type is Localhost")}
		case strings.TrimSpace(*lp) != *lp:
			errs = append(errs, field.Invalid(path.Child("localhostProfile"), *lp, "must not be padded with whitespace"))
		case *lp == "":
			errs = append(errs, field.Required(path.Child("localhostProfile"), "must be set when AppArmor type is Localhost"))
		}
		if len(*lp) > 4095 {
			errs = append(errs, field.TooLong(path.Child("localhostProfile"), "", 4095))
		}
	case v1.AppArmorProfileTypeRuntimeDefault, v1.AppArmorProfileTypeUnconfined:
		if ap.LocalhostProfile != nil {
			errs = append(errs, field.Invalid(path.Child("localhostProfile"), ap.LocalhostProfile, "can only be set when AppArmor type is Localhost"))
		}
	case "":
		errs = append(errs, field.Required(path.Child("type"), "type is required when appArmorProfile is set"))
	default:
		errs = append(errs, field.NotSupported(path.Child("type"), ap.Type, []string{"Localhost", "RuntimeDefault", "Unconfined"}))
	}
	return errs
}

var (
	ctrlChars        = regexp.MustCompile(`[[:cntrl:]]+`)
	netBIOSDomain    = regexp.MustCompile(`^[^\\/:\*\?"<>|\.][^\\/:\*\?"<>|]{0,14}$`)
	dnsDomain        = regexp.MustCompile(`^[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$`)
	userBadChars     = regexp.MustCompile(`["/\\:;|=,\+\*\?<>@\[\]]`)
	userDotsOrSpaces = regexp.MustCompile(`^[\. ]+$`)
)

func validateWindowsOptions(w *v1.WindowsSecurityContextOptions, path *field.Path) field.ErrorList {
	if w == nil {
		return nil
	}
	var errs field.ErrorList
	if n := w.GMSACredentialSpecName; n != nil {
		for _, msg := range validation.IsDNS1123Subdomain(*n) {
			errs = append(errs, field.Invalid(path.Child("gmsaCredentialSpecName"), n, msg))
		}
	}
	if s := w.GMSACredentialSpec; s != nil {
		if len(*s) == 0 {
			errs = append(errs, field.Invalid(path.Child("gmsaCredentialSpec"), s, "gmsaCredentialSpec cannot be an empty string"))
		} else if len(*s) > 64*1024 {
			errs = append(errs, field.Invalid(path.Child("gmsaCredentialSpec"), s, "gmsaCredentialSpec size must be under 64 KiB"))
		}
	}
	if u := w.RunAsUserName; u != nil {
		for _, msg := range windowsUserNameProblems(*u) {
			errs = append(errs, field.Invalid(path.Child("runAsUserName"), u, msg))
		}
	}
	return errs
}

func windowsUserNameProblems(name string) []string {
	parts := strings.Split(name, "\\")
	switch {
	case name == "":
		return []string{"runAsUserName cannot be an empty string"}
	case ctrlChars.MatchString(name):
		return []string{"runAsUserName cannot contain control characters"}
	case len(parts) > 2:
		return []string{"runAsUserName cannot contain more than one backslash"}
	}
	domain, user := "", parts[0]
	if len(parts) == 2 {
		domain, user = parts[0], parts[1]
	}
	var out []string
	if len(domain) >= 256 {
		out = append(out, "runAsUserName's Domain length must be under 256 characters")
	}
	if len(parts) == 2 && !netBIOSDomain.MatchString(domain) && !dnsDomain.MatchString(domain) {
		out = append(out, "runAsUserName's Domain doesn't match the NetBios nor the DNS format")
	}
	if user == "" {
		out = append(out, "runAsUserName's User cannot be empty")
	} else if len(user) > 104 {
		out = append(out, "runAsUserName's User length must not be longer than 104 characters")
	}
	if userDotsOrSpaces.MatchString(user) {
		out = append(out, "runAsUserName's User cannot contain only periods or spaces")
	}
	if userBadChars.MatchString(user) {
		out = append(out, `runAsUserName's User cannot contain the following characters: "/\:;|=,+*?<>@[]`)
	}
	return out
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

// validateSeccompAnnotations: the deprecated seccomp annotations name a
// profile the API knows.
func validateSeccompAnnotations(a map[string]string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if p, ok := a[v1.SeccompPodAnnotationKey]; ok {
		errs = append(errs, seccompAnnotationProfile(p, path.Child(v1.SeccompPodAnnotationKey))...)
	}
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if strings.HasPrefix(k, v1.SeccompContainerAnnotationKeyPrefix) {
			errs = append(errs, seccompAnnotationProfile(a[k], path.Child(k))...)
		}
	}
	return errs
}

func seccompAnnotationProfile(p string, path *field.Path) field.ErrorList {
	switch {
	case p == v1.SeccompProfileRuntimeDefault || p == v1.DeprecatedSeccompProfileDockerDefault || p == v1.SeccompProfileNameUnconfined:
		return nil
	case strings.HasPrefix(p, v1.SeccompLocalhostProfileNamePrefix):
		return localDescendingPath(strings.TrimPrefix(p, v1.SeccompLocalhostProfileNamePrefix), path)
	}
	return field.ErrorList{field.Invalid(path, p, "must be a valid seccomp profile")}
}

// validateAppArmorAnnotations: the deprecated AppArmor annotations name a
// container of the pod and a profile of the known forms.
func validateAppArmorAnnotations(a map[string]string, s *v1.PodSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, k := range slices.Sorted(maps.Keys(a)) {
		name, ok := strings.CutPrefix(k, v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix)
		if !ok {
			continue
		}
		found := false
		eachContainer(s, path, func(c *v1.Container, _ *field.Path) { found = found || c.Name == name })
		if !found {
			errs = append(errs, field.Invalid(path.Key(k), name, "container not found"))
		}
		switch p := a[k]; {
		case p == "" || p == v1.DeprecatedAppArmorBetaProfileRuntimeDefault || p == v1.DeprecatedAppArmorBetaProfileNameUnconfined:
		case !strings.HasPrefix(p, v1.DeprecatedAppArmorBetaProfileNamePrefix):
			errs = append(errs, field.Invalid(path.Key(k), p, fmt.Sprintf("invalid AppArmor profile name: %q", p)))
		}
	}
	return errs
}

// validateSeccompAnnotationsMatch: where an annotation and a field both
// give a seccomp profile, they agree.
func validateSeccompAnnotationsMatch(pod *v1.Pod, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if sc := pod.Spec.SecurityContext; sc != nil && sc.SeccompProfile != nil {
		if a, ok := pod.Annotations[v1.SeccompPodAnnotationKey]; ok {
			errs = append(errs, seccompMatch(a, sc.SeccompProfile, path.Child("securityContext", "seccompProfile"))...)
		}
	}
	eachContainer(&pod.Spec, path, func(c *v1.Container, cp *field.Path) {
		if c.SecurityContext == nil || c.SecurityContext.SeccompProfile == nil {
			return
		}
		if a, ok := pod.Annotations[v1.SeccompContainerAnnotationKeyPrefix+c.Name]; ok {
			errs = append(errs, seccompMatch(a, c.SecurityContext.SeccompProfile, cp.Child("securityContext", "seccompProfile"))...)
		}
	})
	return errs
}

func seccompMatch(a string, sp *v1.SeccompProfile, path *field.Path) field.ErrorList {
	mismatch := field.ErrorList{field.Forbidden(path.Child("type"), "seccomp type in annotation and field must match")}
	switch sp.Type {
	case v1.SeccompProfileTypeUnconfined:
		if a != v1.SeccompProfileNameUnconfined {
			return mismatch
		}
	case v1.SeccompProfileTypeRuntimeDefault:
		if a != v1.SeccompProfileRuntimeDefault && a != v1.DeprecatedSeccompProfileDockerDefault {
			return mismatch
		}
	case v1.SeccompProfileTypeLocalhost:
		if !strings.HasPrefix(a, v1.SeccompLocalhostProfileNamePrefix) {
			return mismatch
		}
		if sp.LocalhostProfile == nil || strings.TrimPrefix(a, v1.SeccompLocalhostProfileNamePrefix) != *sp.LocalhostProfile {
			return field.ErrorList{field.Forbidden(path.Child("localhostProfile"), "seccomp profile in annotation and field must match")}
		}
	}
	return nil
}

// validateAppArmorAnnotationsMatch: where an annotation and a field both
// give a container's AppArmor profile, they agree.
func validateAppArmorAnnotationsMatch(pod *v1.Pod, path *field.Path) field.ErrorList {
	if pod.Spec.OS != nil && pod.Spec.OS.Name == v1.Windows {
		return nil
	}
	var podProfile *v1.AppArmorProfile
	if pod.Spec.SecurityContext != nil {
		podProfile = pod.Spec.SecurityContext.AppArmorProfile
	}
	var errs field.ErrorList
	eachContainer(&pod.Spec, path, func(c *v1.Container, cp *field.Path) {
		profile := podProfile
		if c.SecurityContext != nil && c.SecurityContext.AppArmorProfile != nil {
			profile = c.SecurityContext.AppArmorProfile
		}
		a, ok := pod.Annotations[v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+c.Name]
		if profile == nil || !ok {
			return
		}
		p := cp.Child("securityContext", "appArmorProfile")
		mismatch := field.Forbidden(p.Child("type"), "apparmor type in annotation and field must match")
		switch profile.Type {
		case v1.AppArmorProfileTypeUnconfined:
			if a != v1.DeprecatedAppArmorBetaProfileNameUnconfined {
				errs = append(errs, mismatch)
			}
		case v1.AppArmorProfileTypeRuntimeDefault:
			if a != v1.DeprecatedAppArmorBetaProfileRuntimeDefault {
				errs = append(errs, mismatch)
			}
		case v1.AppArmorProfileTypeLocalhost:
			if !strings.HasPrefix(a, v1.DeprecatedAppArmorBetaProfileNamePrefix) {
				errs = append(errs, mismatch)
			} else if profile.LocalhostProfile == nil || strings.TrimPrefix(a, v1.DeprecatedAppArmorBetaProfileNamePrefix) != *profile.LocalhostProfile {
				errs = append(errs, field.Forbidden(p.Child("localhostProfile"), "apparmor profile in annotation and field must match"))
			}
		}
	})
	return errs
}
