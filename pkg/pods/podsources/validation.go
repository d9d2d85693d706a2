package podsources

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validatePod checks a static pod the way the API server would check it
// on creation, for the fields nodelet acts on. The API server's own
// validation is not available as a library; what a pod from the API server
// carries has already passed it.
func validatePod(pod *v1.Pod) error {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	if pod.Name == "" {
		errs = append(errs, field.Required(meta.Child("name"), "name or generateName is required"))
	} else {
		for _, msg := range validation.IsDNS1123Subdomain(pod.Name) {
			errs = append(errs, field.Invalid(meta.Child("name"), pod.Name, msg))
		}
	}
	if pod.Namespace != "" {
		for _, msg := range validation.IsDNS1123Label(pod.Namespace) {
			errs = append(errs, field.Invalid(meta.Child("namespace"), pod.Namespace, msg))
		}
	}
	errs = append(errs, validateSpec(&pod.Spec, field.NewPath("spec"))...)
	if len(errs) > 0 {
		return fmt.Errorf("invalid pod %q: %w", pod.Name, errs.ToAggregate())
	}
	return nil
}

func validateSpec(s *v1.PodSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(s.Containers) == 0 {
		errs = append(errs, field.Required(path.Child("containers"), "must have at least one container"))
	}
	switch s.RestartPolicy {
	case v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever:
	default:
		errs = append(errs, field.NotSupported(path.Child("restartPolicy"), s.RestartPolicy,
			[]string{string(v1.RestartPolicyAlways), string(v1.RestartPolicyOnFailure), string(v1.RestartPolicyNever)}))
	}
	if g := s.TerminationGracePeriodSeconds; g != nil && *g < 0 {
		errs = append(errs, field.Invalid(path.Child("terminationGracePeriodSeconds"), *g, "must be greater than or equal to 0"))
	}

	volumes := map[string]bool{}
	for i, v := range s.Volumes {
		p := path.Child("volumes").Index(i)
		for _, msg := range validation.IsDNS1123Label(v.Name) {
			errs = append(errs, field.Invalid(p.Child("name"), v.Name, msg))
		}
		if volumes[v.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), v.Name))
		}
		volumes[v.Name] = true
		if v.HostPath != nil && !strings.HasPrefix(v.HostPath.Path, "/") {
			errs = append(errs, field.Invalid(p.Child("hostPath", "path"), v.HostPath.Path, "must be an absolute path"))
		}
		errs = append(errs, validateDataVolume(&s.Volumes[i], p)...)
	}
	errs = append(errs, validatePodSecurity(s, path)...)

	names := map[string]bool{}
	check := func(c *v1.Container, p *field.Path) {
		for _, msg := range validation.IsDNS1123Label(c.Name) {
			errs = append(errs, field.Invalid(p.Child("name"), c.Name, msg))
		}
		if names[c.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), c.Name))
		}
		names[c.Name] = true
		if strings.TrimSpace(c.Image) == "" {
			errs = append(errs, field.Required(p.Child("image"), ""))
		}
		switch c.ImagePullPolicy {
		case v1.PullAlways, v1.PullIfNotPresent, v1.PullNever:
		default:
			errs = append(errs, field.NotSupported(p.Child("imagePullPolicy"), c.ImagePullPolicy,
				[]string{string(v1.PullAlways), string(v1.PullIfNotPresent), string(v1.PullNever)}))
		}
		ports := map[string]bool{}
		for j, port := range c.Ports {
			pp := p.Child("ports").Index(j)
			for _, msg := range validation.IsValidPortNum(int(port.ContainerPort)) {
				errs = append(errs, field.Invalid(pp.Child("containerPort"), port.ContainerPort, msg))
			}
			if port.HostPort != 0 {
				for _, msg := range validation.IsValidPortNum(int(port.HostPort)) {
					errs = append(errs, field.Invalid(pp.Child("hostPort"), port.HostPort, msg))
				}
			}
			if port.Name != "" {
				for _, msg := range validation.IsValidPortName(port.Name) {
					errs = append(errs, field.Invalid(pp.Child("name"), port.Name, msg))
				}
				if ports[port.Name] {
					errs = append(errs, field.Duplicate(pp.Child("name"), port.Name))
				}
				ports[port.Name] = true
			}
			switch port.Protocol {
			case v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
			default:
				errs = append(errs, field.NotSupported(pp.Child("protocol"), port.Protocol, []string{"TCP", "UDP", "SCTP"}))
			}
		}
		for j, m := range c.VolumeMounts {
			mp := p.Child("volumeMounts").Index(j)
			if !volumes[m.Name] {
				errs = append(errs, field.NotFound(mp.Child("name"), m.Name))
			}
			if !strings.HasPrefix(m.MountPath, "/") {
				errs = append(errs, field.Invalid(mp.Child("mountPath"), m.MountPath, "must be an absolute path"))
			}
		}
		// Environment variable names follow the API's current rule
		// (relaxed validation, GA in v1.34): printable ASCII but '='.
		for j, e := range c.Env {
			for _, msg := range validation.IsRelaxedEnvVarName(e.Name) {
				errs = append(errs, field.Invalid(p.Child("env").Index(j).Child("name"), e.Name, msg))
			}
		}
		for j, from := range c.EnvFrom {
			if from.Prefix == "" {
				continue
			}
			for _, msg := range validation.IsRelaxedEnvVarName(from.Prefix) {
				errs = append(errs, field.Invalid(p.Child("envFrom").Index(j).Child("prefix"), from.Prefix, msg))
			}
		}
		for name, limit := range c.Resources.Limits {
			if req, ok := c.Resources.Requests[name]; ok && req.Cmp(limit) > 0 {
				errs = append(errs, field.Invalid(p.Child("resources", "requests").Key(string(name)), req.String(),
					fmt.Sprintf("must be less than or equal to %s limit of %s", name, limit.String())))
			}
		}
		errs = append(errs, validateContainerSecurity(c.SecurityContext, p.Child("securityContext"), hostUsers(s))...)
		for name, q := range c.Resources.Requests {
			if q.Sign() < 0 {
				errs = append(errs, field.Invalid(p.Child("resources", "requests").Key(string(name)), q.String(), "must be greater than or equal to 0"))
			}
		}
	}
	for i := range s.InitContainers {
		check(&s.InitContainers[i], path.Child("initContainers").Index(i))
	}
	for i := range s.Containers {
		check(&s.Containers[i], path.Child("containers").Index(i))
	}
	return errs
}
