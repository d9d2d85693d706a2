package podsources

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validatePod checks a static or HTTP pod, defaulted and named, as the
// API server checks a pod on creation (ValidatePodCreate, v1.37, with the
// options the upstream kubelet's file and HTTP sources pass), with its
// field paths and messages, in its order: the first error names the field
// the API server would name. The API server's validation is not available
// as a library (hack/validationdiff proves this against it); what a pod
// from the API server carries has already passed it.
func validatePod(pod *v1.Pod) field.ErrorList {
	meta, spec := field.NewPath("metadata"), field.NewPath("spec")
	errs := apivalidation.ValidateObjectMeta(&pod.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, meta)
	errs = append(errs, validatePodAnnotations(pod.Annotations, &pod.Spec, meta.Child("annotations"))...)
	errs = append(errs, validateSpec(&pod.Spec, pod.Name, spec)...)
	// The checks for pods only (not pod templates).
	if pod.Spec.ServiceAccountName == "" {
		for i, v := range pod.Spec.Volumes {
			if v.Projected == nil {
				continue
			}
			for j, s := range v.Projected.Sources {
				if s.ServiceAccountToken != nil {
					errs = append(errs, field.Forbidden(spec.Child("volumes").Index(i).Child("projected", "sources").Index(j).Child("serviceAccountToken"),
						"must not be specified when serviceAccountName is not set"))
				}
			}
		}
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		errs = append(errs, nonNegative(*g, spec.Child("terminationGracePeriodSeconds"))...)
	}
	for _, list := range []struct {
		name string
		cs   []v1.Container
	}{{"containers", pod.Spec.Containers}, {"initContainers", pod.Spec.InitContainers}} {
		for i, c := range list.cs {
			if len(c.Image) != len(strings.TrimSpace(c.Image)) {
				errs = append(errs, field.Invalid(spec.Child(list.name).Index(i).Child("image"), c.Image, "must not have leading or trailing whitespace"))
			}
		}
	}
	// The checks of a create.
	if len(pod.Spec.EphemeralContainers) > 0 {
		errs = append(errs, field.Forbidden(spec.Child("ephemeralContainers"), "cannot be set on create"))
	}
	if pod.Spec.NodeName != "" && len(pod.Spec.SchedulingGates) != 0 {
		errs = append(errs, field.Forbidden(spec.Child("nodeName"), "cannot be set until all schedulingGates have been cleared"))
	}
	errs = append(errs, validateSeccompAnnotationsMatch(pod, spec)...)
	return append(errs, validateAppArmorAnnotationsMatch(pod, spec)...)
}

// Validate is what nodelet refuses a manifest pod for, on node nodeName:
// the defaults, the static identity, then validatePod. The differential
// test against the API server's validation (hack/validationdiff) calls it.
func Validate(pod *v1.Pod, nodeName string) field.ErrorList {
	pod = pod.DeepCopy()
	setDefaults(pod)
	applyStaticIdentity(pod, nodeName, true)
	return validatePod(pod)
}

// validateSpec is the API server's ValidatePodSpec, in its order.
func validateSpec(s *v1.PodSpec, podName string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.TerminationGracePeriodSeconds == nil {
		errs = append(errs, field.Required(path.Child("terminationGracePeriodSeconds"), ""))
	}
	vols, verrs := validateVolumes(s.Volumes, podName, path.Child("volumes"))
	errs = append(errs, verrs...)
	claims, cerrs := validatePodResourceClaims(s.ResourceClaims, path.Child("resourceClaims"))
	errs = append(errs, cerrs...)
	c := containerChecks{spec: s, volumes: vols, claims: claims, hostUsers: hostUsers(s)}
	errs = append(errs, c.containers(path.Child("containers"))...)
	errs = append(errs, c.initContainers(path.Child("initContainers"))...)
	errs = append(errs, c.ephemeralContainers(path.Child("ephemeralContainers"))...)
	errs = append(errs, validatePodResources(s, claims, path)...)
	errs = append(errs, validateHostNetworkPorts(s, path)...)
	errs = append(errs, enum(string(s.RestartPolicy), path.Child("restartPolicy"), "Always", "OnFailure", "Never")...)
	errs = append(errs, enum(string(s.DNSPolicy), path.Child("dnsPolicy"), "ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")...)
	errs = append(errs, metavalidation.ValidateLabels(s.NodeSelector, path.Child("nodeSelector"))...)
	errs = append(errs, validatePodSecurityContext(s, path.Child("securityContext"))...)
	if s.ShareProcessNamespace != nil && *s.ShareProcessNamespace && s.HostPID {
		errs = append(errs, field.Invalid(path.Child("shareProcessNamespace"), *s.ShareProcessNamespace, "ShareProcessNamespace and HostPID cannot both be enabled"))
	}
	for i, ref := range s.ImagePullSecrets {
		if ref != (v1.LocalObjectReference{Name: ref.Name}) {
			errs = append(errs, field.Invalid(path.Child("imagePullSecrets").Index(i), ref, "only name may be set"))
		}
	}
	errs = append(errs, validateAffinity(s.Affinity, path.Child("affinity"))...)
	errs = append(errs, validateDNSConfig(s.DNSConfig, s.DNSPolicy, path.Child("dnsConfig"))...)
	for i, g := range s.ReadinessGates {
		errs = append(errs, qualifiedName(string(g.ConditionType), path.Child("readinessGates").Index(i).Child("conditionType"))...)
	}
	seen := map[string]bool{}
	for i, g := range s.SchedulingGates {
		errs = append(errs, qualifiedName(g.Name, path.Child("schedulingGates").Index(i))...)
		if seen[g.Name] {
			errs = append(errs, field.Duplicate(path.Child("schedulingGates").Index(i), g.Name))
		}
		seen[g.Name] = true
	}
	errs = append(errs, validateTopologySpread(s.TopologySpreadConstraints, path.Child("topologySpreadConstraints"))...)
	errs = append(errs, validateHostProcess(s, path)...)
	errs = append(errs, validateHostUsers(s, path)...)
	errs = append(errs, validateHostnameOverride(s, path)...)
	return append(errs, validateSpecNames(s, path)...)
}

// validateSpecNames is the rest of ValidatePodSpec: the names, addresses,
// tolerations and policies, each where it is set.
func validateSpecNames(s *v1.PodSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.ServiceAccountName != "" {
		for _, msg := range apivalidation.NameIsDNSSubdomain(s.ServiceAccountName, false) {
			errs = append(errs, field.Invalid(path.Child("serviceAccountName"), s.ServiceAccountName, msg))
		}
	}
	if s.DeprecatedServiceAccount != s.ServiceAccountName { //nolint:staticcheck // the API server checks they agree
		errs = append(errs, field.Invalid(path.Child("deprecatedServiceAccount"), s.DeprecatedServiceAccount, //nolint:staticcheck
			fmt.Sprintf("must be the same as serviceAccountName: %q", s.ServiceAccountName)))
	}
	if s.NodeName != "" {
		for _, msg := range apivalidation.NameIsDNSSubdomain(s.NodeName, false) {
			errs = append(errs, field.Invalid(path.Child("nodeName"), s.NodeName, msg))
		}
	}
	if d := s.ActiveDeadlineSeconds; d != nil && (*d < 1 || *d > math.MaxInt32) {
		errs = append(errs, field.Invalid(path.Child("activeDeadlineSeconds"), *d, validation.InclusiveRangeError(1, math.MaxInt32)))
	}
	if s.Hostname != "" {
		errs = append(errs, dns1123Label(s.Hostname, path.Child("hostname"))...)
	}
	if s.Subdomain != "" {
		errs = append(errs, dns1123Label(s.Subdomain, path.Child("subdomain"))...)
	}
	errs = append(errs, validateTolerations(s.Tolerations, path.Child("tolerations"))...)
	for i, a := range s.HostAliases {
		errs = append(errs, validation.IsValidIPForLegacyField(path.Child("hostAliases").Index(i).Child("ip"), a.IP, true, nil)...)
		for j, h := range a.Hostnames {
			errs = append(errs, dns1123Subdomain(h, path.Child("hostAliases").Index(i).Child("hostnames").Index(j))...)
		}
	}
	if s.PriorityClassName != "" {
		for _, msg := range apivalidation.NameIsDNSSubdomain(s.PriorityClassName, false) {
			errs = append(errs, field.Invalid(path.Child("priorityClassName"), s.PriorityClassName, msg))
		}
	}
	if s.RuntimeClassName != nil {
		for _, msg := range apivalidation.NameIsDNSSubdomain(*s.RuntimeClassName, false) {
			errs = append(errs, field.Invalid(path.Child("runtimeClassName"), *s.RuntimeClassName, msg))
		}
	}
	if s.PreemptionPolicy != nil {
		errs = append(errs, enum(string(*s.PreemptionPolicy), path.Child("preemptionPolicy"), "PreemptLowerPriority", "Never")...)
	}
	if s.Overhead != nil {
		errs = append(errs, validatePodLevelList(s.Overhead, path.Child("overhead"))...)
	}
	errs = append(errs, validateOS(s, path)...)
	if s.SchedulingGroup != nil && len(s.EvictionResponders) > 0 {
		errs = append(errs, field.Forbidden(path.Child("schedulingGroup"), "may not be set when evictionResponders is set"))
	}
	return append(errs, validateFileKeyRefVolumes(s, path)...)
}

// validateOS: a known OS name; a Linux pod has no Windows options.
func validateOS(s *v1.PodSpec, path *field.Path) field.ErrorList {
	if s.OS == nil {
		return nil
	}
	p := path.Child("os")
	switch s.OS.Name {
	case "":
		return field.ErrorList{field.Required(p.Child("name"), "")}
	case v1.Linux:
		var errs field.ErrorList
		if s.SecurityContext != nil && s.SecurityContext.WindowsOptions != nil {
			errs = append(errs, field.Forbidden(path.Child("securityContext", "windowsOptions"), "windows options cannot be set for a linux pod"))
		}
		eachContainer(s, path, func(c *v1.Container, cp *field.Path) {
			if c.SecurityContext != nil && c.SecurityContext.WindowsOptions != nil {
				errs = append(errs, field.Forbidden(cp.Child("securityContext", "windowsOptions"), "windows options cannot be set for a linux pod"))
			}
		})
		return errs
	case v1.Windows:
		return validateWindowsPod(s, path)
	}
	return field.ErrorList{field.NotSupported(p, s.OS.Name, []string{"linux", "windows"})}
}

// validateHostNetworkPorts: a host-network pod's host ports are its
// container ports.
func validateHostNetworkPorts(s *v1.PodSpec, path *field.Path) field.ErrorList {
	if !s.HostNetwork {
		return nil
	}
	var errs field.ErrorList
	for i, c := range s.Containers {
		for j, p := range c.Ports {
			if p.HostPort != 0 && p.HostPort != p.ContainerPort {
				errs = append(errs, field.Invalid(path.Child("containers").Index(i).Child("ports").Index(j).Child("hostPort"), p.HostPort,
					"must match `containerPort` when `hostNetwork` is true"))
			}
		}
	}
	return errs
}

func validateHostnameOverride(s *v1.PodSpec, path *field.Path) field.ErrorList {
	if s.HostnameOverride == nil {
		return nil
	}
	var errs field.ErrorList
	p := path.Child("hostnameOverride")
	if s.SetHostnameAsFQDN != nil && *s.SetHostnameAsFQDN {
		errs = append(errs, field.Forbidden(p, "may not be specified when setHostnameAsFQDN is true"))
	}
	if s.HostNetwork {
		errs = append(errs, field.Forbidden(p, "may not be specified when hostNetwork is true"))
	}
	if len(*s.HostnameOverride) > 64 {
		errs = append(errs, field.TooLong(p, "", 64))
	}
	return append(errs, dns1123Subdomain(*s.HostnameOverride, p)...)
}

// validateFileKeyRefVolumes: an env fileKeyRef names an emptyDir volume.
func validateFileKeyRefVolumes(s *v1.PodSpec, path *field.Path) field.ErrorList {
	vols := map[string]*v1.VolumeSource{}
	for i := range s.Volumes {
		vols[s.Volumes[i].Name] = &s.Volumes[i].VolumeSource
	}
	var errs field.ErrorList
	eachContainer(s, path, func(c *v1.Container, cp *field.Path) {
		for j, e := range c.Env {
			if e.ValueFrom == nil || e.ValueFrom.FileKeyRef == nil {
				continue
			}
			name := e.ValueFrom.FileKeyRef.VolumeName
			p := cp.Child("env").Index(j).Child("valueFrom", "fileKeyRef", "volumeName")
			switch src, ok := vols[name]; {
			case !ok:
				errs = append(errs, field.NotFound(p, name))
			case src.EmptyDir == nil:
				errs = append(errs, field.Invalid(p, name, "referenced volume must be of type emptyDir"))
			}
		}
	})
	return errs
}

// validatePodAnnotations is the API server's check of a pod's own
// annotations: the mirror and tolerations annotations, the deletion cost,
// and the deprecated seccomp and AppArmor annotations.
func validatePodAnnotations(a map[string]string, s *v1.PodSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if v, ok := a[v1.MirrorPodAnnotationKey]; ok && s.NodeName == "" {
		errs = append(errs, field.Invalid(path.Key(v1.MirrorPodAnnotationKey), v, "must set spec.nodeName if mirror pod annotation is set"))
	}
	if a[tolerationsAnnotation] != "" {
		var ts []v1.Toleration
		if err := json.Unmarshal([]byte(a[tolerationsAnnotation]), &ts); err != nil {
			errs = append(errs, field.Invalid(path, tolerationsAnnotation, err.Error()))
		} else {
			errs = append(errs, validateTolerations(ts, path.Child(tolerationsAnnotation))...)
		}
	}
	if v, ok := a[v1.PodDeletionCost]; ok {
		if _, err := strconv.ParseInt(v, 10, 32); err != nil || !validDeletionCost(v) {
			errs = append(errs, field.Invalid(path.Key(v1.PodDeletionCost), v, "must be a 32bit integer"))
		}
	}
	errs = append(errs, validateSeccompAnnotations(a, path)...)
	return append(errs, validateAppArmorAnnotations(a, s, path)...)
}

// tolerationsAnnotation is the alpha annotation that once carried a
// pod's tolerations; the API server still checks it.
const tolerationsAnnotation = "scheduler.alpha.kubernetes.io/tolerations"

// validDeletionCost: the API's form of an int32 starts with '-', a digit
// but 0, or is "0" (no '+', no leading zeros).
func validDeletionCost(v string) bool {
	return v != "" && (v[0] == '-' || v == "0" || (v[0] >= '1' && v[0] <= '9'))
}

// enum: a required value among the allowed.
func enum(v string, p *field.Path, allowed ...string) field.ErrorList {
	if v == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return field.ErrorList{field.NotSupported(p, v, allowed)}
}

func nonNegative(v int64, p *field.Path) field.ErrorList {
	if v < 0 {
		return field.ErrorList{field.Invalid(p, v, apivalidation.IsNegativeErrorMsg)}
	}
	return nil
}

func dns1123Label(v string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(v) {
		errs = append(errs, field.Invalid(p, v, msg))
	}
	return errs
}

func dns1123Subdomain(v string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(v) {
		errs = append(errs, field.Invalid(p, v, msg))
	}
	return errs
}

func qualifiedName(v string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsQualifiedName(v) {
		errs = append(errs, field.Invalid(p, v, msg))
	}
	return errs
}
