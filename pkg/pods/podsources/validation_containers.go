package podsources

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The container checks of the API server's ValidatePodSpec, at v1.37, in
// its order: app containers, then init containers, each with the checks
// common to both, then what is particular to its kind.

type containerChecks struct {
	spec      *v1.PodSpec
	volumes   map[string]v1.VolumeSource // the volumes that passed their checks
	claims    map[string]bool            // the pod's resource claim names
	hostUsers bool
}

func (c containerChecks) containers(path *field.Path) field.ErrorList {
	if len(c.spec.Containers) == 0 {
		return field.ErrorList{field.Required(path, "")}
	}
	var errs field.ErrorList
	names := map[string]bool{}
	for i := range c.spec.Containers {
		ctr, p := &c.spec.Containers[i], path.Index(i)
		errs = append(errs, c.common(ctr, p)...)
		if names[ctr.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), ctr.Name))
		}
		names[ctr.Name] = true
		errs = append(errs, c.lifecycleAndProbes(ctr, p)...)
		errs = append(errs, validateRestartRules(ctr.RestartPolicy, ctr.RestartPolicyRules, p)...)
	}
	return append(errs, hostPortConflicts(c.spec.Containers, path)...)
}

func (c containerChecks) initContainers(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := map[string]bool{}
	for _, ctr := range c.spec.Containers {
		names[ctr.Name] = true
	}
	for i := range c.spec.InitContainers {
		ctr, p := &c.spec.InitContainers[i], path.Index(i)
		errs = append(errs, c.common(ctr, p)...)
		errs = append(errs, validateInitRestartPolicy(ctr.RestartPolicy, ctr.RestartPolicyRules, p)...)
		sidecar := ctr.RestartPolicy != nil && *ctr.RestartPolicy == v1.ContainerRestartPolicyAlways
		if names[ctr.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), ctr.Name))
		} else if ctr.Name != "" {
			names[ctr.Name] = true
		}
		// Init containers run one at a time: their host ports conflict only
		// within each.
		errs = append(errs, hostPortConflicts(c.spec.InitContainers[i:i+1], path)...)
		if sidecar {
			errs = append(errs, c.lifecycleAndProbes(ctr, p)...)
		} else {
			for _, f := range []struct {
				name string
				set  bool
			}{{"lifecycle", ctr.Lifecycle != nil}, {"livenessProbe", ctr.LivenessProbe != nil},
				{"readinessProbe", ctr.ReadinessProbe != nil}, {"startupProbe", ctr.StartupProbe != nil}} {
				if f.set {
					errs = append(errs, field.Forbidden(p.Child(f.name), "may not be set for init containers without restartPolicy=Always"))
				}
			}
			for j, rp := range ctr.ResizePolicy {
				if rp.RestartPolicy == v1.RestartContainer {
					errs = append(errs, field.Invalid(p.Child("resizePolicy").Index(j).Child("restartPolicy"), rp.RestartPolicy,
						"must not be set to 'RestartContainer' for non-sidecar initContainers"))
				}
			}
		}
	}
	return errs
}

// ephemeralContainerFields are those an ephemeral container may set.
var ephemeralContainerFields = map[string]bool{"Name": true, "Image": true, "Command": true, "Args": true, "WorkingDir": true,
	"EnvFrom": true, "Env": true, "VolumeMounts": true, "VolumeDevices": true, "TerminationMessagePath": true,
	"TerminationMessagePolicy": true, "ImagePullPolicy": true, "SecurityContext": true, "Stdin": true, "StdinOnce": true, "TTY": true}

// ephemeralContainers are refused on create (validatePod), but checked
// first as the API server checks them.
func (c containerChecks) ephemeralContainers(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	others, all := map[string]bool{}, map[string]bool{}
	for _, cs := range [][]v1.Container{c.spec.Containers, c.spec.InitContainers} {
		for _, ctr := range cs {
			others[ctr.Name], all[ctr.Name] = true, true
		}
	}
	for i := range c.spec.EphemeralContainers {
		ec, p := &c.spec.EphemeralContainers[i], path.Index(i)
		ctr := (*v1.Container)(&ec.EphemeralContainerCommon)
		errs = append(errs, c.common(ctr, p)...)
		if len(ctr.Image) != len(strings.TrimSpace(ctr.Image)) {
			errs = append(errs, field.Invalid(p.Child("image"), ctr.Image, "must not have leading or trailing whitespace"))
		}
		if all[ec.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), ec.Name))
		}
		all[ec.Name] = true
		if ec.TargetContainerName != "" && !others[ec.TargetContainerName] {
			errs = append(errs, field.NotFound(p.Child("targetContainerName"), ec.TargetContainerName))
		}
		v := reflect.ValueOf(ec.EphemeralContainerCommon)
		for j := 0; j < v.NumField(); j++ {
			f := v.Type().Field(j)
			if !ephemeralContainerFields[f.Name] && !v.Field(j).IsZero() {
				errs = append(errs, field.Forbidden(p.Child(strings.ToLower(f.Name[:1])+f.Name[1:]), "cannot be set for an Ephemeral Container"))
			}
		}
		for j, m := range ec.VolumeMounts {
			if m.SubPath != "" {
				errs = append(errs, field.Forbidden(p.Child("volumeMounts").Index(j).Child("subPath"), "cannot be set for an Ephemeral Container"))
			}
			if m.SubPathExpr != "" {
				errs = append(errs, field.Forbidden(p.Child("volumeMounts").Index(j).Child("subPathExpr"), "cannot be set for an Ephemeral Container"))
			}
		}
	}
	return errs
}

// common is validateContainerCommon: what every container is checked for.
func (c containerChecks) common(ctr *v1.Container, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if ctr.Name == "" {
		errs = append(errs, field.Required(path.Child("name"), ""))
	} else {
		errs = append(errs, dns1123Label(ctr.Name, path.Child("name"))...)
	}
	if ctr.Image == "" {
		errs = append(errs, field.Required(path.Child("image"), ""))
	}
	errs = append(errs, enum(string(ctr.TerminationMessagePolicy), path.Child("terminationMessagePolicy"), "File", "FallbackToLogsOnError")...)
	errs = append(errs, validatePorts(ctr.Ports, path.Child("ports"))...)
	errs = append(errs, validateEnv(ctr.Env, path.Child("env"))...)
	errs = append(errs, validateEnvFrom(ctr.EnvFrom, path.Child("envFrom"))...)
	errs = append(errs, c.mounts(ctr, path.Child("volumeMounts"))...)
	errs = append(errs, c.devices(ctr, path.Child("volumeDevices"))...)
	errs = append(errs, enum(string(ctr.ImagePullPolicy), path.Child("imagePullPolicy"), "Always", "IfNotPresent", "Never")...)
	errs = append(errs, validateRequirements(&ctr.Resources, containerResourceName, c.claims, path.Child("resources"))...)
	errs = append(errs, validateResizePolicy(ctr.ResizePolicy, c.spec.RestartPolicy, path.Child("resizePolicy"))...)
	return append(errs, validateContainerSecurity(ctr.SecurityContext, path.Child("securityContext"), c.hostUsers)...)
}

func (c containerChecks) lifecycleAndProbes(ctr *v1.Container, path *field.Path) field.ErrorList {
	grace := c.spec.TerminationGracePeriodSeconds
	var errs field.ErrorList
	if l := ctr.Lifecycle; l != nil {
		p := path.Child("lifecycle")
		if l.PostStart != nil {
			errs = append(errs, validateHandler(lifecycleHandler(l.PostStart), grace, p.Child("postStart"))...)
		}
		if l.PreStop != nil {
			errs = append(errs, validateHandler(lifecycleHandler(l.PreStop), grace, p.Child("preStop"))...)
		}
		if l.StopSignal != nil {
			errs = append(errs, validateStopSignal(*l.StopSignal, c.spec.OS, p.Child("stopSignal"))...)
		}
	}
	if pr := ctr.LivenessProbe; pr != nil {
		p := path.Child("livenessProbe")
		errs = append(errs, validateProbe(pr, grace, p)...)
		if pr.SuccessThreshold != 1 {
			errs = append(errs, field.Invalid(p.Child("successThreshold"), pr.SuccessThreshold, "must be 1"))
		}
	}
	if pr := ctr.ReadinessProbe; pr != nil {
		p := path.Child("readinessProbe")
		errs = append(errs, validateProbe(pr, grace, p)...)
		if pr.TerminationGracePeriodSeconds != nil {
			errs = append(errs, field.Invalid(p.Child("terminationGracePeriodSeconds"), pr.TerminationGracePeriodSeconds, "must not be set for readinessProbes"))
		}
	}
	if pr := ctr.StartupProbe; pr != nil {
		p := path.Child("startupProbe")
		errs = append(errs, validateProbe(pr, grace, p)...)
		if pr.SuccessThreshold != 1 {
			errs = append(errs, field.Invalid(p.Child("successThreshold"), pr.SuccessThreshold, "must be 1"))
		}
	}
	return errs
}

func validateProbe(pr *v1.Probe, grace *int64, path *field.Path) field.ErrorList {
	h := pr.ProbeHandler
	errs := validateHandler(handler{exec: h.Exec, httpGet: h.HTTPGet, tcpSocket: h.TCPSocket, grpc: h.GRPC}, grace, path)
	for _, f := range []struct {
		name string
		v    int32
	}{{"initialDelaySeconds", pr.InitialDelaySeconds}, {"timeoutSeconds", pr.TimeoutSeconds}, {"periodSeconds", pr.PeriodSeconds},
		{"successThreshold", pr.SuccessThreshold}, {"failureThreshold", pr.FailureThreshold}} {
		errs = append(errs, nonNegative(int64(f.v), path.Child(f.name))...)
	}
	if g := pr.TerminationGracePeriodSeconds; g != nil && *g <= 0 {
		errs = append(errs, field.Invalid(path.Child("terminationGracePeriodSeconds"), *g, "must be greater than 0"))
	}
	return errs
}

// handler is a probe's or a lifecycle hook's action: exactly one is set.
type handler struct {
	exec      *v1.ExecAction
	httpGet   *v1.HTTPGetAction
	tcpSocket *v1.TCPSocketAction
	grpc      *v1.GRPCAction
	sleep     *v1.SleepAction
}

func lifecycleHandler(h *v1.LifecycleHandler) handler {
	return handler{exec: h.Exec, httpGet: h.HTTPGet, tcpSocket: h.TCPSocket, sleep: h.Sleep}
}

func validateHandler(h handler, grace *int64, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	n := 0
	one := func(set bool, name string, check func(*field.Path) field.ErrorList) {
		if !set {
			return
		}
		if n > 0 {
			errs = append(errs, field.Forbidden(path.Child(name), "may not specify more than 1 handler type"))
			return
		}
		n++
		errs = append(errs, check(path.Child(name))...)
	}
	one(h.exec != nil, "exec", func(p *field.Path) field.ErrorList {
		if len(h.exec.Command) == 0 {
			return field.ErrorList{field.Required(p.Child("command"), "")}
		}
		return nil
	})
	one(h.httpGet != nil, "httpGet", func(p *field.Path) field.ErrorList { return validateHTTPGet(h.httpGet, p) })
	one(h.tcpSocket != nil, "tcpSocket", func(p *field.Path) field.ErrorList { return portNumOrName(h.tcpSocket.Port, p.Child("port")) })
	one(h.grpc != nil, "grpc", func(p *field.Path) field.ErrorList {
		return portNumOrName(intstr.FromInt32(h.grpc.Port), p.Child("port"))
	})
	one(h.sleep != nil, "sleep", func(p *field.Path) field.ErrorList {
		if grace != nil && (h.sleep.Seconds < 0 || h.sleep.Seconds > *grace) {
			return field.ErrorList{field.Invalid(p, h.sleep.Seconds, fmt.Sprintf("must be non-negative and less than terminationGracePeriodSeconds (%d)", *grace))}
		}
		return nil
	})
	if n == 0 {
		errs = append(errs, field.Required(path, "must specify a handler type"))
	}
	return errs
}

func validateHTTPGet(g *v1.HTTPGetAction, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if g.Path == "" {
		errs = append(errs, field.Required(path.Child("path"), ""))
	}
	errs = append(errs, portNumOrName(g.Port, path.Child("port"))...)
	if g.Scheme != v1.URISchemeHTTP && g.Scheme != v1.URISchemeHTTPS {
		errs = append(errs, field.NotSupported(path.Child("scheme"), g.Scheme, []string{"HTTP", "HTTPS"}))
	}
	for _, h := range g.HTTPHeaders {
		for _, msg := range validation.IsHTTPHeaderName(h.Name) {
			errs = append(errs, field.Invalid(path.Child("httpHeaders"), h.Name, msg))
		}
	}
	return errs
}

func portNumOrName(port intstr.IntOrString, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if port.Type == intstr.String {
		for _, msg := range validation.IsValidPortName(port.StrVal) {
			errs = append(errs, field.Invalid(path, port.StrVal, msg))
		}
		return errs
	}
	for _, msg := range validation.IsValidPortNum(port.IntValue()) {
		errs = append(errs, field.Invalid(path, port.IntValue(), msg))
	}
	return errs
}

// validateStopSignal: a stop signal needs the pod's OS, and one of its.
func validateStopSignal(sig v1.Signal, os *v1.PodOS, path *field.Path) field.ErrorList {
	switch {
	case os == nil:
		return field.ErrorList{field.Forbidden(path, "may not be set for containers with empty `spec.os.name`")}
	case os.Name == v1.Windows && sig != v1.SIGKILL && sig != v1.SIGTERM:
		return field.ErrorList{field.NotSupported(path, &sig, []string{string(v1.SIGKILL), string(v1.SIGTERM)})}
	case os.Name == v1.Linux && !linuxStopSignal(sig):
		return field.ErrorList{field.NotSupported[string](path, &sig, nil)}
	}
	return nil
}

// linuxStopSignal: the names the API accepts on Linux.
func linuxStopSignal(sig v1.Signal) bool {
	switch s := strings.TrimPrefix(string(sig), "SIG"); s {
	case "ABRT", "ALRM", "BUS", "CHLD", "CLD", "CONT", "FPE", "HUP", "ILL", "INT", "IO", "IOT", "KILL", "PIPE", "POLL",
		"PROF", "PWR", "QUIT", "SEGV", "STKFLT", "STOP", "SYS", "TERM", "TRAP", "TSTP", "TTIN", "TTOU", "URG", "USR1",
		"USR2", "VTALRM", "WINCH", "XCPU", "XFSZ", "RTMIN", "RTMAX":
		return strings.HasPrefix(string(sig), "SIG")
	default:
		for i := 1; i <= 15; i++ {
			if string(sig) == fmt.Sprintf("SIGRTMIN+%d", i) || string(sig) == fmt.Sprintf("SIGRTMAX-%d", i) {
				return true
			}
		}
	}
	return false
}

var restartPolicies = []string{"Always", "Never", "OnFailure"}

// validateRestartRules: an app container's restartPolicy and rules.
func validateRestartRules(policy *v1.ContainerRestartPolicy, rules []v1.ContainerRestartRule, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if policy == nil {
		if len(rules) == 0 {
			return nil
		}
		errs = append(errs, field.Required(path.Child("restartPolicy"), "must specify restartPolicy when restart rules are used"))
	} else if p := string(*policy); p != "Always" && p != "Never" && p != "OnFailure" {
		errs = append(errs, field.NotSupported(path.Child("restartPolicy"), *policy, restartPolicies))
	}
	if len(rules) > 20 {
		errs = append(errs, field.TooMany(path.Child("restartPolicyRules"), len(rules), 20))
	}
	for i, r := range rules {
		p := path.Child("restartPolicyRules").Index(i)
		if r.Action != v1.ContainerRestartRuleActionRestart && r.Action != "RestartAllContainers" {
			errs = append(errs, field.NotSupported(p.Child("action"), r.Action, []string{"Restart", "RestartAllContainers"}))
		}
		if r.ExitCodes == nil {
			errs = append(errs, field.Required(p.Child("exitCodes"), "must be specified"))
			continue
		}
		if op := r.ExitCodes.Operator; op != v1.ContainerRestartRuleOnExitCodesOpIn && op != v1.ContainerRestartRuleOnExitCodesOpNotIn {
			errs = append(errs, field.NotSupported(p.Child("exitCodes", "operator"), op, []string{"In", "NotIn"}))
		}
		if len(r.ExitCodes.Values) > 255 {
			errs = append(errs, field.TooMany(p.Child("exitCodes", "values"), len(r.ExitCodes.Values), 255))
		}
	}
	return errs
}

func validateInitRestartPolicy(policy *v1.ContainerRestartPolicy, rules []v1.ContainerRestartRule, path *field.Path) field.ErrorList {
	if policy == nil {
		if len(rules) > 0 {
			return field.ErrorList{field.Required(path.Child("restartPolicy"), "must specify restartPolicy when restart rules are used")}
		}
		return nil
	}
	return validateRestartRules(policy, rules, path)
}

func hostPortConflicts(cs []v1.Container, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, c := range cs {
		for j, p := range c.Ports {
			if p.HostPort == 0 {
				continue
			}
			key := fmt.Sprintf("%s/%s/%d", p.Protocol, p.HostIP, p.HostPort)
			if seen[key] {
				errs = append(errs, field.Duplicate(path.Index(i).Child("ports").Index(j).Child("hostPort"), key))
			}
			seen[key] = true
		}
	}
	return errs
}

func validatePorts(ports []v1.ContainerPort, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := map[string]bool{}
	for i, port := range ports {
		p := path.Index(i)
		if port.Name != "" {
			if msgs := validation.IsValidPortName(port.Name); len(msgs) != 0 {
				for _, msg := range msgs {
					errs = append(errs, field.Invalid(p.Child("name"), port.Name, msg))
				}
			} else if names[port.Name] {
				errs = append(errs, field.Duplicate(p.Child("name"), port.Name))
			} else {
				names[port.Name] = true
			}
		}
		if port.ContainerPort == 0 {
			errs = append(errs, field.Required(p.Child("containerPort"), ""))
		} else {
			for _, msg := range validation.IsValidPortNum(int(port.ContainerPort)) {
				errs = append(errs, field.Invalid(p.Child("containerPort"), port.ContainerPort, msg))
			}
		}
		if port.HostPort != 0 {
			for _, msg := range validation.IsValidPortNum(int(port.HostPort)) {
				errs = append(errs, field.Invalid(p.Child("hostPort"), port.HostPort, msg))
			}
		}
		errs = append(errs, enum(string(port.Protocol), p.Child("protocol"), "SCTP", "TCP", "UDP")...)
	}
	return errs
}

func (c containerChecks) mounts(ctr *v1.Container, path *field.Path) field.ErrorList {
	devices := map[string]string{}
	for _, d := range ctr.VolumeDevices {
		devices[d.Name] = d.DevicePath
	}
	var errs field.ErrorList
	paths := map[string]bool{}
	for i, m := range ctr.VolumeMounts {
		p := path.Index(i)
		if m.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		}
		if _, ok := c.volumes[m.Name]; !ok {
			errs = append(errs, field.NotFound(p.Child("name"), m.Name))
		}
		if m.MountPath == "" {
			errs = append(errs, field.Required(p.Child("mountPath"), ""))
		}
		if paths[m.MountPath] {
			errs = append(errs, field.Invalid(p.Child("mountPath"), m.MountPath, "must be unique"))
		}
		paths[m.MountPath] = true
		if _, ok := devices[m.Name]; ok {
			errs = append(errs, field.Invalid(p.Child("name"), m.Name, "must not already exist in volumeDevices"))
		}
		if hasValue(devices, m.MountPath) {
			errs = append(errs, field.Invalid(p.Child("mountPath"), m.MountPath, "must not already exist as a path in volumeDevices"))
		}
		// Upstream names the list, not the item, for these two.
		if m.SubPath != "" {
			errs = append(errs, localDescendingPath(m.SubPath, path.Child("subPath"))...)
		}
		if m.SubPathExpr != "" {
			if m.SubPath != "" {
				errs = append(errs, field.Invalid(p.Child("subPathExpr"), m.SubPathExpr, "subPathExpr and subPath are mutually exclusive"))
			}
			errs = append(errs, localDescendingPath(m.SubPathExpr, path.Child("subPathExpr"))...)
		}
		errs = append(errs, validatePropagation(m, ctr, path.Child("mountPropagation"))...)
		errs = append(errs, validateRecursiveReadOnly(m, path.Child("recursiveReadOnly"))...)
		errs = append(errs, validateBindMountOptions(m, c.volumes, p)...)
	}
	return errs
}

func validatePropagation(m v1.VolumeMount, ctr *v1.Container, path *field.Path) field.ErrorList {
	if m.MountPropagation == nil {
		return nil
	}
	var errs field.ErrorList
	switch mp := *m.MountPropagation; mp {
	case v1.MountPropagationBidirectional, v1.MountPropagationHostToContainer, v1.MountPropagationNone:
	default:
		errs = append(errs, field.NotSupported(path, mp, []string{"Bidirectional", "HostToContainer", "None"}))
	}
	privileged := ctr.SecurityContext != nil && ctr.SecurityContext.Privileged != nil && *ctr.SecurityContext.Privileged
	if *m.MountPropagation == v1.MountPropagationBidirectional && !privileged {
		errs = append(errs, field.Forbidden(path, "Bidirectional mount propagation is available only to privileged containers"))
	}
	return errs
}

func validateRecursiveReadOnly(m v1.VolumeMount, path *field.Path) field.ErrorList {
	if m.RecursiveReadOnly == nil {
		return nil
	}
	var errs field.ErrorList
	switch rro := *m.RecursiveReadOnly; rro {
	case v1.RecursiveReadOnlyDisabled:
	case v1.RecursiveReadOnlyEnabled, v1.RecursiveReadOnlyIfPossible:
		if !m.ReadOnly {
			errs = append(errs, field.Forbidden(path, "may only be specified when readOnly is true"))
		}
		if m.MountPropagation != nil && *m.MountPropagation != v1.MountPropagationNone {
			errs = append(errs, field.Forbidden(path, "may only be specified when mountPropagation is None or not specified"))
		}
	default:
		errs = append(errs, field.NotSupported(path, rro, []string{"Disabled", "Enabled", "IfPossible"}))
	}
	return errs
}

func validateBindMountOptions(m v1.VolumeMount, vols map[string]v1.VolumeSource, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, o := range m.BindMountOptions {
		p := path.Child("bindMountOptions").Index(i)
		switch o {
		case "noexec", "nodev", "nosuid":
		default:
			errs = append(errs, field.NotSupported(p, o, []string{"nodev", "noexec", "nosuid"}))
		}
		if seen[o] {
			errs = append(errs, field.Duplicate(p, o))
		}
		seen[o] = true
	}
	if v, ok := vols[m.Name]; ok && len(m.BindMountOptions) > 0 && v.Image != nil {
		errs = append(errs, field.Invalid(path.Child("bindMountOptions"), m.BindMountOptions, "bindMountOptions may not be used with image volumes"))
	}
	return errs
}

func (c containerChecks) devices(ctr *v1.Container, path *field.Path) field.ErrorList {
	mounts := map[string]string{}
	for _, m := range ctr.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	var errs field.ErrorList
	paths, names := map[string]bool{}, map[string]bool{}
	for i, d := range ctr.VolumeDevices {
		p := path.Index(i)
		src, matched := c.volumes[d.Name]
		if d.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		}
		if names[d.Name] {
			errs = append(errs, field.Invalid(p.Child("name"), d.Name, "must be unique"))
		}
		if matched && src.PersistentVolumeClaim == nil && src.Ephemeral == nil {
			errs = append(errs, field.Invalid(p.Child("name"), d.Name, "can only use volume source type of PersistentVolumeClaim or Ephemeral for block mode"))
		}
		if !matched {
			errs = append(errs, field.NotFound(p.Child("name"), d.Name))
		}
		if d.DevicePath == "" {
			errs = append(errs, field.Required(p.Child("devicePath"), ""))
		}
		if paths[d.DevicePath] {
			errs = append(errs, field.Invalid(p.Child("devicePath"), d.DevicePath, "must be unique"))
		}
		if d.DevicePath != "" && hasBackstep(d.DevicePath) {
			errs = append(errs, field.Invalid(p.Child("devicePath"), d.DevicePath, "can not contain backsteps ('..')"))
		} else {
			paths[d.DevicePath] = true
		}
		if _, ok := mounts[d.Name]; ok {
			errs = append(errs, field.Invalid(p.Child("name"), d.Name, "must not already exist in volumeMounts"))
		}
		if hasValue(mounts, d.DevicePath) {
			errs = append(errs, field.Invalid(p.Child("devicePath"), d.DevicePath, "must not already exist as a path in volumeMounts"))
		}
		if d.Name != "" {
			names[d.Name] = true
		}
	}
	return errs
}

func hasValue(m map[string]string, v string) bool {
	for _, x := range m {
		if x == v {
			return true
		}
	}
	return false
}

func hasBackstep(p string) bool {
	for _, part := range strings.Split(filepath.ToSlash(p), "/") {
		if part == ".." {
			return true
		}
	}
	return false
}

func validateResizePolicy(ps []v1.ContainerResizePolicy, podPolicy v1.RestartPolicy, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[v1.ResourceName]bool{}
	for i, p := range ps {
		if seen[p.ResourceName] {
			errs = append(errs, field.Duplicate(path.Index(i), p.ResourceName))
		}
		seen[p.ResourceName] = true
		switch p.ResourceName {
		case v1.ResourceCPU, v1.ResourceMemory:
		case "":
			errs = append(errs, field.Required(path, ""))
		default:
			errs = append(errs, field.NotSupported(path, p.ResourceName, []string{"cpu", "memory"}))
		}
		switch p.RestartPolicy {
		case v1.NotRequired, v1.RestartContainer:
		case "":
			errs = append(errs, field.Required(path, ""))
		default:
			errs = append(errs, field.NotSupported(path, p.RestartPolicy, []string{"NotRequired", "RestartContainer"}))
		}
		if podPolicy == v1.RestartPolicyNever && p.RestartPolicy != v1.NotRequired {
			errs = append(errs, field.Invalid(path, p.RestartPolicy, "must be 'NotRequired' when pod `restartPolicy` is 'Never'"))
		}
	}
	return errs
}
