// Package cpumanager is the CPU manager (cpuManagerPolicy): with the
// static policy, a Guaranteed pod's containers that ask for whole CPUs
// get CPUs of their own, and every other container runs on what is left
// (the shared pool), as the upstream kubelet's CPU manager does. With
// none, it does nothing.
//
// A container's CPUs are chosen at admission (the topology manager asks
// for hints, then Allocate) and kept in <root>/cpu_manager_state, in
// upstream's format. They are given to the runtime when the container
// is created (cpuset in its resources), and every reconcile period the
// running containers of the shared pool are updated to the pool as it
// is now (CRI UpdateContainerResources), since the pool shrinks and
// grows as exclusive CPUs are handed out and given back. A pod's CPUs
// go back to the pool once it is no longer active.
package cpumanager

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/resources/numa"
	"github.com/nodelet/nodelet/pkg/resources/topologymanager"
)

// Policies, as cpuManagerPolicy names them.
const (
	PolicyNone   = "none"
	PolicyStatic = "static"
)

// ContainerUpdater changes a running container's resources (CRI).
type ContainerUpdater interface {
	UpdateContainerResources(ctx context.Context, id string, linux *runtimeapi.LinuxContainerResources) error
}

// Options configure a Manager.
type Options struct {
	Policy        string
	PolicyOptions map[string]string
	Topology      *numa.Topology
	// Reserved are reservedSystemCPUs; without them NumReserved CPUs
	// (systemReserved plus kubeReserved cpu, rounded up) are reserved.
	Reserved    cpuset.CPUSet
	NumReserved int
	RootDir     string
	// ReconcilePeriod is cpuManagerReconcilePeriod.
	ReconcilePeriod time.Duration
	Runtime         ContainerUpdater
	Clock           clock.WithTicker
	// RunningAtStart are the containers running when nodelet started:
	// the reconcile loop keeps their cpusets current too (the shared
	// pool may have changed while nodelet was down, and changes after).
	RunningAtStart []RunningContainer
}

// RunningContainer is a running container: its runtime ID, and its pod's
// UID and its name (the upstream labels).
type RunningContainer struct {
	ID   string
	Pod  types.UID
	Name string
}

// Manager is the CPU manager.
type Manager struct {
	o      Options
	path   string
	static *static // nil with the none policy

	mu    sync.Mutex
	state *state
	// running maps the containers started under the static policy to
	// their pod and name, and applied to the cpuset they were last given.
	running map[string]containerRef
	applied map[string]cpuset.CPUSet
	kick    chan struct{}
}

type containerRef struct{ pod, name string }

// New reads the state and checks it against the machine and policy.
func New(o Options) (*Manager, error) {
	m := &Manager{o: o, path: filepath.Join(o.RootDir, StateFile), running: map[string]containerRef{},
		applied: map[string]cpuset.CPUSet{}, kick: make(chan struct{}, 1)}
	switch o.Policy {
	case PolicyNone:
		if len(o.PolicyOptions) > 0 {
			return nil, fmt.Errorf("cpuManagerPolicyOptions need the static policy")
		}
	case PolicyStatic:
		p, err := newStatic(o.Topology, o.Reserved, o.NumReserved, o.PolicyOptions)
		if err != nil {
			return nil, err
		}
		m.static = p
	default:
		return nil, fmt.Errorf("cpuManagerPolicy %q is not one of none, static", o.Policy)
	}
	s, err := loadState(m.path, o.Policy)
	if err != nil {
		return nil, err
	}
	if m.static != nil {
		if err := m.static.start(s); err != nil {
			return nil, fmt.Errorf("CPU manager state %s does not fit this node (drain it and remove the file): %w", m.path, err)
		}
		klog.InfoS("Static CPU manager", "reserved", m.static.reserved, "sharedPool", s.defaultSet)
		// Their cpusets are unknown: the first reconcile sets them all.
		for _, c := range o.RunningAtStart {
			m.running[c.ID] = containerRef{pod: string(c.Pod), name: c.Name}
		}
	}
	m.state = s
	return m, m.state.save(m.path)
}

// Run reconciles the running containers' cpusets every period, and at
// once when the shared pool changed.
func (m *Manager) Run(ctx context.Context) error {
	if m.static == nil {
		<-ctx.Done()
		return nil
	}
	t := m.o.Clock.NewTicker(m.o.ReconcilePeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		case <-m.kick:
		}
		m.reconcile(ctx)
	}
}

func (m *Manager) changed() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// reconcile gives each running container the cpuset it should have now;
// a container the runtime no longer has is forgotten.
func (m *Manager) reconcile(ctx context.Context) {
	type update struct {
		id   string
		cpus cpuset.CPUSet
	}
	var todo []update
	m.mu.Lock()
	for id, ref := range m.running {
		if want := m.cpusetLocked(ref.pod, ref.name); !want.Equals(m.applied[id]) {
			todo = append(todo, update{id, want})
		}
	}
	m.mu.Unlock()
	for _, u := range todo {
		err := m.o.Runtime.UpdateContainerResources(ctx, u.id, &runtimeapi.LinuxContainerResources{CpusetCpus: u.cpus.String()})
		m.mu.Lock()
		if err != nil {
			klog.InfoS("Could not update a container's cpuset; forgetting it", "containerID", u.id, "cpuset", u.cpus, "err", err)
			delete(m.running, u.id)
			delete(m.applied, u.id)
		} else if _, ok := m.running[u.id]; ok {
			m.applied[u.id] = u.cpus
		}
		m.mu.Unlock()
	}
}

// cpusetLocked is a container's cpuset: its own CPUs, or the shared pool.
func (m *Manager) cpusetLocked(pod, name string) cpuset.CPUSet {
	if cpus, ok := m.state.cpus(pod, name); ok {
		return cpus
	}
	return m.state.defaultSet
}

// TopologyHints implements topologymanager.HintProvider.
func (m *Manager) TopologyHints(pod *v1.Pod, c *v1.Container) map[string][]topologymanager.Hint {
	if m.static == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.static.containerHints(m.state, pod, c)
}

// PodTopologyHints implements topologymanager.HintProvider.
func (m *Manager) PodTopologyHints(pod *v1.Pod) map[string][]topologymanager.Hint {
	if m.static == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.static.podHints(m.state, pod)
}

// Allocate implements topologymanager.HintProvider: a container due
// exclusive CPUs gets them, and the state is written before the pod is
// admitted.
func (m *Manager) Allocate(pod *v1.Pod, c *v1.Container, affinity topologymanager.Hint) error {
	if m.static == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	before := m.state.defaultSet
	if err := m.static.allocate(m.state, pod, c, affinity); err != nil {
		return err
	}
	if before.Equals(m.state.defaultSet) {
		return nil
	}
	klog.InfoS("Exclusive CPUs allocated", "pod", klog.KObj(pod), "podUID", pod.UID, "container", c.Name, "cpus", m.state.assignments[string(pod.UID)][c.Name], "sharedPool", m.state.defaultSet)
	m.changed()
	return m.state.save(m.path)
}

// PreCreateContainer gives the container its cpuset: its own CPUs, or
// the shared pool (under the static policy).
func (m *Manager) PreCreateContainer(_ context.Context, pod *v1.Pod, c *v1.Container, cfg *runtimeapi.ContainerConfig) error {
	if m.static == nil || cfg.Linux == nil {
		return nil
	}
	if cfg.Linux.Resources == nil {
		cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cfg.Linux.Resources.CpusetCpus = m.cpusetLocked(string(pod.UID), c.Name).String()
	return nil
}

// PreStartContainer records the container, so the reconcile loop keeps
// its cpuset current.
func (m *Manager) PreStartContainer(_ context.Context, pod *v1.Pod, c *v1.Container, id string) error {
	if m.static == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.running[id] = containerRef{pod: string(pod.UID), name: c.Name}
	m.applied[id] = m.cpusetLocked(string(pod.UID), c.Name)
	return nil
}

// RetainActive gives back the CPUs of every pod not among the active
// ones (finished, deleted, or refused at admission).
func (m *Manager) RetainActive(active []*v1.Pod) {
	if m.static == nil {
		return
	}
	keep := podutil.UIDs(active)
	m.mu.Lock()
	defer m.mu.Unlock()
	released := false
	for pod, cs := range m.state.assignments {
		if keep[types.UID(pod)] {
			continue
		}
		for name := range cs {
			m.static.release(m.state, pod, name)
			released = true
		}
		klog.InfoS("Released the exclusive CPUs of a pod no longer active", "podUID", pod, "sharedPool", m.state.defaultSet)
	}
	for id, ref := range m.running {
		if !keep[types.UID(ref.pod)] {
			delete(m.running, id)
			delete(m.applied, id)
		}
	}
	if released {
		m.changed()
		if err := m.state.save(m.path); err != nil {
			klog.ErrorS(err, "Failed to write the CPU manager state")
		}
	}
}

// ExclusiveCPUs are the CPUs a container holds alone (the pod-resources
// API's cpu_ids); none for the shared pool or the none policy.
func (m *Manager) ExclusiveCPUs(pod types.UID, container string) cpuset.CPUSet {
	m.mu.Lock()
	defer m.mu.Unlock()
	cpus, _ := m.state.cpus(string(pod), container)
	return cpus
}

// AllocatableCPUs are the CPUs containers may be given (none under the
// none policy, as upstream).
func (m *Manager) AllocatableCPUs() cpuset.CPUSet {
	if m.static == nil {
		return cpuset.New()
	}
	return m.static.allocatable()
}

// SharedPool is the shared pool now.
func (m *Manager) SharedPool() cpuset.CPUSet {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state.defaultSet
}

// ResizeInfeasible says why a resize cannot be granted: under the static
// policy a Guaranteed pod's containers keep the CPUs they were given, as
// upstream without InPlacePodVerticalScalingExclusiveCPUs.
func (m *Manager) ResizeInfeasible(desired, allocated *v1.Pod) string {
	if m.static == nil || podutil.QOSClass(desired) != v1.PodQOSGuaranteed || !podutil.RequestChanged(desired, allocated, v1.ResourceCPU) {
		return ""
	}
	return `Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"`
}
