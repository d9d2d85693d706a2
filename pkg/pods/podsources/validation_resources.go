package podsources

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	resourcehelper "k8s.io/component-helpers/resource"
)

// The environment and resource checks of the API server's pod
// validation, at v1.37.

// The fields the downward API serves to environment variables.
var envFieldPaths = []string{"metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
	"spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs"}

// The fields it serves to volume files.
var volumeFieldPaths = []string{"metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace", "metadata.uid"}

var resourceFieldPaths = []string{"limits.cpu", "limits.ephemeral-storage", "limits.memory",
	"requests.cpu", "requests.ephemeral-storage", "requests.memory"}

func validateEnv(vars []v1.EnvVar, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, e := range vars {
		p := path.Index(i)
		if e.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		} else {
			for _, msg := range validation.IsRelaxedEnvVarName(e.Name) {
				errs = append(errs, field.Invalid(p.Child("name"), e.Name, msg))
			}
		}
		errs = append(errs, validateValueFrom(e, p.Child("valueFrom"))...)
	}
	return errs
}

func validateValueFrom(e v1.EnvVar, path *field.Path) field.ErrorList {
	from := e.ValueFrom
	if from == nil {
		return nil
	}
	var errs field.ErrorList
	n := 0
	if from.FieldRef != nil {
		n++
		errs = append(errs, validateFieldSelector(from.FieldRef, envFieldPaths, path.Child("fieldRef"))...)
	}
	if from.ResourceFieldRef != nil {
		n++
		errs = append(errs, validateResourceFieldSelector(from.ResourceFieldRef, false, path.Child("resourceFieldRef"))...)
	}
	if r := from.ConfigMapKeyRef; r != nil {
		n++
		errs = append(errs, validateKeySelector(r.Name, r.Key, path.Child("configMapKeyRef"))...)
	}
	if r := from.SecretKeyRef; r != nil {
		n++
		errs = append(errs, validateKeySelector(r.Name, r.Key, path.Child("secretKeyRef"))...)
	}
	if r := from.FileKeyRef; r != nil {
		n++
		errs = append(errs, validateFileKeySelector(r, path.Child("fileKeyRef"))...)
	}
	switch {
	case n == 0:
		errs = append(errs, field.Invalid(path, "", "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef`, `secretKeyRef` or `fileKeyRef`"))
	case e.Value != "":
		errs = append(errs, field.Invalid(path, "", "may not be specified when `value` is not empty"))
	case n > 1:
		errs = append(errs, field.Invalid(path, "", "may not have more than one field specified at a time"))
	}
	return errs
}

func validateKeySelector(name, key string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range apivalidation.NameIsDNSSubdomain(name, false) {
		errs = append(errs, field.Invalid(path.Child("name"), name, msg))
	}
	if key == "" {
		return append(errs, field.Required(path.Child("key"), ""))
	}
	for _, msg := range validation.IsConfigMapKey(key) {
		errs = append(errs, field.Invalid(path.Child("key"), key, msg))
	}
	return errs
}

func validateFileKeySelector(r *v1.FileKeySelector, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r.Key == "" {
		errs = append(errs, field.Required(path.Child("key"), ""))
	} else {
		for _, msg := range validation.IsRelaxedEnvVarName(r.Key) {
			errs = append(errs, field.Invalid(path.Child("key"), r.Key, msg))
		}
	}
	if r.VolumeName == "" {
		errs = append(errs, field.Required(path.Child("volumeName"), ""))
	} else {
		errs = append(errs, dns1123Label(r.VolumeName, path.Child("volumeName"))...)
	}
	if r.Path == "" {
		errs = append(errs, field.Required(path.Child("path"), ""))
	} else if hasBackstep(r.Path) {
		errs = append(errs, field.Invalid(path.Child("path"), r.Path, "must not contain '..'"))
	}
	return errs
}

// splitSubscript splits "metadata.labels['key']" into its path and key.
func splitSubscript(fieldPath string) (string, string, bool) {
	if !strings.HasSuffix(fieldPath, "']") {
		return fieldPath, "", false
	}
	path, key, ok := strings.Cut(strings.TrimSuffix(fieldPath, "']"), "['")
	if !ok || path == "" {
		return fieldPath, "", false
	}
	return path, key, true
}

// downwardLabels are the field labels the v1 API converts.
var downwardLabels = map[string]string{
	"metadata.annotations": "", "metadata.labels": "", "metadata.name": "", "metadata.namespace": "", "metadata.uid": "",
	"spec.nodeName": "", "spec.restartPolicy": "", "spec.serviceAccountName": "", "spec.schedulerName": "",
	"status.phase": "", "status.hostIP": "", "status.hostIPs": "", "status.podIP": "", "status.podIPs": "",
	"spec.host": "spec.nodeName",
}

func validateFieldSelector(fs *v1.ObjectFieldSelector, allowed []string, path *field.Path) field.ErrorList {
	if fs.APIVersion == "" {
		return field.ErrorList{field.Required(path.Child("apiVersion"), "")}
	}
	if fs.FieldPath == "" {
		return field.ErrorList{field.Required(path.Child("fieldPath"), "")}
	}
	internal, err := convertFieldLabel(fs.APIVersion, fs.FieldPath)
	if err != nil {
		return field.ErrorList{field.Invalid(path.Child("fieldPath"), fs.FieldPath, fmt.Sprintf("error converting fieldPath: %v", err))}
	}
	p, key, ok := splitSubscript(internal)
	switch {
	case ok && p == "metadata.annotations":
		return qualifiedName(strings.ToLower(key), path)
	case ok && p == "metadata.labels":
		return qualifiedName(key, path)
	case ok:
		return field.ErrorList{field.Invalid(path, p, "does not support subscript")}
	}
	for _, a := range allowed {
		if p == a {
			return nil
		}
	}
	return field.ErrorList{field.NotSupported(path.Child("fieldPath"), p, allowed)}
}

func convertFieldLabel(version, label string) (string, error) {
	if version != "v1" {
		return "", fmt.Errorf("unsupported pod version: %s", version)
	}
	if p, _, ok := splitSubscript(label); ok {
		if p == "metadata.annotations" || p == "metadata.labels" {
			return label, nil
		}
		return "", fmt.Errorf("field label does not support subscript: %s", label)
	}
	to, ok := downwardLabels[label]
	switch {
	case !ok:
		return "", fmt.Errorf("field label not supported: %s", label)
	case to != "":
		return to, nil
	}
	return label, nil
}

func validateResourceFieldSelector(fs *v1.ResourceFieldSelector, volume bool, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case volume && fs.ContainerName == "":
		errs = append(errs, field.Required(path.Child("containerName"), ""))
	case fs.Resource == "":
		errs = append(errs, field.Required(path.Child("resource"), ""))
	case !slices.Contains(resourceFieldPaths, fs.Resource) &&
		!strings.HasPrefix(fs.Resource, "limits.hugepages-") && !strings.HasPrefix(fs.Resource, "requests.hugepages-"):
		errs = append(errs, field.NotSupported(path.Child("resource"), fs.Resource, resourceFieldPaths))
	}
	return append(errs, validateDivisor(fs.Resource, fs.Divisor, path)...)
}

var (
	cpuDivisors  = []string{"1m", "1"}
	sizeDivisors = []string{"1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei"}
)

func validateDivisor(name string, divisor resource.Quantity, path *field.Path) field.ErrorList {
	if divisor.Cmp(resource.Quantity{}) == 0 {
		return nil
	}
	var errs field.ErrorList
	d := divisor.String()
	const sizes = "1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei"
	switch name {
	case "limits.cpu", "requests.cpu":
		if !slices.Contains(cpuDivisors, d) {
			errs = append(errs, field.Invalid(path.Child("divisor"), name, "only divisor's values 1m and 1 are supported with the cpu resource"))
		}
	case "limits.memory", "requests.memory":
		if !slices.Contains(sizeDivisors, d) {
			errs = append(errs, field.Invalid(path.Child("divisor"), name, "only divisor's values "+sizes+" are supported with the memory resource"))
		}
	case "limits.ephemeral-storage", "requests.ephemeral-storage":
		if !slices.Contains(sizeDivisors, d) {
			errs = append(errs, field.Invalid(path.Child("divisor"), name, "only divisor's values "+sizes+" are supported with the local ephemeral storage resource"))
		}
	}
	if (strings.HasPrefix(name, "requests.hugepages-") || strings.HasPrefix(name, "limits.hugepages-")) && !slices.Contains(sizeDivisors, d) {
		errs = append(errs, field.Invalid(path.Child("divisor"), name, "only divisor's values "+sizes+" are supported with the hugepages resource"))
	}
	return errs
}

func validateEnvFrom(from []v1.EnvFromSource, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, e := range from {
		p := path.Index(i)
		if e.Prefix != "" {
			for _, msg := range validation.IsRelaxedEnvVarName(e.Prefix) {
				errs = append(errs, field.Invalid(p.Child("prefix"), e.Prefix, msg))
			}
		}
		n := 0
		if e.ConfigMapRef != nil {
			n++
			errs = append(errs, validateRefName(e.ConfigMapRef.Name, p.Child("configMapRef", "name"))...)
		}
		if e.SecretRef != nil {
			n++
			errs = append(errs, validateRefName(e.SecretRef.Name, p.Child("secretRef", "name"))...)
		}
		switch {
		case n == 0:
			errs = append(errs, field.Invalid(path, "", "must specify one of: `configMapRef` or `secretRef`"))
		case n > 1:
			errs = append(errs, field.Invalid(path, "", "may not have more than one field specified at a time"))
		}
	}
	return errs
}

// validateRefName: a required object name, as a prefix may be (the API
// server checks envFrom names as prefixes).
func validateRefName(name string, path *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(path, "")}
	}
	var errs field.ErrorList
	for _, msg := range apivalidation.NameIsDNSSubdomain(name, true) {
		errs = append(errs, field.Invalid(path, name, msg))
	}
	return errs
}

// validateRequirements is the API server's validateResourceRequirements:
// names, quantities, requests within limits, hugepages beside cpu or
// memory, and claims the pod declares.
func validateRequirements(r *v1.ResourceRequirements, nameCheck func(v1.ResourceName, *field.Path) field.ErrorList, claims map[string]bool, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	limPath, reqPath := path.Child("limits"), path.Child("requests")
	limQoS, reqQoS, limHuge, reqHuge := false, false, false, false
	for _, name := range slices.Sorted(maps.Keys(r.Limits)) {
		q, p := r.Limits[name], limPath.Key(string(name))
		errs = append(errs, nameCheck(name, p)...)
		errs = append(errs, quantityValue(name, q, p)...)
		if isHugePages(name) {
			limHuge = true
			errs = append(errs, hugePagesValue(name, q, p)...)
		}
		limQoS = limQoS || name == v1.ResourceCPU || name == v1.ResourceMemory
	}
	for _, name := range slices.Sorted(maps.Keys(r.Requests)) {
		q, p := r.Requests[name], reqPath.Key(string(name))
		errs = append(errs, nameCheck(name, p)...)
		errs = append(errs, quantityValue(name, q, p)...)
		if limit, ok := r.Limits[name]; ok {
			if q.Cmp(limit) != 0 && !overcommitAllowed(name) {
				errs = append(errs, field.Invalid(reqPath, q.String(), fmt.Sprintf("must be equal to %s limit of %s", name, limit.String())))
			} else if q.Cmp(limit) > 0 {
				errs = append(errs, field.Invalid(reqPath, q.String(), fmt.Sprintf("must be less than or equal to %s limit of %s", name, limit.String())))
			}
		} else if !overcommitAllowed(name) {
			errs = append(errs, field.Required(limPath, "Limit must be set for non overcommitable resources"))
		}
		if isHugePages(name) {
			reqHuge = true
			errs = append(errs, hugePagesValue(name, q, p)...)
		}
		reqQoS = reqQoS || name == v1.ResourceCPU || name == v1.ResourceMemory
	}
	if !limQoS && !reqQoS && (reqHuge || limHuge) {
		errs = append(errs, field.Forbidden(path, "HugePages require cpu or memory"))
	}
	return append(errs, validateClaimNames(r.Claims, claims, path.Child("claims"))...)
}

func validateClaimNames(cs []v1.ResourceClaim, podClaims map[string]bool, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := map[string]bool{} // a claim's name, or name/request
	for i, c := range cs {
		p := path.Index(i)
		if c.Name == "" {
			errs = append(errs, field.Required(p, ""))
			continue
		}
		if names[c.Name] {
			errs = append(errs, field.Duplicate(p, c.Name))
		} else {
			key := c.Name
			if c.Request != "" {
				errs = append(errs, dns1123Label(c.Request, p.Child("request"))...)
				key += "/" + c.Request
			}
			if names[key] {
				errs = append(errs, field.Duplicate(p, key))
			} else if c.Request == "" {
				for k := range names {
					if n, _, ok := strings.Cut(k, "/"); ok && n == c.Name {
						errs = append(errs, field.Duplicate(p, c.Name))
					}
				}
			}
			names[key] = true
		}
		if !podClaims[c.Name] {
			e := field.NotFound(p, c.Name)
			e.Detail = "must be one of the names in pod.spec.resourceClaims"
			if len(podClaims) == 0 {
				e.Detail += " which is empty"
			}
			errs = append(errs, e)
		}
	}
	return errs
}

func isHugePages(n v1.ResourceName) bool {
	return strings.HasPrefix(string(n), v1.ResourceHugePagesPrefix)
}

// isNative: a name without a domain, or in kubernetes.io's.
func isNative(n v1.ResourceName) bool {
	return !strings.Contains(string(n), "/") || strings.Contains(string(n), v1.ResourceDefaultNamespacePrefix)
}

func overcommitAllowed(n v1.ResourceName) bool { return isNative(n) && !isHugePages(n) }

// isExtended: a resource a device plugin or DRA advertises.
func isExtended(n v1.ResourceName) bool {
	if isNative(n) || strings.HasPrefix(string(n), v1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(v1.DefaultResourceRequestsPrefix+string(n))) == 0
}

func quantityValue(n v1.ResourceName, q resource.Quantity, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if q.Cmp(resource.Quantity{}) < 0 {
		errs = append(errs, field.Invalid(p, q.String(), apivalidation.IsNegativeErrorMsg))
	}
	if isExtended(n) && q.MilliValue()%1000 != 0 {
		errs = append(errs, field.Invalid(p, q, "must be an integer"))
	}
	return errs
}

func hugePagesValue(n v1.ResourceName, q resource.Quantity, p *field.Path) field.ErrorList {
	size, err := resource.ParseQuantity(strings.TrimPrefix(string(n), v1.ResourceHugePagesPrefix))
	if err == nil && size.Sign() > 0 && size.MilliValue()%1000 == 0 && q.Value()%size.Value() == 0 {
		return nil
	}
	return field.ErrorList{field.Invalid(p, q.String(), fmt.Sprintf("%s is not positive integer multiple of %s", q.String(), n))}
}

// standardResources are the unprefixed names the API knows.
var standardResources = []string{"cpu", "memory", "ephemeral-storage", "requests.cpu", "requests.memory",
	"requests.ephemeral-storage", "limits.cpu", "limits.memory", "limits.ephemeral-storage", "pods", "resourcequotas",
	"services", "replicationcontrollers", "secrets", "configmaps", "persistentvolumeclaims", "storage",
	"requests.storage", "services.nodeports", "services.loadbalancers"}

// resourceName is the API server's validateResourceName.
func resourceName(n v1.ResourceName, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsQualifiedName(string(n)) {
		errs = append(errs, field.Invalid(p, n, msg))
	}
	if len(errs) != 0 {
		return errs
	}
	if !strings.Contains(string(n), "/") && !slices.Contains(standardResources, string(n)) &&
		!isHugePages(n) && !strings.HasPrefix(string(n), v1.ResourceRequestsHugePagesPrefix) {
		errs = append(errs, field.Invalid(p, n, "must be a standard resource type or fully qualified"))
	}
	return errs
}

func containerResourceName(n v1.ResourceName, p *field.Path) field.ErrorList {
	errs := resourceName(n, p)
	if !strings.Contains(string(n), "/") {
		if n != v1.ResourceCPU && n != v1.ResourceMemory && n != v1.ResourceEphemeralStorage && !isHugePages(n) {
			return append(errs, field.Invalid(p, n, "must be a standard resource for containers"))
		}
	} else if !isNative(n) && !isExtended(n) {
		return append(errs, field.Invalid(p, n, "doesn't follow extended resource name standard"))
	}
	return errs
}

func podResourceName(n v1.ResourceName, p *field.Path) field.ErrorList {
	if errs := resourceName(n, p); len(errs) != 0 {
		return errs
	}
	if !resourcehelper.IsSupportedPodLevelResource(n) {
		var names []string
		for s := range resourcehelper.SupportedPodLevelResources() {
			names = append(names, string(s))
		}
		sort.Strings(names)
		return field.ErrorList{field.NotSupported(p, n, names)}
	}
	return nil
}

// validatePodLevelList: the overhead, checked as a container's limits.
func validatePodLevelList(l v1.ResourceList, path *field.Path) field.ErrorList {
	return validateRequirements(&v1.ResourceRequirements{Limits: l}, containerResourceName, nil, path)
}

// validatePodResources: pod-level resources, and containers within them.
func validatePodResources(s *v1.PodSpec, claims map[string]bool, path *field.Path) field.ErrorList {
	if s.Resources == nil {
		return nil
	}
	p := path.Child("resources")
	if s.OS != nil && s.OS.Name == v1.Windows {
		return field.ErrorList{field.Forbidden(p, "may not be set for a windows pod")}
	}
	var errs field.ErrorList
	if s.Resources.Claims != nil {
		errs = append(errs, field.Forbidden(p.Child("claims"), "claims may not be set for Resources at pod-level"))
	}
	errs = append(errs, validateRequirements(s.Resources, podResourceName, claims, p)...)
	pod := &v1.Pod{Spec: *s}
	reqs := resourcehelper.AggregateContainerRequests(pod, resourcehelper.PodResourcesOptions{})
	for _, name := range slices.Sorted(maps.Keys(reqs)) {
		if want, ok := s.Resources.Requests[name]; ok {
			if q := reqs[name]; q.Cmp(want) <= 0 {
				continue
			}
			q := reqs[name]
			errs = append(errs, field.Invalid(p.Child("requests").Key(string(name)), want.String(),
				fmt.Sprintf("must be greater than or equal to aggregate container requests of %s", q.String())))
		}
	}
	lims := resourcehelper.AggregateContainerLimits(pod, resourcehelper.PodResourcesOptions{})
	for _, name := range slices.Sorted(maps.Keys(lims)) {
		if want, ok := s.Resources.Limits[name]; ok && isHugePages(name) {
			if q := lims[name]; q.Cmp(want) <= 0 {
				continue
			}
			q := lims[name]
			errs = append(errs, field.Invalid(p.Child("limits").Key(string(name)), want.String(),
				fmt.Sprintf("must be greater than or equal to aggregate container limits of %s", q.String())))
		}
	}
	for i, c := range s.Containers {
		for _, name := range slices.Sorted(maps.Keys(c.Resources.Limits)) {
			if want, ok := s.Resources.Limits[name]; ok {
				if q := c.Resources.Limits[name]; q.Cmp(want) <= 0 {
					continue
				}
				q := c.Resources.Limits[name]
				errs = append(errs, field.Invalid(p.Child("containers").Index(i).Key(string(name)).Child("limits"), q.String(),
					fmt.Sprintf("must be less than or equal to pod limits of %s", want.String())))
			}
		}
	}
	return errs
}

// validatePodResourceClaims checks the pod's claims and returns the names
// its containers may use.
func validatePodResourceClaims(cs []v1.PodResourceClaim, path *field.Path) (map[string]bool, field.ErrorList) {
	all := map[string]bool{}
	for _, c := range cs {
		if c.Name != "" {
			all[c.Name] = true
		}
	}
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, c := range cs {
		p := path.Index(i)
		switch {
		case c.Name == "":
			errs = append(errs, field.Required(p.Child("name"), ""))
		case seen[c.Name]:
			errs = append(errs, field.Duplicate(p.Child("name"), c.Name))
		default:
			errs = append(errs, dns1123Label(c.Name, p.Child("name"))...)
			seen[c.Name] = true
		}
		if c.ResourceClaimName != nil && c.ResourceClaimTemplateName != nil {
			errs = append(errs, field.Invalid(p, c, "at most one of `resourceClaimName` or `resourceClaimTemplateName` may be specified"))
		}
		if c.ResourceClaimName == nil && c.ResourceClaimTemplateName == nil {
			errs = append(errs, field.Invalid(p, c, "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`"))
		}
		if c.ResourceClaimName != nil {
			for _, msg := range apivalidation.NameIsDNSSubdomain(*c.ResourceClaimName, false) {
				errs = append(errs, field.Invalid(p.Child("resourceClaimName"), *c.ResourceClaimName, msg))
			}
		}
		if c.ResourceClaimTemplateName != nil {
			for _, msg := range apivalidation.NameIsDNSSubdomain(*c.ResourceClaimTemplateName, false) {
				errs = append(errs, field.Invalid(p.Child("resourceClaimTemplateName"), *c.ResourceClaimTemplateName, msg))
			}
		}
	}
	return all, errs
}
