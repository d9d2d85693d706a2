package config

import (
	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/podutil"
)

// setDefaults applies the defaults the API server would give a pod, so a
// static pod behaves exactly like the same pod created through the API.
// The API server's defaulting code is not available as a library; these
// are the rules it applies to the fields nodelet uses.
func setDefaults(pod *v1.Pod) {
	s := &pod.Spec
	if s.RestartPolicy == "" {
		s.RestartPolicy = v1.RestartPolicyAlways
	}
	if s.DNSPolicy == "" {
		s.DNSPolicy = v1.DNSClusterFirst
	}
	if s.TerminationGracePeriodSeconds == nil {
		g := int64(v1.DefaultTerminationGracePeriodSeconds)
		s.TerminationGracePeriodSeconds = &g
	}
	if s.SchedulerName == "" {
		s.SchedulerName = v1.DefaultSchedulerName
	}
	if s.EnableServiceLinks == nil {
		t := v1.DefaultEnableServiceLinks
		s.EnableServiceLinks = &t
	}
	if s.SecurityContext == nil {
		s.SecurityContext = &v1.PodSecurityContext{}
	}
	if s.HostNetwork {
		// Host-network pods expose their container ports on the node.
		for _, cs := range [][]v1.Container{s.InitContainers, s.Containers} {
			for i := range cs {
				for j := range cs[i].Ports {
					if cs[i].Ports[j].HostPort == 0 {
						cs[i].Ports[j].HostPort = cs[i].Ports[j].ContainerPort
					}
				}
			}
		}
	}
	for i := range s.InitContainers {
		defaultContainer(&s.InitContainers[i])
	}
	for i := range s.Containers {
		defaultContainer(&s.Containers[i])
	}
	for i := range s.EphemeralContainers {
		c := v1.Container(s.EphemeralContainers[i].EphemeralContainerCommon)
		defaultContainer(&c)
		s.EphemeralContainers[i].EphemeralContainerCommon = v1.EphemeralContainerCommon(c)
	}
	for i := range s.Volumes {
		defaultVolume(&s.Volumes[i])
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
		if f := c.Env[i].ValueFrom; f != nil && f.FieldRef != nil && f.FieldRef.APIVersion == "" {
			f.FieldRef.APIVersion = "v1"
		}
	}
	for _, p := range []*v1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		defaultProbe(p)
	}
	for _, h := range lifecycleHandlers(c) {
		if h.HTTPGet != nil {
			defaultHTTPGet(h.HTTPGet)
		}
	}
}

func lifecycleHandlers(c *v1.Container) []*v1.LifecycleHandler {
	if c.Lifecycle == nil {
		return nil
	}
	var out []*v1.LifecycleHandler
	if c.Lifecycle.PostStart != nil {
		out = append(out, c.Lifecycle.PostStart)
	}
	if c.Lifecycle.PreStop != nil {
		out = append(out, c.Lifecycle.PreStop)
	}
	return out
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
	if p.HTTPGet != nil {
		defaultHTTPGet(p.HTTPGet)
	}
}

func defaultHTTPGet(g *v1.HTTPGetAction) {
	if g.Path == "" {
		g.Path = "/"
	}
	if g.Scheme == "" {
		g.Scheme = v1.URISchemeHTTP
	}
}

func defaultVolume(v *v1.Volume) {
	switch {
	case v.HostPath != nil:
		if v.HostPath.Type == nil {
			t := v1.HostPathUnset
			v.HostPath.Type = &t
		}
	case v.Secret != nil:
		if v.Secret.DefaultMode == nil {
			m := v1.SecretVolumeSourceDefaultMode
			v.Secret.DefaultMode = &m
		}
	case v.ConfigMap != nil:
		if v.ConfigMap.DefaultMode == nil {
			m := v1.ConfigMapVolumeSourceDefaultMode
			v.ConfigMap.DefaultMode = &m
		}
	case v.DownwardAPI != nil:
		if v.DownwardAPI.DefaultMode == nil {
			m := v1.DownwardAPIVolumeSourceDefaultMode
			v.DownwardAPI.DefaultMode = &m
		}
	case v.Projected != nil:
		if v.Projected.DefaultMode == nil {
			m := v1.ProjectedVolumeSourceDefaultMode
			v.Projected.DefaultMode = &m
		}
	case v.EmptyDir != nil:
	}
	if v.VolumeSource == (v1.VolumeSource{}) {
		// An empty volume source means an emptyDir, as in the API.
		v.EmptyDir = &v1.EmptyDirVolumeSource{}
	}
}
