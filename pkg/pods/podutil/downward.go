package podutil

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// FieldEnv is what downward API field paths resolve against besides the
// pod itself.
type FieldEnv struct {
	NodeName string
	HostIPs  []string
	// PodIPs are the sandbox's IPs; empty before it has any.
	PodIPs []string
}

// FieldRef resolves a downward API field path (fieldRef.fieldPath).
func FieldRef(pod *v1.Pod, path string, env FieldEnv) (string, error) {
	if k, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[k], nil
	}
	if k, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[k], nil
	}
	first := func(ips []string) string {
		if len(ips) > 0 {
			return ips[0]
		}
		return ""
	}
	podIPs := env.PodIPs
	if pod.Spec.HostNetwork {
		podIPs = env.HostIPs
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "spec.nodeName":
		return env.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		return first(env.HostIPs), nil
	case "status.hostIPs":
		return strings.Join(env.HostIPs, ","), nil
	case "status.podIP":
		return first(podIPs), nil
	case "status.podIPs":
		return strings.Join(podIPs, ","), nil
	}
	return "", fmt.Errorf("unsupported field path %q", path)
}

// subscript parses prefix['key'].
func subscript(path, prefix string) (string, bool) {
	if !strings.HasPrefix(path, prefix+"['") || !strings.HasSuffix(path, "']") {
		return "", false
	}
	return path[len(prefix)+2 : len(path)-2], true
}

// formatMap renders labels or annotations as a downward API volume file
// does: key="value" lines, sorted, values quoted.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(k + "=" + strconv.Quote(m[k]))
	}
	return b.String()
}

// ResourceFieldRef resolves a resourceFieldRef against a container of the
// pod: its limit (the node's allocatable when it sets none) or request,
// divided by the divisor and rounded up, as upstream does.
func ResourceFieldRef(pod *v1.Pod, containerName string, ref *v1.ResourceFieldSelector, allocatable v1.ResourceList) (string, error) {
	name := ref.ContainerName
	if name == "" {
		name = containerName
	}
	var c *v1.Container
	for _, list := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == name {
				c = &list[i]
			}
		}
	}
	if c == nil {
		return "", fmt.Errorf("resourceFieldRef %q: no container %q in the pod", ref.Resource, name)
	}
	kind, res, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("unsupported resourceFieldRef resource %q", ref.Resource)
	}
	rn := v1.ResourceName(res)
	var q resource.Quantity
	switch kind {
	case "limits":
		if l, ok := c.Resources.Limits[rn]; ok {
			q = l
		} else if a, ok := allocatable[rn]; ok {
			q = a
		}
	case "requests":
		if r, ok := c.Resources.Requests[rn]; ok {
			q = r
		} else if l, ok := c.Resources.Limits[rn]; ok {
			// An unset request defaults to the limit.
			q = l
		}
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if rn == v1.ResourceCPU {
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	}
	return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
}
