package devicemanager

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/resources/devicemanager/checkpoint"
	"github.com/nodelet/nodelet/pkg/resources/topologymanager"
)

// requests are the container's device plugin resources: extended
// resources, not overcommitted (request equals limit), that a plugin
// serves or a container holds.
func (m *Manager) requests(c *v1.Container) map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	held := m.pods.allocated()
	out := map[string]int{}
	for name, q := range c.Resources.Limits {
		if _, ok := m.resources[string(name)]; (ok || held[string(name)] != nil) && q.Value() > 0 {
			out[string(name)] = int(q.Value())
		}
	}
	return out
}

// Allocate implements topologymanager.HintProvider: the container gets
// its devices (the plugin's Allocate answer kept for its creation), and
// the checkpoint is written before the pod is admitted.
func (m *Manager) Allocate(pod *v1.Pod, c *v1.Container, affinity topologymanager.Hint) error {
	reqs := m.requests(c)
	uid := string(pod.UID)
	m.mu.Lock()
	for k := range m.reuse {
		if k != uid {
			delete(m.reuse, k)
		}
	}
	if m.reuse[uid] == nil {
		m.reuse[uid] = map[string]sets.Set[string]{}
	}
	m.mu.Unlock()
	changed := false
	for _, name := range slices.Sorted(maps.Keys(reqs)) {
		done, err := m.allocateResource(context.Background(), pod, c, name, reqs[name], affinity)
		if err != nil {
			return err
		}
		changed = changed || done
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.updateReuse(pod, c)
	if !changed {
		return nil
	}
	if err := saveCheckpoint(m.path, m.pods, m.resources); err != nil {
		return fmt.Errorf("writing the device manager checkpoint: %w", err)
	}
	m.o.Changed()
	return nil
}

// allocateResource gives the container n devices of the resource and
// reports whether it had to: a container holding them already keeps
// them.
func (m *Manager) allocateResource(ctx context.Context, pod *v1.Pod, c *v1.Container, name string, n int, affinity topologymanager.Hint) (bool, error) {
	// Allocations happen one at a time: the plugin calls are made
	// without mu, and nothing may take the devices chosen meanwhile.
	m.allocMu.Lock()
	defer m.allocMu.Unlock()
	m.mu.Lock()
	ids, e, err := m.devicesToAllocate(ctx, pod, c, name, n, affinity)
	m.mu.Unlock()
	if err != nil || ids == nil {
		return false, err
	}
	list := sets.List(ids)
	klog.V(2).InfoS("Allocating devices", "pod", klog.KObj(pod), "podUID", pod.UID, "container", c.Name, "resource", name, "devices", list)
	resp, err := e.allocate(ctx, list)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		return false, err
	}
	byNUMA := checkpoint.DevicesPerNUMA{}
	r := m.resources[name]
	for _, id := range list {
		nodes := numaNodes(r.devices[id])
		if len(nodes) == 0 {
			nodes = []int64{checkpoint.NoTopology}
		}
		for _, node := range nodes {
			byNUMA[node] = append(byNUMA[node], id)
		}
	}
	m.pods.set(string(pod.UID), c.Name, name, allocation{ids: byNUMA, resp: resp})
	return true, nil
}

func numaNodes(d *pluginapi.Device) []int64 {
	if d == nil || d.Topology == nil {
		return nil
	}
	out := make([]int64, 0, len(d.Topology.Nodes))
	for _, n := range d.Topology.Nodes {
		out = append(out, n.ID)
	}
	return out
}

// devicesToAllocate chooses the devices, as upstream: reusable ones
// first, then those on the affinity's NUMA nodes (the plugin's preferred
// among them), then the plugin's preferred, then the rest. It returns
// nil when nothing is to be allocated.
func (m *Manager) devicesToAllocate(ctx context.Context, pod *v1.Pod, c *v1.Container, name string, required int, affinity topologymanager.Hint) (sets.Set[string], *endpoint, error) {
	uid := string(pod.UID)
	if a, ok := m.pods[uid][c.Name][name]; ok {
		held := a.devices()
		if held.Len() != required {
			return nil, nil, fmt.Errorf("pod %q container %q changed request for resource %q from %d to %d", uid, c.Name, name, held.Len(), required)
		}
		if m.o.RunningAtStart[pod.UID].Has(c.Name) {
			// Running since before nodelet started: it has its devices.
			return nil, nil, nil
		}
		r := m.resources[name]
		if err := usable(r, name); err != nil {
			return nil, nil, err
		}
		if !r.healthy().IsSuperset(held) {
			return nil, nil, fmt.Errorf("previously allocated devices are no longer healthy; cannot allocate unhealthy devices %s", name)
		}
		return nil, nil, nil
	}
	r := m.resources[name]
	if err := usable(r, name); err != nil {
		return nil, nil, err
	}
	picked := sets.New[string]()
	need := required
	take := func(from []string) bool {
		for _, id := range from {
			if need == 0 {
				break
			}
			if !picked.Has(id) {
				picked.Insert(id)
				need--
			}
		}
		return need == 0
	}
	e := r.endpoint
	if take(sets.List(m.reuse[uid][name])) {
		return picked, e, nil
	}
	available := r.healthy().Difference(m.pods.allocated()[name]).Difference(picked)
	if available.Len() < need {
		return nil, nil, fmt.Errorf("requested number of devices unavailable for %s. Requested: %d, Available: %d", name, need, available.Len())
	}
	aligned, unaligned, noTopology := split(r, available, affinity)
	preferredFrom := func(candidates sets.Set[string]) []string {
		// The plugin is asked without holding mu: the node status must
		// not wait for a slow plugin.
		m.mu.Unlock()
		ids, err := e.preferred(ctx, sets.List(candidates.Union(picked)), sets.List(picked), required)
		m.mu.Lock()
		if err != nil {
			klog.ErrorS(err, "Allocating without the plugin's preference", "resource", name)
		}
		return sets.List(sets.New(ids...).Intersection(candidates))
	}
	if need < len(aligned) {
		if take(preferredFrom(sets.New(aligned...))) || take(aligned) {
			return picked, e, nil
		}
	} else if take(aligned) {
		return picked, e, nil
	}
	if take(preferredFrom(available)) || take(unaligned) || take(noTopology) {
		return picked, e, nil
	}
	return nil, nil, fmt.Errorf("unexpectedly allocated less resources than required. Requested: %d, Got: %d", required, required-need)
}

// usable: a plugin serves the resource and has healthy devices.
func usable(r *resourceState, name string) error {
	if r == nil || r.endpoint == nil {
		return fmt.Errorf("cannot allocate unregistered device %s", name)
	}
	if r.healthy().Len() == 0 {
		return fmt.Errorf("no healthy devices present; cannot allocate unhealthy devices %s", name)
	}
	return nil
}

// split sorts devices by the affinity: on its NUMA nodes, elsewhere,
// and without topology. Without an affinity (or topology), all are
// "without topology".
func split(r *resourceState, available sets.Set[string], affinity topologymanager.Hint) (aligned, unaligned, none []string) {
	if affinity.NUMANodes == 0 || !hasTopology(r) {
		return nil, nil, sets.List(available)
	}
	for _, id := range sets.List(available) {
		nodes := numaNodes(r.devices[id])
		switch {
		case len(nodes) == 0:
			none = append(none, id)
		case anyIn(nodes, affinity.NUMANodes):
			aligned = append(aligned, id)
		default:
			unaligned = append(unaligned, id)
		}
	}
	return aligned, unaligned, none
}

func anyIn(nodes []int64, mask topologymanager.Mask) bool {
	for _, n := range nodes {
		if n >= 0 && mask.Has(int(n)) {
			return true
		}
	}
	return false
}

func hasTopology(r *resourceState) bool {
	for _, d := range r.devices {
		if len(numaNodes(d)) > 0 {
			return true
		}
	}
	return false
}

// updateReuse: a regular init container's devices may go to the
// containers after it; what a container takes is its own.
func (m *Manager) updateReuse(pod *v1.Pod, c *v1.Container) {
	uid := string(pod.UID)
	regularInit := false
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == c.Name {
			regularInit = !podutil.IsRestartableInitContainer(&pod.Spec.InitContainers[i])
		}
	}
	for name, a := range m.pods[uid][c.Name] {
		cur := m.reuse[uid][name]
		if cur == nil {
			cur = sets.New[string]()
		}
		if regularInit {
			m.reuse[uid][name] = cur.Union(a.devices())
		} else {
			m.reuse[uid][name] = cur.Difference(a.devices())
		}
	}
}

// TopologyHints implements topologymanager.HintProvider: per resource
// whose devices have NUMA nodes, the node sets holding enough free
// devices, the narrowest preferred.
func (m *Manager) TopologyHints(pod *v1.Pod, c *v1.Container) map[string][]topologymanager.Hint {
	reqs := m.requests(c)
	if len(reqs) == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]topologymanager.Hint{}
	for name, n := range reqs {
		out[name] = m.hintsLocked(string(pod.UID), c.Name, name, n)
	}
	return out
}

func (m *Manager) hintsLocked(pod, container, name string, n int) []topologymanager.Hint {
	r := m.resources[name]
	if r == nil || !hasTopology(r) {
		return nil
	}
	if a, ok := m.pods[pod][container][name]; ok {
		if a.devices().Len() != n {
			return []topologymanager.Hint{}
		}
		return r.hints(a.devices(), sets.New[string](), n)
	}
	available := r.healthy().Difference(m.pods.allocated()[name])
	reusable := m.reuse[pod][name]
	if available.Union(reusable).Len() < n {
		return []topologymanager.Hint{}
	}
	return r.hints(available, reusable, n)
}

// hints lists the NUMA node sets that hold the reusable devices
// and enough available ones; the narrowest that could hold n are
// preferred.
func (r *resourceState) hints(available, reusable sets.Set[string], n int) []topologymanager.Hint {
	var ids []int
	seen := map[int]bool{}
	for _, d := range r.devices {
		for _, node := range numaNodes(d) {
			if node >= 0 && !seen[int(node)] {
				seen[int(node)] = true
				ids = append(ids, int(node))
			}
		}
	}
	sort.Ints(ids)
	narrowest := len(ids)
	// Empty, never nil: nil would say "no preference".
	out := []topologymanager.Hint{}
	topologymanager.IterateMasks(ids, func(mask topologymanager.Mask) {
		in := 0
		for _, d := range r.devices {
			if anyIn(numaNodes(d), mask) {
				in++
			}
		}
		if in >= n {
			narrowest = min(narrowest, mask.Count())
		}
		matching := 0
		for id := range reusable {
			nodes := numaNodes(r.devices[id])
			if len(nodes) == 0 {
				continue
			}
			if !anyIn(nodes, mask) {
				return
			}
			matching++
		}
		for id := range available {
			if anyIn(numaNodes(r.devices[id]), mask) {
				matching++
			}
		}
		if matching >= n {
			out = append(out, topologymanager.Hint{NUMANodes: mask})
		}
	})
	for i := range out {
		out[i].Preferred = out[i].NUMANodes.Count() == narrowest
	}
	return out
}

// PodTopologyHints implements topologymanager.HintProvider: the pod's
// peak need of each resource.
func (m *Manager) PodTopologyHints(pod *v1.Pod) map[string][]topologymanager.Hint {
	peak := map[string]int{}
	apps := map[string]int{}
	for i := range pod.Spec.Containers {
		for name, n := range m.requests(&pod.Spec.Containers[i]) {
			apps[name] += n
		}
	}
	for i := range pod.Spec.InitContainers {
		for name, n := range m.requests(&pod.Spec.InitContainers[i]) {
			peak[name] = max(peak[name], n)
		}
	}
	for name, n := range apps {
		peak[name] = max(peak[name], n)
	}
	if len(peak) == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]topologymanager.Hint{}
	for name, n := range peak {
		r := m.resources[name]
		if r == nil || !hasTopology(r) {
			out[name] = nil
			continue
		}
		held := sets.New[string]()
		for _, rs := range m.pods[string(pod.UID)] {
			if a, ok := rs[name]; ok {
				held = held.Union(a.devices())
			}
		}
		if held.Len() == n {
			out[name] = r.hints(held, sets.New[string](), n)
			continue
		}
		available := r.healthy().Difference(m.pods.allocated()[name])
		if available.Len() < n {
			out[name] = []topologymanager.Hint{}
			continue
		}
		out[name] = r.hints(available, held, n)
	}
	return out
}

// Device is a device a container holds, for the pod-resources API.
type Device struct {
	Resource  string
	IDs       []string
	NUMANodes []int64
}

// ContainerDevices are the devices a container holds.
func (m *Manager) ContainerDevices(pod types.UID, container string) []Device {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Device
	rs := m.pods[string(pod)][container]
	for _, name := range slices.Sorted(maps.Keys(rs)) {
		a := rs[name]
		for _, node := range sortedNodes(a.ids) {
			d := Device{Resource: name, IDs: append([]string(nil), a.ids[node]...)}
			if node != checkpoint.NoTopology {
				d.NUMANodes = []int64{node}
			}
			out = append(out, d)
		}
	}
	return out
}

func sortedNodes(m checkpoint.DevicesPerNUMA) []int64 {
	out := make([]int64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// AllocatableDevices are the healthy devices of every resource.
func (m *Manager) AllocatableDevices() []Device {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Device
	for _, name := range slices.Sorted(maps.Keys(m.resources)) {
		r := m.resources[name]
		for _, id := range sets.List(r.healthy()) {
			out = append(out, Device{Resource: name, IDs: []string{id}, NUMANodes: numaNodes(r.devices[id])})
		}
	}
	return out
}
