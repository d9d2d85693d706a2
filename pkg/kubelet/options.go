package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/kuberuntime"
)

// podDirs lays out a pod's data under the root directory:
// <root>/pods/<uid>/{volumes,plugins,containers}.
type podDirs string

func (d podDirs) pod(uid types.UID) string { return filepath.Join(string(d), "pods", string(uid)) }
func (d podDirs) container(uid types.UID, name string) string {
	return filepath.Join(d.pod(uid), "containers", name)
}

// volume is where a volume's files live: volumes/<plugin>/<name>, with the
// plugin named as upstream names it (kubernetes.io~empty-dir).
func (d podDirs) volume(uid types.UID, plugin, name string) string {
	return filepath.Join(d.pod(uid), "volumes", "kubernetes.io~"+plugin, name)
}

// ContainerOptions answers the runtime manager's questions about a
// container that depend on the node and the pod rather than the container
// spec: its environment and its mounts.
type ContainerOptions struct {
	dirs     podDirs
	nodeName string
	hostIPs  []string
	// api is nil without an API server.
	api    APIObjects
	tokens *tokenCache
}

var _ kuberuntime.Helper = (*ContainerOptions)(nil)

// NewContainerOptions returns the options provider for a node.
func NewContainerOptions(rootDir, nodeName string, hostIPs []string) *ContainerOptions {
	return &ContainerOptions{dirs: podDirs(rootDir), nodeName: nodeName, hostIPs: hostIPs, tokens: newTokenCache(clock.RealClock{})}
}

// UseAPI lets volumes read configMaps and secrets and request service
// account tokens. Call it before any pod starts.
func (o *ContainerOptions) UseAPI(api APIObjects) { o.api = api }

// PodContainerDir is where per-container files of a pod live.
func (o *ContainerOptions) PodContainerDir(uid types.UID, name string) string {
	return o.dirs.container(uid, name)
}

// RunContainerOptions computes a container's environment and mounts.
func (o *ContainerOptions) RunContainerOptions(ctx context.Context, pod *v1.Pod, c *v1.Container, podIPs []string) (*kuberuntime.RunContainerOptions, error) {
	envs, err := o.env(pod, c, podIPs)
	if err != nil {
		return nil, err
	}
	mounts, err := o.mounts(ctx, pod, c)
	if err != nil {
		return nil, err
	}
	return &kuberuntime.RunContainerOptions{Envs: envs, Mounts: mounts}, nil
}

// env builds the environment in spec order; a value may refer to
// variables defined before it with $(NAME).
func (o *ContainerOptions) env(pod *v1.Pod, c *v1.Container, podIPs []string) ([]*runtimeapi.KeyValue, error) {
	if len(c.EnvFrom) > 0 {
		return nil, fmt.Errorf("envFrom is not supported without an API server (container %q)", c.Name)
	}
	values := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := values[k]; !ok {
			order = append(order, k)
		}
		values[k] = v
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			set(e.Name, kuberuntime.Expand(e.Value, kuberuntime.EnvMapping(values)))
		case e.ValueFrom.FieldRef != nil:
			v, err := o.fieldRef(pod, e.ValueFrom.FieldRef.FieldPath, podIPs)
			if err != nil {
				return nil, fmt.Errorf("env %q: %w", e.Name, err)
			}
			set(e.Name, v)
		default:
			return nil, fmt.Errorf("env %q: only value and fieldRef are supported without an API server", e.Name)
		}
	}
	out := make([]*runtimeapi.KeyValue, 0, len(order))
	for _, k := range order {
		out = append(out, &runtimeapi.KeyValue{Key: k, Value: []byte(values[k])})
	}
	return out, nil
}

// fieldRef resolves a downward API field path.
func (o *ContainerOptions) fieldRef(pod *v1.Pod, path string, podIPs []string) (string, error) {
	if k, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[k], nil
	}
	if k, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[k], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return o.nodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		if len(o.hostIPs) > 0 {
			return o.hostIPs[0], nil
		}
		return "", nil
	case "status.hostIPs":
		return strings.Join(o.hostIPs, ","), nil
	case "status.podIP":
		if pod.Spec.HostNetwork {
			return o.fieldRef(pod, "status.hostIP", podIPs)
		}
		if len(podIPs) > 0 {
			return podIPs[0], nil
		}
		return "", nil
	case "status.podIPs":
		if pod.Spec.HostNetwork {
			return strings.Join(o.hostIPs, ","), nil
		}
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

// mounts resolves a container's volume mounts to host paths.
func (o *ContainerOptions) mounts(ctx context.Context, pod *v1.Pod, c *v1.Container) ([]*runtimeapi.Mount, error) {
	volumes := map[string]*v1.Volume{}
	for i := range pod.Spec.Volumes {
		volumes[pod.Spec.Volumes[i].Name] = &pod.Spec.Volumes[i]
	}
	var out []*runtimeapi.Mount
	for _, m := range c.VolumeMounts {
		vol, ok := volumes[m.Name]
		if !ok {
			return nil, fmt.Errorf("volume mount %q refers to no volume of the pod", m.Name)
		}
		host, err := o.volumePath(ctx, pod, vol)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", kuberuntime.ErrMountVolume, err)
		}
		if m.SubPath != "" {
			if filepath.IsAbs(m.SubPath) || strings.Contains(filepath.Clean(m.SubPath), "..") {
				return nil, fmt.Errorf("volume mount %q: subPath %q must be a relative path inside the volume", m.Name, m.SubPath)
			}
			host = filepath.Join(host, m.SubPath)
			if _, err := os.Stat(host); os.IsNotExist(err) {
				if err := os.MkdirAll(host, 0o750); err != nil {
					return nil, fmt.Errorf("volume mount %q: creating subPath: %w", m.Name, err)
				}
			}
		}
		out = append(out, &runtimeapi.Mount{
			ContainerPath: m.MountPath, HostPath: host, Readonly: m.ReadOnly,
			Propagation: propagation(m.MountPropagation),
		})
	}
	return out, nil
}

// volumePath returns (creating if needed) the host path of a volume.
func (o *ContainerOptions) volumePath(ctx context.Context, pod *v1.Pod, vol *v1.Volume) (string, error) {
	if sources, mode, ok := projections(vol); ok {
		return o.projectedVolume(ctx, pod, vol, sources, mode)
	}
	switch {
	case vol.HostPath != nil:
		p := vol.HostPath.Path
		if vol.HostPath.Type != nil && *vol.HostPath.Type == v1.HostPathDirectoryOrCreate {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return "", fmt.Errorf("volume %q: creating %s: %w", vol.Name, p, err)
			}
		}
		return p, nil
	case vol.EmptyDir != nil:
		p := o.dirs.volume(pod.UID, "empty-dir", vol.Name)
		if err := os.MkdirAll(p, 0o777); err != nil {
			return "", fmt.Errorf("volume %q: %w", vol.Name, err)
		}
		// Any user in the pod may write to an emptyDir, umask or not.
		return p, os.Chmod(p, 0o777)
	default:
		return "", fmt.Errorf("volume %q: unsupported volume type (hostPath, emptyDir, configMap, secret, downwardAPI and projected are)", vol.Name)
	}
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
