// Package podresources serves the pod-resources API (v1) at
// <root>/pod-resources/kubelet.sock, as the upstream kubelet does, for the
// monitoring agents of accelerator nodes (the DCGM exporter, SR-IOV
// tooling, topology-aware schedulers): which devices, exclusive CPUs,
// NUMA-pinned memory and DRA claims each container of each active pod
// holds (List, Get), and what the node could give (GetAllocatableResources).
// Like upstream's, it answers at most 100 calls a second (bursts of 10).
package podresources

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/resources/devicemanager"
	"github.com/nodelet/nodelet/pkg/resources/dra"
	memstate "github.com/nodelet/nodelet/pkg/resources/memorymanager/state"
)

// Upstream's limits on the API.
const (
	qps   = 100
	burst = 10
)

// maxPodsWait bounds a call's wait for the node's pods after a restart
// (the node journal stands in for a silent source after 2 s).
const maxPodsWait = 5 * time.Second

// Pods are the active pods (not terminal, not finished).
type Pods interface {
	ActivePods() []*v1.Pod
	// PodsKnown is closed once ActivePods is the node's whole set. Right
	// after a restart it is not: the pod sources have yet to deliver.
	PodsKnown() <-chan struct{}
}

// Devices is the device manager as the API reads it.
type Devices interface {
	ContainerDevices(pod types.UID, container string) []devicemanager.Device
	AllocatableDevices() []devicemanager.Device
}

// CPUs is the CPU manager as the API reads it.
type CPUs interface {
	ExclusiveCPUs(pod types.UID, container string) cpuset.CPUSet
	AllocatableCPUs() cpuset.CPUSet
}

// Memory is the memory manager as the API reads it.
type Memory interface {
	ContainerMemory(pod types.UID, container string) []memstate.Block
	AllocatableMemory() []memstate.Block
}

// Claims is the DRA manager as the API reads it.
type Claims interface {
	ContainerClaims(pod *v1.Pod, c *v1.Container) []dra.ClaimResources
}

// Options configure a Server.
type Options struct {
	RootDir string
	Pods    Pods
	Devices Devices
	CPUs    CPUs
	Memory  Memory
	Claims  Claims
	Clock   clock.WithTicker
}

// Server is the pod-resources API.
type Server struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	o Options
}

// New returns the API; Run serves it.
func New(o Options) *Server { return &Server{o: o} }

// SocketPath is where the API is served.
func SocketPath(rootDir string) string {
	return filepath.Join(rootDir, "pod-resources", "kubelet.sock")
}

// Run serves the socket until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	path := SocketPath(s.o.RootDir)
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("pod-resources socket: %w", err)
	}
	limiter := rate.NewLimiter(qps, burst)
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if !limiter.Allow() {
			return nil, status.Error(codes.ResourceExhausted, "rejected by rate limit")
		}
		return h(ctx, req)
	}))
	podresourcesapi.RegisterPodResourcesListerServer(srv, s)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	klog.InfoS("Pod-resources API serving", "socket", path)
	select {
	case <-ctx.Done():
		srv.Stop()
		<-done
		return nil
	case err := <-done:
		return err
	}
}

// activePods waits, at most for the call's deadline and maxPodsWait, for
// the node's pods to be known: a monitoring agent that asks right after
// a restart must not be told that the running pods hold nothing.
func (s *Server) activePods(ctx context.Context) ([]*v1.Pod, error) {
	select {
	case <-s.o.Pods.PodsKnown():
		return s.o.Pods.ActivePods(), nil
	default:
	}
	t := s.o.Clock.NewTimer(maxPodsWait)
	defer t.Stop()
	select {
	case <-s.o.Pods.PodsKnown():
		return s.o.Pods.ActivePods(), nil
	case <-ctx.Done():
	case <-t.C():
	}
	return nil, status.Error(codes.Unavailable, "the node's pods are not known yet: nodelet restarted and its pod sources have not delivered them")
}

// List implements the API: every active pod.
func (s *Server) List(ctx context.Context, _ *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	pods, err := s.activePods(ctx)
	if err != nil {
		return nil, err
	}
	out := &podresourcesapi.ListPodResourcesResponse{PodResources: make([]*podresourcesapi.PodResources, 0, len(pods))}
	for _, p := range pods {
		out.PodResources = append(out.PodResources, s.podResources(p))
	}
	return out, nil
}

// Get implements the API: one active pod.
func (s *Server) Get(ctx context.Context, req *podresourcesapi.GetPodResourcesRequest) (*podresourcesapi.GetPodResourcesResponse, error) {
	pods, err := s.activePods(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		if p.Name == req.PodName && p.Namespace == req.PodNamespace {
			return &podresourcesapi.GetPodResourcesResponse{PodResources: s.podResources(p)}, nil
		}
	}
	return nil, fmt.Errorf("pod %s in namespace %s not found", req.PodName, req.PodNamespace)
}

// podResources lists the pod's sidecars and app containers, as
// upstream (init containers that ran to completion hold nothing).
func (s *Server) podResources(p *v1.Pod) *podresourcesapi.PodResources {
	out := &podresourcesapi.PodResources{Name: p.Name, Namespace: p.Namespace}
	for i := range p.Spec.InitContainers {
		if podutil.IsRestartableInitContainer(&p.Spec.InitContainers[i]) {
			out.Containers = append(out.Containers, s.containerResources(p, &p.Spec.InitContainers[i]))
		}
	}
	for i := range p.Spec.Containers {
		out.Containers = append(out.Containers, s.containerResources(p, &p.Spec.Containers[i]))
	}
	return out
}

func (s *Server) containerResources(p *v1.Pod, c *v1.Container) *podresourcesapi.ContainerResources {
	return &podresourcesapi.ContainerResources{
		Name:             c.Name,
		Devices:          devices(s.o.Devices.ContainerDevices(p.UID, c.Name)),
		CpuIds:           cpuIDs(s.o.CPUs.ExclusiveCPUs(p.UID, c.Name)),
		Memory:           memory(s.o.Memory.ContainerMemory(p.UID, c.Name)),
		DynamicResources: claims(s.o.Claims.ContainerClaims(p, c)),
	}
}

// GetAllocatableResources implements the API.
func (s *Server) GetAllocatableResources(context.Context, *podresourcesapi.AllocatableResourcesRequest) (*podresourcesapi.AllocatableResourcesResponse, error) {
	return &podresourcesapi.AllocatableResourcesResponse{
		Devices: devices(s.o.Devices.AllocatableDevices()),
		CpuIds:  cpuIDs(s.o.CPUs.AllocatableCPUs()),
		Memory:  memory(s.o.Memory.AllocatableMemory()),
	}, nil
}

func topology(nodes []int64) *podresourcesapi.TopologyInfo {
	if len(nodes) == 0 {
		return nil
	}
	t := &podresourcesapi.TopologyInfo{}
	for _, n := range nodes {
		t.Nodes = append(t.Nodes, &podresourcesapi.NUMANode{ID: n})
	}
	return t
}

func devices(ds []devicemanager.Device) []*podresourcesapi.ContainerDevices {
	var out []*podresourcesapi.ContainerDevices
	for _, d := range ds {
		out = append(out, &podresourcesapi.ContainerDevices{ResourceName: d.Resource, DeviceIds: d.IDs, Topology: topology(d.NUMANodes)})
	}
	return out
}

func cpuIDs(c cpuset.CPUSet) []int64 {
	var out []int64
	for _, id := range c.List() {
		out = append(out, int64(id))
	}
	return out
}

func memory(blocks []memstate.Block) []*podresourcesapi.ContainerMemory {
	var out []*podresourcesapi.ContainerMemory
	for _, b := range blocks {
		nodes := make([]int64, len(b.NUMAAffinity))
		for i, n := range b.NUMAAffinity {
			nodes[i] = int64(n)
		}
		out = append(out, &podresourcesapi.ContainerMemory{MemoryType: string(b.Type), Size: b.Size, Topology: topology(nodes)})
	}
	return out
}

func claims(cs []dra.ClaimResources) []*podresourcesapi.DynamicResource {
	var out []*podresourcesapi.DynamicResource
	for _, c := range cs {
		r := &podresourcesapi.DynamicResource{ClaimName: c.Name, ClaimNamespace: c.Namespace}
		for _, driver := range slices.Sorted(maps.Keys(c.Drivers)) {
			for _, d := range c.Drivers[driver] {
				cr := &podresourcesapi.ClaimResource{DriverName: driver, PoolName: d.PoolName, DeviceName: d.DeviceName}
				for _, id := range d.CDIDeviceIDs {
					cr.CdiDevices = append(cr.CdiDevices, &podresourcesapi.CDIDevice{Name: id})
				}
				r.ClaimResources = append(r.ClaimResources, cr)
			}
		}
		out = append(out, r)
	}
	return out
}
