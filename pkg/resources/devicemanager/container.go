package devicemanager

import (
	"context"
	"fmt"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodelet/nodelet/pkg/resources/topologymanager"
)

// PreCreateContainer gives the container what its plugins answered for
// its devices: device nodes, mounts, environment, annotations and CDI
// devices (the first answer wins where two set the same thing, as
// upstream), after each plugin's PreStartContainer if it asks for one. A
// container due devices the checkpoint does not record (lost across a
// restart) is allocated them now.
func (m *Manager) PreCreateContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, cfg *runtimeapi.ContainerConfig) error {
	reqs := m.requests(c)
	if len(reqs) == 0 {
		return nil
	}
	m.mu.Lock()
	missing := false
	for name := range reqs {
		if _, ok := m.pods[string(pod.UID)][c.Name][name]; !ok {
			missing = true
		}
	}
	m.mu.Unlock()
	if missing {
		klog.InfoS("Allocating devices the checkpoint does not record", "pod", klog.KObj(pod), "podUID", pod.UID, "container", c.Name)
		if err := m.Allocate(pod, c, topologymanager.Hint{}); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(reqs)) {
		if err := m.preStart(ctx, pod, c, name); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var answers []*pluginapi.ContainerAllocateResponse
	for _, name := range slices.Sorted(maps.Keys(m.pods[string(pod.UID)][c.Name])) {
		answers = append(answers, m.pods[string(pod.UID)][c.Name][name].resp)
	}
	apply(cfg, answers)
	return nil
}

func (m *Manager) preStart(ctx context.Context, pod *v1.Pod, c *v1.Container, name string) error {
	m.mu.Lock()
	r := m.resources[name]
	a, ok := m.pods[string(pod.UID)][c.Name][name]
	m.mu.Unlock()
	if r == nil || r.endpoint == nil {
		return fmt.Errorf("endpoint not found in cache for a registered resource: %s", name)
	}
	if !ok {
		return fmt.Errorf("no devices found allocated in local cache for pod %s, container %s, resource %s", pod.UID, c.Name, name)
	}
	return r.endpoint.preStart(ctx, a.devices().UnsortedList())
}

// apply adds the answers to the container's config.
func apply(cfg *runtimeapi.ContainerConfig, answers []*pluginapi.ContainerAllocateResponse) {
	envs, devices, mounts, cdi := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, kv := range cfg.Envs {
		envs[kv.Key] = true
	}
	for _, mnt := range cfg.Mounts {
		mounts[mnt.ContainerPath] = true
	}
	for _, a := range answers {
		for _, k := range slices.Sorted(maps.Keys(a.Envs)) {
			if !envs[k] {
				envs[k] = true
				cfg.Envs = append(cfg.Envs, &runtimeapi.KeyValue{Key: k, Value: []byte(a.Envs[k])})
			}
		}
		for _, d := range a.Devices {
			if !devices[d.ContainerPath] {
				devices[d.ContainerPath] = true
				cfg.Devices = append(cfg.Devices, &runtimeapi.Device{ContainerPath: d.ContainerPath, HostPath: d.HostPath, Permissions: d.Permissions})
			}
		}
		for _, mnt := range a.Mounts {
			if !mounts[mnt.ContainerPath] {
				mounts[mnt.ContainerPath] = true
				cfg.Mounts = append(cfg.Mounts, &runtimeapi.Mount{ContainerPath: mnt.ContainerPath, HostPath: mnt.HostPath, Readonly: mnt.ReadOnly})
			}
		}
		for _, k := range slices.Sorted(maps.Keys(a.Annotations)) {
			if cfg.Annotations == nil {
				cfg.Annotations = map[string]string{}
			}
			if _, ok := cfg.Annotations[k]; !ok {
				cfg.Annotations[k] = a.Annotations[k]
			}
		}
		for _, d := range a.CdiDevices {
			if !cdi[d.Name] {
				cdi[d.Name] = true
				cfg.CDIDevices = append(cfg.CDIDevices, &runtimeapi.CDIDevice{Name: d.Name})
			}
		}
	}
}

// PreStartContainer has nothing to do for devices.
func (m *Manager) PreStartContainer(context.Context, *v1.Pod, *v1.Container, string) error {
	return nil
}
