package podsources

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The scheduling and naming checks of the API server's ValidatePodSpec,
// at v1.37: affinity, topology spread, DNS, tolerations, and the Windows
// and host-process rules. nodelet runs none of the scheduling fields, but
// a pod the API server would refuse for them is refused here too.

func validateAffinity(a *v1.Affinity, path *field.Path) field.ErrorList {
	if a == nil {
		return nil
	}
	var errs field.ErrorList
	if na := a.NodeAffinity; na != nil {
		p := path.Child("nodeAffinity")
		if r := na.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
			tp := p.Child("requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
			if len(r.NodeSelectorTerms) == 0 {
				errs = append(errs, field.Required(tp, "must have at least one node selector term"))
			}
			for i, t := range r.NodeSelectorTerms {
				errs = append(errs, validateNodeSelectorTerm(t, tp.Index(i))...)
			}
		}
		for i, t := range na.PreferredDuringSchedulingIgnoredDuringExecution {
			tp := p.Child("preferredDuringSchedulingIgnoredDuringExecution").Index(i)
			if t.Weight <= 0 || t.Weight > 100 {
				errs = append(errs, field.Invalid(tp.Child("weight"), t.Weight, "must be in the range 1-100"))
			}
			errs = append(errs, validateNodeSelectorTerm(t.Preference, tp.Child("preference"))...)
		}
	}
	if pa := a.PodAffinity; pa != nil {
		errs = append(errs, validatePodAffinityTerms(pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution, path.Child("podAffinity"))...)
	}
	if pa := a.PodAntiAffinity; pa != nil {
		errs = append(errs, validatePodAffinityTerms(pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution, path.Child("podAntiAffinity"))...)
	}
	return errs
}

func validateNodeSelectorTerm(t v1.NodeSelectorTerm, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for j, r := range t.MatchExpressions {
		p := path.Child("matchExpressions").Index(j)
		switch r.Operator {
		case v1.NodeSelectorOpIn, v1.NodeSelectorOpNotIn:
			if len(r.Values) == 0 {
				errs = append(errs, field.Required(p.Child("values"), "must be specified when `operator` is 'In' or 'NotIn'"))
			}
		case v1.NodeSelectorOpExists, v1.NodeSelectorOpDoesNotExist:
			if len(r.Values) > 0 {
				errs = append(errs, field.Forbidden(p.Child("values"), "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
			}
		case v1.NodeSelectorOpGt, v1.NodeSelectorOpLt:
			if len(r.Values) != 1 {
				errs = append(errs, field.Required(p.Child("values"), "must be specified single value when `operator` is 'Lt' or 'Gt'"))
			}
		default:
			errs = append(errs, field.Invalid(p.Child("operator"), r.Operator, "not a valid selector operator"))
		}
		errs = append(errs, metavalidation.ValidateLabelName(r.Key, p.Child("key"))...)
		for k, v := range r.Values {
			for _, msg := range validation.IsValidLabelValue(v) {
				errs = append(errs, field.Invalid(p.Child("values").Index(k), v, msg))
			}
		}
	}
	for j, r := range t.MatchFields {
		p := path.Child("matchFields").Index(j)
		switch r.Operator {
		case v1.NodeSelectorOpIn, v1.NodeSelectorOpNotIn:
			if len(r.Values) != 1 {
				errs = append(errs, field.Required(p.Child("values"), "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"))
			}
		default:
			errs = append(errs, field.Invalid(p.Child("operator"), r.Operator, "not a valid selector operator"))
		}
		if r.Key != metav1.ObjectNameField {
			errs = append(errs, field.Invalid(p.Child("key"), r.Key, "not a valid field selector key"))
			continue
		}
		for k, v := range r.Values {
			for _, msg := range apivalidation.NameIsDNSSubdomain(v, false) {
				errs = append(errs, field.Invalid(p.Child("values").Index(k), v, msg))
			}
		}
	}
	return errs
}

func validatePodAffinityTerms(required []v1.PodAffinityTerm, preferred []v1.WeightedPodAffinityTerm, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, t := range required {
		errs = append(errs, validatePodAffinityTerm(t, path.Child("requiredDuringSchedulingIgnoredDuringExecution").Index(i))...)
	}
	for i, t := range preferred {
		p := path.Child("preferredDuringSchedulingIgnoredDuringExecution").Index(i)
		if t.Weight <= 0 || t.Weight > 100 {
			errs = append(errs, field.Invalid(p.Child("weight"), t.Weight, "must be in the range 1-100"))
		}
		errs = append(errs, validatePodAffinityTerm(t.PodAffinityTerm, p.Child("podAffinityTerm"))...)
	}
	return errs
}

func validatePodAffinityTerm(t v1.PodAffinityTerm, path *field.Path) field.ErrorList {
	opts := metavalidation.LabelSelectorValidationOptions{}
	errs := metavalidation.ValidateLabelSelector(t.LabelSelector, opts, path.Child("labelSelector"))
	errs = append(errs, metavalidation.ValidateLabelSelector(t.NamespaceSelector, opts, path.Child("namespaceSelector"))...)
	for _, ns := range t.Namespaces {
		for _, msg := range apivalidation.ValidateNamespaceName(ns, false) {
			errs = append(errs, field.Invalid(path.Child("namespace"), ns, msg))
		}
	}
	errs = append(errs, validateMatchLabelKeys(path, t.MatchLabelKeys, t.MismatchLabelKeys, t.LabelSelector)...)
	if t.TopologyKey == "" {
		errs = append(errs, field.Required(path.Child("topologyKey"), "can not be empty"))
	}
	return append(errs, metavalidation.ValidateLabelName(t.TopologyKey, path.Child("topologyKey"))...)
}

// validateMatchLabelKeys: label keys need a selector, and a key is in
// at most one of the selector's expressions and matchLabelKeys, and of
// matchLabelKeys and mismatchLabelKeys.
func validateMatchLabelKeys(path *field.Path, match, mismatch []string, sel *metav1.LabelSelector) field.ErrorList {
	var errs field.ErrorList
	for _, keys := range []struct {
		name string
		keys []string
	}{{"matchLabelKeys", match}, {"mismatchLabelKeys", mismatch}} {
		if len(keys.keys) == 0 {
			continue
		}
		if sel == nil {
			errs = append(errs, field.Forbidden(path.Child(keys.name), "must not be specified when labelSelector is not set"))
			continue
		}
		for i, k := range keys.keys {
			errs = append(errs, metavalidation.ValidateLabelName(k, path.Child(keys.name).Index(i))...)
		}
	}
	if sel != nil {
		index := map[string]int{}
		for i, k := range match {
			index[k] = i
		}
		inSelector := map[string]bool{}
		for k := range sel.MatchLabels {
			inSelector[k] = true
		}
		for _, e := range sel.MatchExpressions {
			if i, ok := index[e.Key]; ok && inSelector[e.Key] {
				errs = append(errs, field.Invalid(path.Index(i), e.Key, "exists in both matchLabelKeys and labelSelector"))
			}
			inSelector[e.Key] = true
		}
	}
	mismatched := map[string]bool{}
	for _, k := range mismatch {
		mismatched[k] = true
	}
	for i, k := range match {
		if mismatched[k] {
			errs = append(errs, field.Invalid(path.Child("matchLabelKeys").Index(i), k, "exists in both matchLabelKeys and mismatchLabelKeys"))
		}
	}
	return errs
}

func validateTopologySpread(cs []v1.TopologySpreadConstraint, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, c := range cs {
		p := path.Index(i)
		if c.MaxSkew <= 0 {
			errs = append(errs, field.Invalid(p.Child("maxSkew"), int64(c.MaxSkew), "must be greater than zero"))
		}
		if c.TopologyKey == "" {
			errs = append(errs, field.Required(p.Child("topologyKey"), "can not be empty"))
		}
		if c.WhenUnsatisfiable != v1.DoNotSchedule && c.WhenUnsatisfiable != v1.ScheduleAnyway {
			errs = append(errs, field.NotSupported(p.Child("whenUnsatisfiable"), c.WhenUnsatisfiable, []string{"DoNotSchedule", "ScheduleAnyway"}))
		}
		for _, r := range cs[i+1:] {
			if c.TopologyKey == r.TopologyKey && c.WhenUnsatisfiable == r.WhenUnsatisfiable {
				errs = append(errs, field.Duplicate(p.Child("{topologyKey, whenUnsatisfiable}"), fmt.Sprintf("{%v, %v}", c.TopologyKey, c.WhenUnsatisfiable)))
				break
			}
		}
		if m := c.MinDomains; m != nil {
			if *m <= 0 {
				errs = append(errs, field.Invalid(p.Child("minDomains"), int64(*m), "must be greater than zero"))
			}
			if c.WhenUnsatisfiable != v1.DoNotSchedule {
				errs = append(errs, field.Invalid(p.Child("minDomains"), m, fmt.Sprintf("can only use minDomains if whenUnsatisfiable=%s, not %s", v1.DoNotSchedule, c.WhenUnsatisfiable)))
			}
		}
		for _, pol := range []struct {
			name string
			v    *v1.NodeInclusionPolicy
		}{{"nodeAffinityPolicy", c.NodeAffinityPolicy}, {"nodeTaintsPolicy", c.NodeTaintsPolicy}} {
			if pol.v != nil && *pol.v != v1.NodeInclusionPolicyIgnore && *pol.v != v1.NodeInclusionPolicyHonor {
				errs = append(errs, field.NotSupported(p.Child(pol.name), pol.v, []string{"Honor", "Ignore"}))
			}
		}
		errs = append(errs, validateMatchLabelKeys(p, c.MatchLabelKeys, nil, c.LabelSelector)...)
		errs = append(errs, metavalidation.ValidateLabelSelector(c.LabelSelector, metavalidation.LabelSelectorValidationOptions{}, p.Child("labelSelector"))...)
	}
	return errs
}

// The API's limits on a pod's DNS configuration.
const (
	maxDNSNameservers     = 3
	maxDNSSearchPaths     = 32
	maxDNSSearchListChars = 2048
)

func validateDNSConfig(c *v1.PodDNSConfig, policy v1.DNSPolicy, path *field.Path) field.ErrorList {
	if policy == v1.DNSNone {
		if c == nil {
			return field.ErrorList{field.Required(path, fmt.Sprintf("must provide `dnsConfig` when `dnsPolicy` is %s", v1.DNSNone))}
		}
		if len(c.Nameservers) == 0 {
			return field.ErrorList{field.Required(path.Child("nameservers"), fmt.Sprintf("must provide at least one DNS nameserver when `dnsPolicy` is %s", v1.DNSNone))}
		}
	}
	if c == nil {
		return nil
	}
	var errs field.ErrorList
	if len(c.Nameservers) > maxDNSNameservers {
		errs = append(errs, field.Invalid(path.Child("nameservers"), c.Nameservers, fmt.Sprintf("must not have more than %v nameservers", maxDNSNameservers)))
	}
	for i, ns := range c.Nameservers {
		errs = append(errs, validation.IsValidIPForLegacyField(path.Child("nameservers").Index(i), ns, true, nil)...)
	}
	if len(c.Searches) > maxDNSSearchPaths {
		errs = append(errs, field.Invalid(path.Child("searches"), c.Searches, fmt.Sprintf("must not have more than %v search paths", maxDNSSearchPaths)))
	}
	if len(strings.Join(c.Searches, " ")) > maxDNSSearchListChars {
		errs = append(errs, field.Invalid(path.Child("searches"), c.Searches, fmt.Sprintf("must not have more than %v characters (including spaces) in the search list", maxDNSSearchListChars)))
	}
	for i, s := range c.Searches {
		if s == "." {
			continue
		}
		s = strings.TrimSuffix(s, ".")
		for _, msg := range validation.IsDNS1123SubdomainWithUnderscore(s) {
			errs = append(errs, field.Invalid(path.Child("searches").Index(i), s, msg))
		}
	}
	for i, o := range c.Options {
		if o.Name == "" {
			errs = append(errs, field.Required(path.Child("options").Index(i), "must not be empty"))
		}
	}
	return errs
}

func validateTolerations(ts []v1.Toleration, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, t := range ts {
		p := path.Index(i)
		if t.Key != "" {
			errs = append(errs, metavalidation.ValidateLabelName(t.Key, p.Child("key"))...)
		}
		if t.Key == "" && t.Operator != v1.TolerationOpExists {
			errs = append(errs, field.Invalid(p.Child("operator"), t.Operator, "operator must be Exists when `key` is empty, which means \"match all values and all keys\""))
		}
		if t.TolerationSeconds != nil && t.Effect != v1.TaintEffectNoExecute {
			errs = append(errs, field.Invalid(p.Child("effect"), t.Effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"))
		}
		switch t.Operator {
		case v1.TolerationOpEqual, "":
			if msgs := validation.IsValidLabelValue(t.Value); len(msgs) != 0 {
				errs = append(errs, field.Invalid(p.Child("operator"), t.Value, strings.Join(msgs, ";")))
			}
		case v1.TolerationOpExists:
			if t.Value != "" {
				errs = append(errs, field.Invalid(p.Child("operator"), t.Value, "value must be empty when `operator` is 'Exists'"))
			}
		case "Lt", "Gt": // TaintTolerationComparisonOperators is alpha, off
			errs = append(errs, field.NotSupported(p.Child("operator"), t.Operator, []string{"Equal", "Exists", "Lt", "Gt"}))
		default:
			errs = append(errs, field.NotSupported(p.Child("operator"), t.Operator, []string{"Equal", "Exists"}))
		}
		switch t.Effect {
		case "", v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		default:
			errs = append(errs, field.NotSupported(p.Child("effect"), t.Effect, []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}))
		}
	}
	return errs
}

// validateHostProcess: Windows host-process containers are all or none of
// a pod's, with the host's network.
func validateHostProcess(s *v1.PodSpec, path *field.Path) field.ErrorList {
	var pod *bool
	if s.SecurityContext != nil && s.SecurityContext.WindowsOptions != nil {
		pod = s.SecurityContext.WindowsOptions.HostProcess
	}
	var errs field.ErrorList
	count, hostProcess := 0, 0
	eachContainer(s, path, func(c *v1.Container, cp *field.Path) {
		count++
		var ctr *bool
		if c.SecurityContext != nil && c.SecurityContext.WindowsOptions != nil {
			ctr = c.SecurityContext.WindowsOptions.HostProcess
		}
		if pod != nil && ctr != nil && *pod != *ctr {
			errs = append(errs, field.Invalid(cp.Child("securityContext", "windowsOptions", "hostProcess"), *ctr,
				fmt.Sprintf("pod hostProcess value must be identical if both are specified, was %v", *pod)))
		}
		if (ctr != nil && *ctr) || (ctr == nil && pod != nil && *pod) {
			hostProcess++
		}
	})
	if hostProcess > 0 {
		if hostProcess != count {
			errs = append(errs, field.Invalid(path, "", "If pod contains any hostProcess containers then all containers must be HostProcess containers"))
		}
		if !s.HostNetwork {
			errs = append(errs, field.Invalid(path.Child("hostNetwork"), s.HostNetwork, "hostNetwork must be true if pod contains any hostProcess containers"))
		}
	}
	return errs
}

// validateWindowsPod: what a Windows pod cannot set.
func validateWindowsPod(s *v1.PodSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	forbid := func(set bool, p *field.Path) {
		if set {
			errs = append(errs, field.Forbidden(p, "cannot be set for a windows pod"))
		}
	}
	if sc := s.SecurityContext; sc != nil {
		p := path.Child("securityContext")
		forbid(sc.AppArmorProfile != nil, p.Child("appArmorProfile"))
		forbid(sc.SELinuxOptions != nil, p.Child("seLinuxOptions"))
		forbid(sc.SeccompProfile != nil, p.Child("seccompProfile"))
		forbid(sc.FSGroup != nil, p.Child("fsGroup"))
		forbid(sc.FSGroupChangePolicy != nil, p.Child("fsGroupChangePolicy"))
		forbid(len(sc.Sysctls) > 0, p.Child("sysctls"))
		forbid(sc.RunAsUser != nil, p.Child("runAsUser"))
		forbid(sc.RunAsGroup != nil, p.Child("runAsGroup"))
		forbid(sc.SupplementalGroups != nil, p.Child("supplementalGroups"))
		forbid(sc.SupplementalGroupsPolicy != nil, p.Child("supplementalGroupsPolicy"))
		forbid(sc.SELinuxChangePolicy != nil, p.Child("seLinuxChangePolicy"))
	}
	forbid(s.HostUsers != nil, path.Child("hostUsers"))
	forbid(s.HostPID, path.Child("hostPID"))
	forbid(s.HostIPC, path.Child("hostIPC"))
	forbid(s.ShareProcessNamespace != nil, path.Child("shareProcessNamespace"))
	eachContainer(s, path, func(c *v1.Container, cp *field.Path) {
		sc := c.SecurityContext
		if sc == nil {
			return
		}
		p := cp.Child("securityContext")
		forbid(sc.AppArmorProfile != nil, p.Child("appArmorProfile"))
		forbid(sc.SELinuxOptions != nil, p.Child("seLinuxOptions"))
		forbid(sc.SeccompProfile != nil, p.Child("seccompProfile"))
		forbid(sc.Capabilities != nil, p.Child("capabilities"))
		forbid(sc.ReadOnlyRootFilesystem != nil, p.Child("readOnlyRootFilesystem"))
		forbid(sc.Privileged != nil, p.Child("privileged"))
		forbid(sc.AllowPrivilegeEscalation != nil, p.Child("allowPrivilegeEscalation"))
		forbid(sc.ProcMount != nil, p.Child("procMount"))
		forbid(sc.RunAsUser != nil, p.Child("runAsUser"))
		forbid(sc.RunAsGroup != nil, p.Child("runAsGroup"))
	})
	return errs
}
