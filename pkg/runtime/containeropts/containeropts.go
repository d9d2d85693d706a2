package containeropts

import (
	"context"
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/cluster/standalone"
	"github.com/nodelet/nodelet/pkg/pods/poddirs"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
	"github.com/nodelet/nodelet/pkg/volumes/subpath"
	"github.com/nodelet/nodelet/pkg/volumes/volume"
)

// ClusterObjects are what containers get from the API server: the
// configMaps and secrets of their environment, and the services whose
// addresses go into it.
type ClusterObjects interface {
	volume.Objects
	Services(namespace string) []*v1.Service
}

// Options are what a node's container options depend on.
type Options struct {
	RootDir  string
	NodeName string
	HostIPs  []string
	// Volumes resolves container mounts; nil gives a volume manager of
	// its own, for a node without an API server.
	Volumes *volume.Manager
	// Objects is nil without an API server: no configMap, secret or
	// service reaches the environment then.
	Objects     ClusterObjects
	DNS         DNS
	Allocatable func() v1.ResourceList
	// Recorder receives warnings about what a pod asked for and did not
	// get (skipped variable names, DNS settings over the limits); nil
	// only logs them.
	Recorder record.EventRecorder
}

// Provider answers the runtime manager's questions about a container
// that depend on the node and the pod rather than the container spec:
// its environment, its mounts, and the pod's DNS and hostname.
type Provider struct {
	dirs     poddirs.Root
	nodeName string
	hostIPs  []string
	volumes  *volume.Manager
	dns      DNS
	objects  ClusterObjects
	// allocatable is what resourceFieldRef falls back to for a container
	// without a limit.
	allocatable func() v1.ResourceList
	// hostsFile is the node's /etc/hosts, the base of host-network pods'.
	hostsFile string
	recorder  record.EventRecorder
}

var _ kuberuntime.Helper = (*Provider)(nil)

// New returns the options provider for a node.
func New(o Options) *Provider {
	if o.Volumes == nil {
		o.Volumes = volume.NewManager(volume.Options{RootDir: o.RootDir, NodeName: o.NodeName, HostIPs: o.HostIPs})
	}
	if o.Allocatable == nil {
		o.Allocatable = func() v1.ResourceList { return nil }
	}
	if o.Objects == nil {
		o.Objects = standalone.API{}
	}
	if o.Recorder == nil {
		o.Recorder = &record.FakeRecorder{}
	}
	return &Provider{
		dirs: poddirs.Root(o.RootDir), nodeName: o.NodeName, hostIPs: o.HostIPs, hostsFile: "/etc/hosts",
		volumes: o.Volumes, dns: o.DNS, objects: o.Objects, allocatable: o.Allocatable, recorder: o.Recorder,
	}
}

// warn logs a problem with what a pod asked for and records it as an event.
func (o *Provider) warn(pod *v1.Pod, reason, msg string) {
	klog.InfoS("Pod configuration adjusted", "pod", klog.KObj(pod), "podUID", pod.UID, "reason", reason, "message", msg)
	o.recorder.Event(pod, v1.EventTypeWarning, reason, msg)
}

// Volumes is the volume manager container mounts resolve against.
func (o *Provider) Volumes() *volume.Manager { return o.volumes }

// PodContainerDir is where per-container files of a pod live.
func (o *Provider) PodContainerDir(uid types.UID, name string) string {
	return o.dirs.Container(uid, name)
}

// PodDNS is the pod's resolver configuration and hostname.
func (o *Provider) PodDNS(pod *v1.Pod) (*runtimeapi.DNSConfig, string, error) {
	cfg, err := o.dns.PodDNS(pod)
	if err != nil {
		return nil, "", err
	}
	for _, msg := range limitDNS(cfg) {
		o.warn(pod, "DNSConfigForming", msg)
	}
	hostname, fqdn, err := o.dns.Hostname(pod)
	if err != nil {
		return nil, "", err
	}
	if pod.Spec.SetHostnameAsFQDN != nil && *pod.Spec.SetHostnameAsFQDN && fqdn != "" {
		// The kernel's nodename holds 64 characters; upstream's message,
		// which its FailedCreatePodSandBox event carries.
		const maxLen = 64
		if len(fqdn) > maxLen {
			return nil, "", fmt.Errorf("failed to construct FQDN from pod hostname and cluster domain, FQDN %s is too long (%d characters is the max, %d characters requested)", fqdn, maxLen, len(fqdn))
		}
		hostname = fqdn
	}
	return cfg, hostname, nil
}

// RunContainerOptions computes a container's environment and mounts.
func (o *Provider) RunContainerOptions(ctx context.Context, pod *v1.Pod, c *v1.Container, podIPs []string) (*kuberuntime.RunContainerOptions, error) {
	envs, values, err := o.env(ctx, pod, c, podIPs)
	if err != nil {
		return nil, err
	}
	mounts, err := o.mounts(ctx, pod, c, values)
	if err != nil {
		return nil, err
	}
	if hosts, err := o.hostsMount(pod, c, podIPs); err != nil {
		return nil, err
	} else if hosts != nil {
		mounts = append(mounts, hosts)
	}
	return &kuberuntime.RunContainerOptions{Envs: envs, Mounts: mounts}, nil
}

// hostsMount writes the pod's /etc/hosts and mounts it, unless the
// container mounts its own or the pod has no IP yet.
func (o *Provider) hostsMount(pod *v1.Pod, c *v1.Container, podIPs []string) (*runtimeapi.Mount, error) {
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/etc/hosts" {
			return nil, nil
		}
	}
	if !pod.Spec.HostNetwork && len(podIPs) == 0 {
		return nil, nil
	}
	content, err := o.dns.hostsFile(pod, podIPs, o.hostsFile)
	if err != nil {
		return nil, fmt.Errorf("writing /etc/hosts: %w", err)
	}
	path := o.dirs.EtcHosts(pod.UID)
	if err := poddirs.WriteFileAtomic(path, content, 0o644); err != nil {
		return nil, fmt.Errorf("writing /etc/hosts: %w", err)
	}
	return &runtimeapi.Mount{ContainerPath: "/etc/hosts", HostPath: path}, nil
}

// env builds the environment as upstream does: the service variables,
// then envFrom, then env in spec order (a value may refer to variables
// defined before it with $(NAME)). It also returns the variables as a
// map, for subPathExpr.
func (o *Provider) env(ctx context.Context, pod *v1.Pod, c *v1.Container, podIPs []string) ([]*runtimeapi.KeyValue, map[string]string, error) {
	values := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := values[k]; !ok {
			order = append(order, k)
		}
		values[k] = v
	}
	// Service variables come last in precedence but are visible to
	// $(VAR) references, so they are kept aside and added at the end.
	services := o.serviceEnv(pod)
	mapping := func(name string) (string, bool) {
		if v, ok := values[name]; ok {
			return v, true
		}
		v, ok := services[name]
		return v, ok
	}
	for _, from := range c.EnvFrom {
		kind, name, optional := envFromSource(from)
		data, err := o.objectData(ctx, pod, kind, name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				continue
			}
			return nil, nil, fmt.Errorf("envFrom: %w", err)
		}
		var invalid []string
		for k, v := range data {
			name := from.Prefix + k
			// The API's current rule (relaxed validation, GA in v1.34):
			// any printable ASCII character but '='.
			if errs := validation.IsRelaxedEnvVarName(name); len(errs) > 0 {
				invalid = append(invalid, name)
				continue
			}
			set(name, string(v))
		}
		if len(invalid) > 0 {
			sort.Strings(invalid)
			o.warn(pod, "InvalidEnvironmentVariableNames", fmt.Sprintf("Keys [%s] from the EnvFrom %s %s/%s were skipped since they are considered invalid environment variable names.",
				strings.Join(invalid, ", "), kind, pod.Namespace, name))
		}
	}
	fieldEnv := podutil.FieldEnv{NodeName: o.nodeName, HostIPs: o.hostIPs, PodIPs: podIPs}
	for _, e := range c.Env {
		v, ok, err := o.envValue(ctx, pod, c, e, fieldEnv, mapping)
		if err != nil {
			return nil, nil, fmt.Errorf("env %q: %w", e.Name, err)
		}
		if ok {
			set(e.Name, v)
		}
	}
	for k, v := range services {
		if _, ok := values[k]; !ok {
			set(k, v)
		}
	}
	out := make([]*runtimeapi.KeyValue, 0, len(order))
	for _, k := range order {
		out = append(out, &runtimeapi.KeyValue{Key: k, Value: []byte(values[k])})
	}
	return out, values, nil
}

// envValue resolves one env entry; ok is false for an optional reference
// to something missing.
func (o *Provider) envValue(ctx context.Context, pod *v1.Pod, c *v1.Container, e v1.EnvVar, fieldEnv podutil.FieldEnv, mapping func(string) (string, bool)) (string, bool, error) {
	from := e.ValueFrom
	switch {
	case from == nil:
		return kuberuntime.Expand(e.Value, mapping), true, nil
	case from.FieldRef != nil:
		v, err := podutil.FieldRef(pod, from.FieldRef.FieldPath, fieldEnv)
		return v, err == nil, err
	case from.ResourceFieldRef != nil:
		v, err := podutil.ResourceFieldRef(pod, c.Name, from.ResourceFieldRef, o.allocatable())
		return v, err == nil, err
	case from.ConfigMapKeyRef != nil, from.SecretKeyRef != nil:
		kind, name, k, optional := "configmap", "", "", false
		if r := from.ConfigMapKeyRef; r != nil {
			name, k, optional = r.Name, r.Key, r.Optional != nil && *r.Optional
		} else {
			r := from.SecretKeyRef
			kind, name, k, optional = "secret", r.Name, r.Key, r.Optional != nil && *r.Optional
		}
		data, err := o.objectData(ctx, pod, kind, name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return "", false, nil
			}
			return "", false, err
		}
		v, ok := data[k]
		if !ok {
			if optional {
				return "", false, nil
			}
			return "", false, fmt.Errorf("couldn't find key %s in %s %s/%s", k, kind, pod.Namespace, name)
		}
		return string(v), true, nil
	case from.FileKeyRef != nil:
		return o.fileKeyValue(ctx, pod, from.FileKeyRef)
	}
	return "", false, fmt.Errorf("unsupported valueFrom")
}

func envFromSource(from v1.EnvFromSource) (kind, name string, optional bool) {
	if r := from.ConfigMapRef; r != nil {
		return "configmap", r.Name, r.Optional != nil && *r.Optional
	}
	r := from.SecretRef
	return "secret", r.Name, r.Optional != nil && *r.Optional
}

// objectData reads a configMap's or secret's keys for the environment.
func (o *Provider) objectData(ctx context.Context, pod *v1.Pod, kind, name string) (map[string][]byte, error) {
	if podutil.IsStatic(pod) {
		return nil, fmt.Errorf("%w (%s %q)", volume.ErrStaticPodAPIObject, kind, name)
	}
	return volume.ObjectData(ctx, o.objects, pod.Namespace, kind, name)
}

// mounts resolves a container's volume mounts to the host paths the
// volume manager set up.
func (o *Provider) mounts(ctx context.Context, pod *v1.Pod, c *v1.Container, env map[string]string) ([]*runtimeapi.Mount, error) {
	if len(c.VolumeDevices) > 0 {
		// Never ignored: a container asking for a raw device must not run
		// without it.
		return nil, fmt.Errorf("volumeDevices (raw block volumes, here %q) are not supported yet", c.VolumeDevices[0].Name)
	}
	var out []*runtimeapi.Mount
	for i, m := range c.VolumeMounts {
		if img := podutil.ImageVolume(pod, m.Name); img != nil {
			// The runtime mounts the image, read-only; the runtime manager
			// pulls it and puts the pulled reference in.
			out = append(out, &runtimeapi.Mount{ContainerPath: m.MountPath, Readonly: true,
				Image: &runtimeapi.ImageSpec{Image: img.Reference}, ImageSubPath: m.SubPath})
			continue
		}
		host, ok := o.volumes.HostPath(pod.UID, m.Name)
		if !ok {
			// Callers that skip the pod sync (the runtime tests) set the
			// volumes up here.
			if err := o.volumes.WaitForAttachAndMount(ctx, pod); err != nil {
				return nil, fmt.Errorf("%w: %w", kuberuntime.ErrMountVolume, err)
			}
			if host, ok = o.volumes.HostPath(pod.UID, m.Name); !ok {
				return nil, fmt.Errorf("volume mount %q refers to no volume of the pod", m.Name)
			}
		}
		sub := m.SubPath
		if m.SubPathExpr != "" {
			sub = kuberuntime.Expand(m.SubPathExpr, kuberuntime.EnvMapping(env))
		}
		if sub != "" {
			target := o.dirs.VolumeSubpath(pod.UID, m.Name, c.Name, i)
			if err := subpath.Mount(host, sub, target); err != nil {
				return nil, fmt.Errorf("volume mount %q at %s: %w", m.Name, m.MountPath, err)
			}
			host = target
		}
		out = append(out, &runtimeapi.Mount{
			ContainerPath: m.MountPath, HostPath: host, Readonly: m.ReadOnly || volume.MountedReadOnly(pod, m.Name),
			Propagation: propagation(m.MountPropagation),
		})
	}
	return out, nil
}

func propagation(p *v1.MountPropagationMode) runtimeapi.MountPropagation {
	if p == nil {
		return runtimeapi.MountPropagation_PROPAGATION_PRIVATE
	}
	switch *p {
	case v1.MountPropagationHostToContainer:
		return runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
	case v1.MountPropagationBidirectional:
		return runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
	default:
		return runtimeapi.MountPropagation_PROPAGATION_PRIVATE
	}
}
