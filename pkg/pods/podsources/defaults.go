package podsources

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// setDefaults applies every default the API server gives a v1 Pod (as
// k8s.io/kubernetes v1.37 does with its default feature gates: pod-level
// resources are defaulted at admission, not here; no h2c probe protocol).
// A static pod then runs exactly like the same pod created through the
// API, and hashes to the UID the upstream kubelet gives it (static.go): a
// default missing here would change that UID. The API server's defaulting
// code is not available as a library.
func setDefaults(pod *v1.Pod) {
	s := &pod.Spec
	if s.TerminationGracePeriodSeconds != nil && *s.TerminationGracePeriodSeconds < 0 {
		s.TerminationGracePeriodSeconds = new(int64(1))
	}
	for _, cs := range [][]v1.Container{s.Containers, s.InitContainers} {
		for i := range cs {
			requestsFromLimits(&cs[i].Resources)
		}
	}
	if s.EnableServiceLinks == nil {
		s.EnableServiceLinks = new(v1.DefaultEnableServiceLinks)
	}
	if s.HostNetwork {
		// Host-network pods expose their container ports on the node.
		for _, cs := range [][]v1.Container{s.Containers, s.InitContainers} {
			for i := range cs {
				for j := range cs[i].Ports {
					if cs[i].Ports[j].HostPort == 0 {
						cs[i].Ports[j].HostPort = cs[i].Ports[j].ContainerPort
					}
				}
			}
		}
	}
	defaultPodSpec(s)
	for i := range s.Volumes {
		defaultVolume(&s.Volumes[i])
	}
	for i := range s.InitContainers {
		defaultContainer(&s.InitContainers[i])
	}
	for i := range s.Containers {
		defaultContainer(&s.Containers[i])
	}
	for i := range s.EphemeralContainers {
		defaultContainer((*v1.Container)(&s.EphemeralContainers[i].EphemeralContainerCommon))
	}
	roundUp(s.Overhead)
	if s.Resources != nil {
		roundUp(s.Resources.Limits, s.Resources.Requests)
	}
	defaultPodStatus(&pod.Status)
}

// requestsFromLimits makes a limit without a request its request too (a
// Pod only: templates keep theirs unset).
func requestsFromLimits(r *v1.ResourceRequirements) {
	if r.Limits == nil {
		return
	}
	if r.Requests == nil {
		r.Requests = v1.ResourceList{}
	}
	for name, limit := range r.Limits {
		if _, ok := r.Requests[name]; !ok {
			r.Requests[name] = limit.DeepCopy()
		}
	}
}

func defaultPodSpec(s *v1.PodSpec) {
	// serviceAccount is the deprecated alias of serviceAccountName; the
	// API keeps the two equal, the newer winning.
	if s.ServiceAccountName == "" {
		s.ServiceAccountName = s.DeprecatedServiceAccount
	}
	s.DeprecatedServiceAccount = s.ServiceAccountName
	if s.DNSPolicy == "" {
		s.DNSPolicy = v1.DNSClusterFirst
	}
	if s.RestartPolicy == "" {
		s.RestartPolicy = v1.RestartPolicyAlways
	}
	if s.SecurityContext == nil {
		s.SecurityContext = &v1.PodSecurityContext{}
	}
	if s.TerminationGracePeriodSeconds == nil {
		s.TerminationGracePeriodSeconds = new(int64(v1.DefaultTerminationGracePeriodSeconds))
	}
	if s.SchedulerName == "" {
		s.SchedulerName = v1.DefaultSchedulerName
	}
}

// roundUp rounds every quantity up to a thousandth, as the API does (a
// request of 0.1m becomes 1m).
func roundUp(lists ...v1.ResourceList) {
	for _, l := range lists {
		for name, q := range l {
			q.RoundUp(resource.Milli)
			l[name] = q
		}
	}
}

func defaultContainer(c *v1.Container) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = podutil.DefaultPullPolicy(c.Image)
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = v1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = v1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = v1.ProtocolTCP
		}
	}
	for i := range c.Env {
		if f := c.Env[i].ValueFrom; f != nil {
			defaultFieldRef(f.FieldRef)
			if f.FileKeyRef != nil && f.FileKeyRef.Optional == nil {
				f.FileKeyRef.Optional = new(false)
			}
		}
	}
	roundUp(c.Resources.Limits, c.Resources.Requests)
	for _, p := range []*v1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		defaultProbe(p)
	}
	if c.Lifecycle != nil {
		for _, h := range []*v1.LifecycleHandler{c.Lifecycle.PostStart, c.Lifecycle.PreStop} {
			if h != nil {
				defaultHTTPGet(h.HTTPGet)
			}
		}
	}
}

func defaultFieldRef(f *v1.ObjectFieldSelector) {
	if f != nil && f.APIVersion == "" {
		f.APIVersion = "v1"
	}
}

func defaultProbe(p *v1.Probe) {
	if p == nil {
		return
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = 1
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = 10
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = 3
	}
	defaultHTTPGet(p.HTTPGet)
	if p.GRPC != nil && p.GRPC.Service == nil {
		p.GRPC.Service = new("")
	}
}

func defaultHTTPGet(g *v1.HTTPGetAction) {
	if g == nil {
		return
	}
	if g.Path == "" {
		g.Path = "/"
	}
	if g.Scheme == "" {
		g.Scheme = v1.URISchemeHTTP
	}
}

func defaultPodStatus(s *v1.PodStatus) {
	// podIP and podIPs agree, podIP winning.
	switch {
	case s.PodIP != "" && (len(s.PodIPs) == 0 || s.PodIPs[0].IP != s.PodIP):
		s.PodIPs = []v1.PodIP{{IP: s.PodIP}}
	case s.PodIP == "" && len(s.PodIPs) > 0:
		s.PodIP = s.PodIPs[0].IP
	}
	for _, cs := range [][]v1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses, s.EphemeralContainerStatuses} {
		for i := range cs {
			roundUp(cs[i].AllocatedResources)
			if r := cs[i].Resources; r != nil {
				roundUp(r.Limits, r.Requests)
			}
		}
	}
	roundUp(s.AllocatedResources)
	if s.Resources != nil {
		roundUp(s.Resources.Limits, s.Resources.Requests)
	}
}

func defaultVolume(v *v1.Volume) {
	if v.VolumeSource == (v1.VolumeSource{}) {
		// An empty volume source means an emptyDir, as in the API.
		v.EmptyDir = &v1.EmptyDirVolumeSource{}
	}
	if img := v.Image; img != nil && img.PullPolicy == "" {
		img.PullPolicy = podutil.DefaultPullPolicy(img.Reference)
	}
	if h := v.HostPath; h != nil && h.Type == nil {
		h.Type = new(v1.HostPathUnset)
	}
	if s := v.Secret; s != nil && s.DefaultMode == nil {
		s.DefaultMode = new(v1.SecretVolumeSourceDefaultMode)
	}
	if c := v.ConfigMap; c != nil && c.DefaultMode == nil {
		c.DefaultMode = new(v1.ConfigMapVolumeSourceDefaultMode)
	}
	if d := v.DownwardAPI; d != nil {
		if d.DefaultMode == nil {
			d.DefaultMode = new(v1.DownwardAPIVolumeSourceDefaultMode)
		}
		for i := range d.Items {
			defaultFieldRef(d.Items[i].FieldRef)
		}
	}
	if p := v.Projected; p != nil {
		defaultProjected(p)
	}
	if e := v.Ephemeral; e != nil && e.VolumeClaimTemplate != nil {
		spec := &e.VolumeClaimTemplate.Spec
		if spec.VolumeMode == nil {
			spec.VolumeMode = new(v1.PersistentVolumeFilesystem)
		}
		roundUp(spec.Resources.Limits, spec.Resources.Requests)
	}
	defaultLegacyVolume(&v.VolumeSource)
}

func defaultProjected(p *v1.ProjectedVolumeSource) {
	if p.DefaultMode == nil {
		p.DefaultMode = new(v1.ProjectedVolumeSourceDefaultMode)
	}
	for i := range p.Sources {
		if d := p.Sources[i].DownwardAPI; d != nil {
			for j := range d.Items {
				defaultFieldRef(d.Items[j].FieldRef)
			}
		}
		if t := p.Sources[i].ServiceAccountToken; t != nil && t.ExpirationSeconds == nil {
			t.ExpirationSeconds = new(int64(3600))
		}
	}
}

// defaultLegacyVolume fills the defaults of the in-tree volume types
// nodelet refuses to mount: they count in the static pod's UID all the
// same.
func defaultLegacyVolume(v *v1.VolumeSource) {
	if i := v.ISCSI; i != nil && i.ISCSIInterface == "" {
		i.ISCSIInterface = "default"
	}
	if r := v.RBD; r != nil {
		if r.RBDPool == "" {
			r.RBDPool = "rbd"
		}
		if r.RadosUser == "" {
			r.RadosUser = "admin"
		}
		if r.Keyring == "" {
			r.Keyring = "/etc/ceph/keyring"
		}
	}
	if a := v.AzureDisk; a != nil {
		if a.CachingMode == nil {
			a.CachingMode = new(v1.AzureDataDiskCachingReadWrite)
		}
		if a.FSType == nil {
			a.FSType = new("ext4")
		}
		if a.ReadOnly == nil {
			a.ReadOnly = new(false)
		}
		if a.Kind == nil {
			a.Kind = new(v1.AzureSharedBlobDisk)
		}
	}
	if s := v.ScaleIO; s != nil {
		if s.StorageMode == "" {
			s.StorageMode = "ThinProvisioned"
		}
		if s.FSType == "" {
			s.FSType = "xfs"
		}
	}
}
