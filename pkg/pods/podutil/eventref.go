package podutil

import v1 "k8s.io/api/core/v1"

// ContainerRef points events at one container of a pod, the way kubectl
// describe groups them; a nil container points at the pod.
func ContainerRef(pod *v1.Pod, c *v1.Container) *v1.ObjectReference {
	ref := &v1.ObjectReference{
		Kind: "Pod", APIVersion: "v1", Name: pod.Name, Namespace: pod.Namespace,
		UID: pod.UID, ResourceVersion: pod.ResourceVersion,
	}
	if c != nil {
		ref.FieldPath = FieldPath(pod, c.Name)
	}
	return ref
}

// PodRef points events at a pod.
func PodRef(pod *v1.Pod) *v1.ObjectReference { return ContainerRef(pod, nil) }

// FieldPath names a container in the pod spec, as events and the API's
// object references do.
func FieldPath(pod *v1.Pod, name string) string {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return "spec.initContainers{" + name + "}"
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == name {
			return "spec.ephemeralContainers{" + name + "}"
		}
	}
	return "spec.containers{" + name + "}"
}
