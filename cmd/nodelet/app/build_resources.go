package app

import (
	"context"
	"fmt"
	"math"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodelet/nodelet/pkg/pods/admission"
	"github.com/nodelet/nodelet/pkg/resources/cpumanager"
	"github.com/nodelet/nodelet/pkg/resources/devicemanager"
	"github.com/nodelet/nodelet/pkg/resources/dra"
	"github.com/nodelet/nodelet/pkg/resources/memorymanager"
	"github.com/nodelet/nodelet/pkg/resources/pluginwatcher"
	"github.com/nodelet/nodelet/pkg/resources/topologymanager"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
)

// resourceParts are the resource managers: exclusive CPUs, NUMA-pinned
// memory, devices of device plugins and DRA drivers, and the topology
// manager that admits a pod only if they can place what it asks.
type resourceParts struct {
	cpus    *cpumanager.Manager
	memory  *memorymanager.Manager
	devices *devicemanager.Manager
	claims  *dra.Manager
	// topology places and allocates a new pod's resources at admission.
	topology *topologymanager.Manager
	// hooks give each container what it was given.
	hooks        []kuberuntime.ContainerHook
	release      []func(active []*v1.Pod)
	resizeChecks []admission.ResizeCheck
	// runningPods are the pods whose containers ran when nodelet started.
	runningPods map[types.UID]bool
	components  []component
}

// cpuManagerReconcilePeriod is upstream's default.
const cpuManagerReconcilePeriod = 10 * time.Second

func buildResources(b *base, rt *runtimeConn, node *nodeParts, cl *clusterClients) (*resourceParts, error) {
	c := b.cfg
	period := c.CPUManagerReconcilePeriod.Duration
	if period == 0 {
		period = cpuManagerReconcilePeriod
	}
	running, err := runningContainers(rt)
	if err != nil {
		return nil, err
	}
	reservedCPU := node.reserved[v1.ResourceCPU]
	cpus, err := cpumanager.New(cpumanager.Options{
		Policy: c.CPUManagerPolicy, PolicyOptions: c.CPUManagerPolicyOptions, Topology: node.topology,
		Reserved: node.reservedCPUs, NumReserved: int(math.Ceil(float64(reservedCPU.MilliValue()) / 1000)),
		RootDir: b.opts.RootDir, ReconcilePeriod: period, Runtime: containerUpdater{rt}, Clock: b.clock, RunningAtStart: running,
	})
	if err != nil {
		return nil, fmt.Errorf("CPU manager: %w", err)
	}
	memory, err := memorymanager.New(memorymanager.Options{Policy: c.MemoryManagerPolicy, Topology: node.topology,
		Reserved: c.ReservedMemory, NodeReservation: node.reserved, RootDir: b.opts.RootDir})
	if err != nil {
		return nil, fmt.Errorf("memory manager: %w", err)
	}
	devices, err := devicemanager.New(devicemanager.Options{RootDir: b.opts.RootDir, Clock: b.clock, RunningAtStart: byPod(running)})
	if err != nil {
		return nil, fmt.Errorf("device manager: %w", err)
	}
	claims, err := dra.New(dra.Options{RootDir: b.opts.RootDir, NodeName: b.nodeName, Client: b.client, Clock: b.clock})
	if err != nil {
		return nil, fmt.Errorf("DRA manager: %w", err)
	}
	topology, err := topologymanager.New(topologymanager.Options{Policy: c.TopologyManagerPolicy, Scope: c.TopologyManagerScope,
		PolicyOptions: c.TopologyManagerPolicyOptions, Topology: node.topology,
		Providers: []topologymanager.HintProvider{devices, cpus, memory}})
	if err != nil {
		return nil, fmt.Errorf("topology manager: %w", err)
	}
	release := []func([]*v1.Pod){devices.RetainActive, cpus.RetainActive, memory.RetainActive, claims.RetainActive}
	handlers := map[string]pluginwatcher.Handler{registerapi.DevicePlugin: devices, registerapi.DRAPlugin: claims}
	if cl.csiDrivers != nil {
		handlers[registerapi.CSIPlugin] = cl.csiDrivers
	}
	watcher := pluginwatcher.New(pluginwatcher.Options{RootDir: b.opts.RootDir, Clock: b.clock, Handlers: handlers, Timeout: c.RuntimeRequestTimeout.Duration})
	return &resourceParts{
		cpus: cpus, memory: memory, devices: devices, claims: claims,
		topology:     topology,
		hooks:        []kuberuntime.ContainerHook{node.limits, cpus, memory, devices, claims},
		release:      release,
		resizeChecks: []admission.ResizeCheck{cpus.ResizeInfeasible, memory.ResizeInfeasible},
		runningPods:  podsOf(running),
		components: []component{
			{"device plugin registration", devices.Run}, {"CPU manager", cpus.Run}, {"DRA manager", claims.Run}, {"plugin watcher", watcher.Run},
		},
	}, nil
}

// containerUpdater changes running containers' cpusets for the CPU
// manager.
type containerUpdater struct{ rt *runtimeConn }

func (u containerUpdater) UpdateContainerResources(ctx context.Context, id string, linux *runtimeapi.LinuxContainerResources) error {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	_, err := u.rt.runtime.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: linux})
	return err
}

// runningContainers are the containers running as nodelet starts, with
// their pods' UIDs and names (the upstream labels).
func runningContainers(rt *runtimeConn) ([]cpumanager.RunningContainer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	resp, err := rt.runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}})
	if err != nil {
		return nil, fmt.Errorf("listing the running containers: %w", err)
	}
	var out []cpumanager.RunningContainer
	for _, c := range resp.Containers {
		out = append(out, cpumanager.RunningContainer{ID: c.Id, Pod: types.UID(c.Labels[kuberuntime.LabelPodUID]),
			Name: c.Labels[kuberuntime.LabelContainerName]})
	}
	klog.V(2).InfoS("Containers running at start", "containers", len(out))
	return out, nil
}

// podsOf are the containers' pods.
func podsOf(cs []cpumanager.RunningContainer) map[types.UID]bool {
	out := map[types.UID]bool{}
	for _, c := range cs {
		out[c.Pod] = true
	}
	return out
}

// byPod are the containers' names by pod UID.
func byPod(cs []cpumanager.RunningContainer) map[types.UID]sets.Set[string] {
	out := map[types.UID]sets.Set[string]{}
	for _, c := range cs {
		if out[c.Pod] == nil {
			out[c.Pod] = sets.New[string]()
		}
		out[c.Pod].Insert(c.Name)
	}
	return out
}
