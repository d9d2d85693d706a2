// Package podutil holds the small facts about pods that every stage of the
// pipeline needs and that must agree everywhere: a pod's full name, whether
// it is static or a mirror, and the annotation keys nodelet reads and writes.
package podutil

import (
	"fmt"
	"strings"

	"github.com/distribution/reference"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Annotation keys shared with the upstream kubelet, so that tools and API
// clients read nodelet's pods the same way.
const (
	// ConfigSourceAnnotationKey names the source a pod came from: file, http or api.
	ConfigSourceAnnotationKey = "kubernetes.io/config.source"
	// ConfigHashAnnotationKey carries the static pod's content hash (its UID).
	ConfigHashAnnotationKey = "kubernetes.io/config.hash"
	// ConfigMirrorAnnotationKey marks a mirror pod with its static pod's hash.
	ConfigMirrorAnnotationKey = "kubernetes.io/config.mirror"
	// ConfigFirstSeenAnnotationKey records when nodelet first saw the pod.
	ConfigFirstSeenAnnotationKey = "kubernetes.io/config.seen"
)

// Source names.
const (
	FileSource = "file"
	HTTPSource = "http"
	APISource  = "api"
)

// FullName is the name a pod is unique by on a node: name_namespace.
func FullName(pod *v1.Pod) string { return BuildFullName(pod.Name, pod.Namespace) }

// BuildFullName joins a name and a namespace the way FullName does.
func BuildFullName(name, namespace string) string { return name + "_" + namespace }

// ParseFullName splits a full name back into name and namespace.
func ParseFullName(fullName string) (name, namespace string, err error) {
	// Neither names nor namespaces may contain "_".
	parts := strings.Split(fullName, "_")
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		return "", "", fmt.Errorf("pod full name %q is not name_namespace", fullName)
	}
	return parts[0], parts[1], nil
}

// Source returns the config source a pod was annotated with.
func Source(pod *v1.Pod) string { return pod.Annotations[ConfigSourceAnnotationKey] }

// IsStatic reports whether the pod came from a local source (file or
// http) rather than the API server.
func IsStatic(pod *v1.Pod) bool {
	s := Source(pod)
	return s != "" && s != APISource
}

// IsMirror reports whether the pod is the API server's mirror of a static pod.
func IsMirror(pod *v1.Pod) bool {
	_, ok := pod.Annotations[ConfigMirrorAnnotationKey]
	return ok
}

// IsMirrorOf reports whether mirror is the current mirror of pod.
func IsMirrorOf(mirror, pod *v1.Pod) bool {
	return FullName(mirror) == FullName(pod) &&
		mirror.Annotations[ConfigMirrorAnnotationKey] == pod.Annotations[ConfigHashAnnotationKey]
}

// Ref formats a pod for logs and errors as namespace/name.
func Ref(pod *v1.Pod) string {
	if pod == nil {
		return "<nil>"
	}
	return pod.Namespace + "/" + pod.Name
}

// UIDs collects the UIDs of pods into a set.
func UIDs(pods []*v1.Pod) map[types.UID]bool {
	out := make(map[types.UID]bool, len(pods))
	for _, p := range pods {
		out[p.UID] = true
	}
	return out
}

// IsHostNetwork reports whether the pod uses the node's network namespace.
func IsHostNetwork(pod *v1.Pod) bool { return pod.Spec.HostNetwork }

// GracePeriodSeconds is the pod's termination grace period as the pod asks
// for it: deletionGracePeriodSeconds once it is being deleted, else the
// spec's value, else the API default of 30 seconds.
func GracePeriodSeconds(pod *v1.Pod) int64 {
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		return *pod.DeletionGracePeriodSeconds
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		return *pod.Spec.TerminationGracePeriodSeconds
	default:
		return v1.DefaultTerminationGracePeriodSeconds
	}
}

// IsRestartableInitContainer reports whether an init container is a sidecar
// (restartPolicy Always): it keeps running beside the app containers.
func IsRestartableInitContainer(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// DefaultPullPolicy is the API's pull policy for a container that sets
// none: Always for :latest or an untagged image, IfNotPresent otherwise
// (including images pinned by digest).
func DefaultPullPolicy(image string) v1.PullPolicy {
	// The API server parses the reference as the docker tools do: an
	// untagged, undigested image means :latest, and one it cannot parse
	// has no tag.
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return v1.PullIfNotPresent
	}
	tagged, hasTag := named.(reference.Tagged)
	_, hasDigest := named.(reference.Digested)
	if (hasTag && tagged.Tag() == "latest") || (!hasTag && !hasDigest) {
		return v1.PullAlways
	}
	return v1.PullIfNotPresent
}

// QOSClass classifies a pod: Guaranteed when every container has equal,
// non-zero cpu and memory requests and limits; BestEffort when none sets
// any; Burstable otherwise. Pod-level resources, where the pod has them,
// decide the class alone, as upstream computes it.
func QOSClass(pod *v1.Pod) v1.PodQOSClass {
	var q qosTally
	if pod.Spec.Resources != nil {
		q.add(pod.Spec.Resources)
		return q.class()
	}
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			q.add(&cs[i].Resources)
		}
	}
	return q.class()
}

// qosTally gathers what decides a QoS class from resource requirements.
type qosTally struct{ anySet, notGuaranteed bool }

func (q *qosTally) add(r *v1.ResourceRequirements) {
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		req, hasReq := r.Requests[name]
		lim, hasLim := r.Limits[name]
		if (hasReq && !req.IsZero()) || (hasLim && !lim.IsZero()) {
			q.anySet = true
		}
		// A missing request defaults to the limit.
		if !hasLim || lim.IsZero() || (hasReq && req.Cmp(lim) != 0) {
			q.notGuaranteed = true
		}
	}
}

func (q qosTally) class() v1.PodQOSClass {
	switch {
	case !q.anySet:
		return v1.PodQOSBestEffort
	case !q.notGuaranteed:
		return v1.PodQOSGuaranteed
	}
	return v1.PodQOSBurstable
}

// IsExtendedResourceName reports whether name is an extended resource, as
// the API server and upstream's kubelet have it: domain-prefixed outside
// kubernetes.io, and a valid name once a quota's "requests." is put in
// front.
func IsExtendedResourceName(name v1.ResourceName) bool {
	s := string(name)
	if !strings.Contains(s, "/") || strings.Contains(s, v1.ResourceDefaultNamespacePrefix) || strings.HasPrefix(s, v1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(v1.DefaultResourceRequestsPrefix+s)) == 0
}

// IsTerminal reports whether a pod phase is final: Succeeded or Failed.
func IsTerminal(p v1.PodPhase) bool { return p == v1.PodSucceeded || p == v1.PodFailed }

// IsPodReady reports whether the status's Ready condition is True.
func IsPodReady(s v1.PodStatus) bool {
	for _, c := range s.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// ImageVolume is the image source of the pod's volume with the name, or
// nil when that volume is of another kind (or there is none).
func ImageVolume(pod *v1.Pod, name string) *v1.ImageVolumeSource {
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == name {
			return pod.Spec.Volumes[i].Image
		}
	}
	return nil
}

// MarkTerminatedByKubelet sets the DisruptionTarget condition that says
// the node agent itself stopped the pod (eviction, node shutdown), with
// the message shown to the user.
func MarkTerminatedByKubelet(s *v1.PodStatus, pod *v1.Pod, message string) {
	cond := v1.PodCondition{
		Type: v1.DisruptionTarget, Status: v1.ConditionTrue, ObservedGeneration: pod.Generation,
		Reason: v1.PodReasonTerminationByKubelet, Message: message,
	}
	for i := range s.Conditions {
		if s.Conditions[i].Type == v1.DisruptionTarget {
			s.Conditions[i] = cond
			return
		}
	}
	s.Conditions = append(s.Conditions, cond)
}

// IsKubeletCondition reports whether the node agent owns a pod condition
// type: it computes it on every status, and drops it when it no longer
// holds (the resize conditions come and go).
func IsKubeletCondition(t v1.PodConditionType) bool {
	switch t {
	case v1.PodScheduled, v1.PodReady, v1.PodInitialized, v1.ContainersReady, v1.PodReadyToStartContainers,
		v1.PodResizePending, v1.PodResizeInProgress:
		return true
	}
	return false
}

// SystemCriticalPriority is upstream's threshold of critical pods
// (system-cluster-critical; system-node-critical is above it).
const SystemCriticalPriority = 2 * 1000000000

// IsCritical reports whether the node must spare the pod: static and
// mirror pods (they are not admitted again) and pods of a system-critical
// priority, as upstream's IsCriticalPod.
func IsCritical(pod *v1.Pod) bool {
	return IsStatic(pod) || IsMirror(pod) || (pod.Spec.Priority != nil && *pod.Spec.Priority >= SystemCriticalPriority)
}

// ContainerShouldRestart says whether a container that exited with
// exitCode is started again, as upstream decides it: the first of its
// restartPolicyRules whose exit codes match (action Restart), else its
// own restartPolicy, else the pod's.
func ContainerShouldRestart(c *v1.Container, spec *v1.PodSpec, exitCode int32) bool {
	if c.RestartPolicy != nil {
		for _, rule := range c.RestartPolicyRules {
			if rule.ExitCodes != nil && exitCodesMatch(rule.ExitCodes, exitCode) {
				// Restart is the only action the API accepts today;
				// RestartAllContainers is behind a gate that is off.
				if rule.Action == v1.ContainerRestartRuleActionRestart {
					return true
				}
				break
			}
		}
		switch *c.RestartPolicy {
		case v1.ContainerRestartPolicyAlways:
			return true
		case v1.ContainerRestartPolicyOnFailure:
			return exitCode != 0
		case v1.ContainerRestartPolicyNever:
			return false
		}
	}
	switch spec.RestartPolicy {
	case v1.RestartPolicyNever:
		return false
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	}
	return true
}

func exitCodesMatch(r *v1.ContainerRestartRuleOnExitCodes, code int32) bool {
	in := false
	for _, v := range r.Values {
		if v == code {
			in = true
		}
	}
	switch r.Operator {
	case v1.ContainerRestartRuleOnExitCodesOpIn:
		return in
	case v1.ContainerRestartRuleOnExitCodesOpNotIn:
		return !in
	}
	return false
}

// RequestChanged reports whether a container's request of the resource
// differs between two versions of a pod (a resize).
func RequestChanged(a, b *v1.Pod, name v1.ResourceName) bool {
	old := map[string]resource.Quantity{}
	for _, c := range b.Spec.Containers {
		old[c.Name] = c.Resources.Requests[name]
	}
	for _, c := range a.Spec.Containers {
		q, o := c.Resources.Requests[name], old[c.Name]
		if q.Cmp(o) != 0 {
			return true
		}
	}
	return false
}

// FindContainer is the pod's container (init, regular or ephemeral: the
// names are unique across the three) named name, or nil.
func FindContainer(pod *v1.Pod, name string) *v1.Container {
	if pod == nil {
		return nil
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == name {
			c := v1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
			return &c
		}
	}
	return nil
}
