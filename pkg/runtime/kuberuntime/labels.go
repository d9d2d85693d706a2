package kuberuntime

import (
	"encoding/json"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// Label and annotation keys on sandboxes and containers. The pod and
// container name keys are upstream's, so runtime tools (crictl, ctr) show
// nodelet's pods as they show the kubelet's. Everything else nodelet needs
// to rebuild a pod's status after a restart is stored here too: nodelet
// keeps no checkpoint of its own.
const (
	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelContainerName = "io.kubernetes.container.name"
	// labelContainerHash is where the container hash is recorded: an
	// annotation, as the upstream kubelet records and reads it (so a node
	// moves between them without restarts), and a label too, so that
	// `crictl ps --label` finds containers by spec version (and as
	// nodelet recorded it before).
	labelContainerHash = "io.kubernetes.container.hash"

	annotationRestartCount             = "io.kubernetes.container.restartCount"
	annotationTerminationMessagePath   = "io.kubernetes.container.terminationMessagePath"
	annotationTerminationMessagePolicy = "io.kubernetes.container.terminationMessagePolicy"
	annotationPreStopHandler           = "io.kubernetes.container.preStopHandler"
	annotationContainerPorts           = "io.kubernetes.container.ports"
	annotationPodGracePeriod           = "io.kubernetes.pod.terminationGracePeriod"
)

func sandboxLabels(pod *v1.Pod) map[string]string {
	l := make(map[string]string, len(pod.Labels)+3)
	for k, v := range pod.Labels {
		l[k] = v
	}
	l[labelPodName] = pod.Name
	l[labelPodNamespace] = pod.Namespace
	l[LabelPodUID] = string(pod.UID)
	return l
}

func sandboxAnnotations(pod *v1.Pod) map[string]string {
	a := make(map[string]string, len(pod.Annotations))
	for k, v := range pod.Annotations {
		a[k] = v
	}
	return a
}

func containerLabels(pod *v1.Pod, c *v1.Container) map[string]string {
	return map[string]string{
		labelPodName:       pod.Name,
		labelPodNamespace:  pod.Namespace,
		LabelPodUID:        string(pod.UID),
		LabelContainerName: c.Name,
		labelContainerHash: HashContainer(c),
	}
}

func containerAnnotations(pod *v1.Pod, c *v1.Container, restartCount int) map[string]string {
	a := map[string]string{
		labelContainerHash:                 HashContainer(c),
		annotationRestartCount:             strconv.Itoa(restartCount),
		annotationTerminationMessagePath:   c.TerminationMessagePath,
		annotationTerminationMessagePolicy: string(c.TerminationMessagePolicy),
	}
	if pod.DeletionGracePeriodSeconds != nil {
		a[annotationPodGracePeriod] = strconv.FormatInt(*pod.DeletionGracePeriodSeconds, 10)
	} else if pod.Spec.TerminationGracePeriodSeconds != nil {
		a[annotationPodGracePeriod] = strconv.FormatInt(*pod.Spec.TerminationGracePeriodSeconds, 10)
	}
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		if b, err := json.Marshal(c.Lifecycle.PreStop); err == nil {
			a[annotationPreStopHandler] = string(b)
		}
	}
	if len(c.Ports) > 0 {
		if b, err := json.Marshal(c.Ports); err == nil {
			a[annotationContainerPorts] = string(b)
		}
	}
	return a
}

// podIdentity is what the labels say about the pod an object belongs to.
type podIdentity struct {
	UID       types.UID
	Name      string
	Namespace string
}

func podIdentityFromLabels(l map[string]string) (podIdentity, bool) {
	uid, ok := l[LabelPodUID]
	if !ok || uid == "" {
		return podIdentity{}, false
	}
	return podIdentity{UID: types.UID(uid), Name: l[labelPodName], Namespace: l[labelPodNamespace]}, true
}

// containerInfo is what a container's annotations say about it.
type containerInfo struct {
	RestartCount             int
	TerminationMessagePath   string
	TerminationMessagePolicy v1.TerminationMessagePolicy
	PodGracePeriod           *int64
	PreStop                  *v1.LifecycleHandler
}

func containerInfoFromAnnotations(a map[string]string) containerInfo {
	var info containerInfo
	if s, ok := a[annotationRestartCount]; ok {
		n, err := strconv.Atoi(s)
		if err != nil {
			klog.InfoS("Ignoring unparsable restart count annotation", "value", s)
		}
		info.RestartCount = n
	}
	info.TerminationMessagePath = a[annotationTerminationMessagePath]
	info.TerminationMessagePolicy = v1.TerminationMessagePolicy(a[annotationTerminationMessagePolicy])
	if s, ok := a[annotationPodGracePeriod]; ok {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			info.PodGracePeriod = &n
		}
	}
	if s, ok := a[annotationPreStopHandler]; ok {
		h := &v1.LifecycleHandler{}
		if err := json.Unmarshal([]byte(s), h); err == nil {
			info.PreStop = h
		}
	}
	return info
}

// recordedHash is the container hash a container was created with: the
// annotation (upstream's and nodelet's), else the label (nodelet's
// containers from before it wrote the annotation).
func recordedHash(labels, annotations map[string]string) string {
	if h, ok := annotations[labelContainerHash]; ok {
		return h
	}
	return labels[labelContainerHash]
}
