package podresources

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/pkg/resources/devicemanager"
	"github.com/nodelet/nodelet/pkg/resources/dra"
	memstate "github.com/nodelet/nodelet/pkg/resources/memorymanager/state"
)

type fakes struct {
	pods  []*v1.Pod
	known chan struct{}
}

func (f fakes) ActivePods() []*v1.Pod      { return f.pods }
func (f fakes) PodsKnown() <-chan struct{} { return f.known }

// knownPods are pods the sources have delivered.
func knownPods(pods ...*v1.Pod) fakes {
	f := fakes{pods: pods, known: make(chan struct{})}
	close(f.known)
	return f
}
func (fakes) ContainerDevices(pod types.UID, c string) []devicemanager.Device {
	if pod == "a" && c == "app" {
		return []devicemanager.Device{{Resource: "example.com/resource", IDs: []string{"Dev-1"}, NUMANodes: []int64{0}}}
	}
	return nil
}
func (fakes) AllocatableDevices() []devicemanager.Device {
	return []devicemanager.Device{{Resource: "example.com/resource", IDs: []string{"Dev-1"}}, {Resource: "example.com/resource", IDs: []string{"Dev-2"}}}
}
func (fakes) ExclusiveCPUs(pod types.UID, c string) cpuset.CPUSet {
	if pod == "a" && c == "app" {
		return cpuset.New(1)
	}
	return cpuset.New()
}
func (fakes) AllocatableCPUs() cpuset.CPUSet { return cpuset.New(1) }
func (fakes) ContainerMemory(pod types.UID, c string) []memstate.Block {
	if pod == "a" && c == "app" {
		return []memstate.Block{{NUMAAffinity: []int{0}, Type: v1.ResourceMemory, Size: 64 << 20}}
	}
	return nil
}
func (fakes) AllocatableMemory() []memstate.Block {
	return []memstate.Block{{NUMAAffinity: []int{0}, Type: v1.ResourceMemory, Size: 1 << 30}}
}
func (fakes) ContainerClaims(pod *v1.Pod, c *v1.Container) []dra.ClaimResources {
	if pod.UID != "a" || c.Name != "app" {
		return nil
	}
	return []dra.ClaimResources{{Name: "a-gpu", Namespace: "ns", Drivers: map[string][]dra.Device{
		"test-driver.cdi.k8s.io": {{PoolName: "n1", DeviceName: "device-00", CDIDeviceIDs: []string{"test-driver.cdi.k8s.io/test=a"}}}}}}
}

// TestAPIOverItsSocket answers a gRPC client on the socket as upstream's
// does: the sidecars and app containers of active pods with their
// devices, exclusive CPUs, memory and claims; what the node could give.
func TestAPIOverItsSocket(t *testing.T) {
	root, err := os.MkdirTemp("/tmp", "podres")
	testutil.Must(t, err)
	defer os.RemoveAll(root)
	a := &v1.Pod{}
	a.Name, a.Namespace, a.UID = "a", "ns", "a"
	always := v1.ContainerRestartPolicyAlways
	a.Spec.InitContainers = []v1.Container{{Name: "init"}, {Name: "sidecar", RestartPolicy: &always}}
	a.Spec.Containers = []v1.Container{{Name: "app"}}
	f := knownPods(a)
	s := New(Options{RootDir: root, Pods: f, Devices: f, CPUs: f, Memory: f, Claims: f, Clock: clocktesting.NewFakeClock(time.Now())})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); testutil.Must(t, <-done) }()
	testutil.WaitFor(t, "the socket", func() bool { _, err := os.Stat(SocketPath(root)); return err == nil })

	conn, err := grpc.NewClient("unix://"+SocketPath(root), grpc.WithTransportCredentials(insecure.NewCredentials()))
	testutil.Must(t, err)
	defer conn.Close()
	client := podresourcesapi.NewPodResourcesListerClient(conn)
	list, err := client.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	testutil.Must(t, err)
	if len(list.PodResources) != 1 || len(list.PodResources[0].Containers) != 2 {
		t.Fatalf("List: %v", list)
	}
	sidecar, app := list.PodResources[0].Containers[0], list.PodResources[0].Containers[1]
	if sidecar.Name != "sidecar" || app.Name != "app" {
		t.Fatalf("containers %s, %s: want the sidecar and the app, not the finished init container", sidecar.Name, app.Name)
	}
	d := app.Devices
	if len(d) != 1 || d[0].ResourceName != "example.com/resource" || d[0].DeviceIds[0] != "Dev-1" || d[0].Topology.Nodes[0].ID != 0 {
		t.Errorf("devices %v", d)
	}
	if len(app.CpuIds) != 1 || app.CpuIds[0] != 1 || len(app.Memory) != 1 || app.Memory[0].MemoryType != "memory" || app.Memory[0].Size != 64<<20 {
		t.Errorf("CPUs %v, memory %v", app.CpuIds, app.Memory)
	}
	dr := app.DynamicResources
	if len(dr) != 1 || dr[0].ClaimName != "a-gpu" || dr[0].ClaimResources[0].CdiDevices[0].Name != "test-driver.cdi.k8s.io/test=a" || dr[0].ClaimResources[0].DeviceName != "device-00" {
		t.Errorf("dynamic resources %v", dr)
	}
	one, err := client.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodName: "a", PodNamespace: "ns"})
	if err != nil || len(one.PodResources.Containers) != 2 {
		t.Fatalf("Get: %v %v", one, err)
	}
	if _, err := client.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodName: "b", PodNamespace: "ns"}); err == nil || !strings.Contains(err.Error(), "pod b in namespace ns not found") {
		t.Fatalf("Get of another pod: %v", err)
	}
	alloc, err := client.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil || len(alloc.Devices) != 2 || len(alloc.CpuIds) != 1 || alloc.Memory[0].Size != 1<<30 {
		t.Fatalf("GetAllocatableResources: %v %v", alloc, err)
	}
}

// TestCallsWaitForTheNodesPods: right after a restart, before the pod
// sources delivered, List and Get wait for the node's pods instead of
// answering that the running pods hold nothing; a call that waits past
// maxPodsWait, or its own deadline, is told the node is unavailable.
func TestCallsWaitForTheNodesPods(t *testing.T) {
	a := &v1.Pod{}
	a.Name, a.Namespace, a.UID = "a", "ns", "a"
	a.Spec.Containers = []v1.Container{{Name: "app"}}
	start := func() (fakes, *clocktesting.FakeClock, *Server) {
		f := fakes{pods: []*v1.Pod{a}, known: make(chan struct{})}
		clk := clocktesting.NewFakeClock(time.Now())
		return f, clk, New(Options{Pods: f, Devices: f, CPUs: f, Memory: f, Claims: f, Clock: clk})
	}
	list := func(ctx context.Context, s *Server) <-chan error {
		done := make(chan error, 1)
		go func() {
			out, err := s.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
			if err == nil && len(out.PodResources) != 1 {
				err = fmt.Errorf("List answered %v, want pod a", out)
			}
			done <- err
		}()
		return done
	}

	f, clk, s := start()
	done := list(context.Background(), s)
	testutil.WaitFor(t, "List to wait", clk.HasWaiters)
	close(f.known)
	testutil.Must(t, <-done)

	_, clk, s = start()
	done = list(context.Background(), s)
	testutil.WaitFor(t, "List to wait", clk.HasWaiters)
	clk.Step(maxPodsWait)
	if err := <-done; status.Code(err) != codes.Unavailable {
		t.Errorf("List past maxPodsWait: %v, want Unavailable", err)
	}

	_, clk, s = start()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := s.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodName: "a", PodNamespace: "ns"})
		got <- err
	}()
	testutil.WaitFor(t, "Get to wait", clk.HasWaiters)
	cancel()
	if err := <-got; status.Code(err) != codes.Unavailable {
		t.Errorf("Get past its deadline: %v, want Unavailable", err)
	}
}
