package devicemanager

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/pkg/resources/topologymanager"
)

const res = "example.com/resource"

// plugin is a device plugin serving over a real socket, as the sample
// device plugin does.
type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	name, socket string
	// endpoint, when set, is what the plugin registers as its socket
	// (an attack on the path join).
	endpoint string
	opts     *pluginapi.DevicePluginOptions
	srv      *grpc.Server
	updates  chan []*pluginapi.Device

	mu        sync.Mutex
	calls     []string
	preferred []string
}

func startPlugin(t *testing.T, dir, name string, opts *pluginapi.DevicePluginOptions, devices ...*pluginapi.Device) *plugin {
	t.Helper()
	p := &plugin{name: name, socket: filepath.Join(dir, name+".sock"), opts: opts, updates: make(chan []*pluginapi.Device, 10)}
	ln, err := net.Listen("unix", p.socket)
	testutil.Must(t, err)
	p.srv = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.srv, p)
	go p.srv.Serve(ln)
	t.Cleanup(p.srv.Stop)
	p.updates <- devices
	return p
}

func (p *plugin) record(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, fmt.Sprintf(format, args...))
}

func (p *plugin) recorded() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.calls...)
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return p.opts, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	for {
		select {
		case devs := <-p.updates:
			if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
				return err
			}
		case <-s.Context().Done():
			return nil
		}
	}
}

func (p *plugin) GetPreferredAllocation(_ context.Context, r *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	req := r.ContainerRequests[0]
	p.record("preferred of %v size %d", req.AvailableDeviceIDs, req.AllocationSize)
	p.mu.Lock()
	defer p.mu.Unlock()
	return &pluginapi.PreferredAllocationResponse{ContainerResponses: []*pluginapi.ContainerPreferredAllocationResponse{{DeviceIDs: p.preferred}}}, nil
}

func (p *plugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	ids := r.ContainerRequests[0].DevicesIds
	p.record("allocate %v", ids)
	resp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"DEVICES": strings.Join(ids, ",")}, Annotations: map[string]string{"example.com/devices": strings.Join(ids, ",")}}
	for _, id := range ids {
		resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: "/tmp/" + id, HostPath: "/tmp/" + id})
		resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{ContainerPath: "/dev/" + id, HostPath: "/dev/null", Permissions: "rw"})
		resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: res + "=CDI-" + id})
	}
	return &pluginapi.AllocateResponse{ContainerResponses: []*pluginapi.ContainerAllocateResponse{resp}}, nil
}

func (p *plugin) PreStartContainer(_ context.Context, r *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	p.record("prestart %v", r.DevicesIds)
	return &pluginapi.PreStartContainerResponse{}, nil
}

// register registers the plugin as plugins do: on the manager's socket.
func (p *plugin) register(m *Manager, resource, version string) error {
	conn, err := grpc.NewClient("unix://"+m.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	endpoint := filepath.Base(p.socket)
	if p.endpoint != "" {
		endpoint = p.endpoint
	}
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: version, Endpoint: endpoint, ResourceName: resource, Options: p.opts}, grpc.WaitForReady(true))
	return err
}

func dev(id string, healthy bool, numa ...int64) *pluginapi.Device {
	d := &pluginapi.Device{ID: id, Health: pluginapi.Healthy}
	if !healthy {
		d.Health = pluginapi.Unhealthy
	}
	if len(numa) > 0 {
		d.Topology = &pluginapi.TopologyInfo{}
		for _, n := range numa {
			d.Topology.Nodes = append(d.Topology.Nodes, &pluginapi.NUMANode{ID: n})
		}
	}
	return d
}

type fixture struct {
	m      *Manager
	clock  *testingclock.FakeClock
	root   string
	cancel func()
	done   chan error
}

func start(t *testing.T, root string, running map[types.UID]sets.Set[string]) *fixture {
	t.Helper()
	f := &fixture{root: root, clock: testingclock.NewFakeClock(time.Now()), done: make(chan error, 1)}
	m, err := New(Options{RootDir: root, Clock: f.clock, RunningAtStart: running})
	testutil.Must(t, err)
	f.m = m
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go func() { f.done <- m.Run(ctx) }()
	testutil.WaitFor(t, "the registration socket", func() bool { _, err := os.Stat(m.SocketPath()); return err == nil })
	t.Cleanup(f.stop)
	return f
}

func (f *fixture) stop() {
	if f.cancel != nil {
		f.cancel()
		<-f.done
		f.cancel = nil
	}
}

func (f *fixture) capacity(t *testing.T) string {
	c, a := f.m.Capacity()
	cq, aq := c[res], a[res]
	if _, ok := c[res]; !ok {
		return "none"
	}
	return fmt.Sprintf("capacity=%d allocatable=%d", cq.Value(), aq.Value())
}

func podWith(uid string, n int64, init ...int64) *v1.Pod {
	p := &v1.Pod{}
	p.Name, p.Namespace, p.UID = uid, "ns", types.UID(uid)
	limits := func(n int64) v1.ResourceRequirements {
		l := v1.ResourceList{res: *resource.NewQuantity(n, resource.DecimalSI)}
		return v1.ResourceRequirements{Limits: l, Requests: l}
	}
	p.Spec.Containers = []v1.Container{{Name: "c", Resources: limits(n)}}
	for i, k := range init {
		p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: fmt.Sprintf("init%d", i), Resources: limits(k)})
	}
	return p
}

// TestResourceLifecycle is the golden trace of a resource's states:
// registered, devices turning unhealthy, the plugin stopping, the grace
// period, a registration again, and the grace period running out.
func TestResourceLifecycle(t *testing.T) {
	f := start(t, t.TempDir(), nil)
	var trace []string
	step := func(what string) { trace = append(trace, fmt.Sprintf("%-44s %s", what, f.capacity(t))) }
	step("before any plugin")
	p := startPlugin(t, f.m.dir, "dp1", &pluginapi.DevicePluginOptions{}, dev("Dev-1", true), dev("Dev-2", true))
	testutil.Must(t, p.register(f.m, res, pluginapi.Version))
	testutil.WaitFor(t, "devices listed", func() bool { return f.capacity(t) == "capacity=2 allocatable=2" })
	step("registered, ListAndWatch: 2 healthy")
	p.updates <- []*pluginapi.Device{dev("Dev-1", true), dev("Dev-2", false)}
	testutil.WaitFor(t, "Dev-2 unhealthy", func() bool { return f.capacity(t) == "capacity=2 allocatable=1" })
	step("ListAndWatch: Dev-2 unhealthy")
	p.srv.Stop()
	testutil.WaitFor(t, "the plugin seen stopped", func() bool { return f.capacity(t) == "capacity=2 allocatable=0" })
	step("plugin stopped")
	f.clock.Step(endpointStopGracePeriod - time.Second)
	step("4m59s later")
	p2 := startPlugin(t, f.m.dir, "dp2", &pluginapi.DevicePluginOptions{}, dev("Dev-1", true), dev("Dev-2", true), dev("Dev-3", true))
	testutil.Must(t, p2.register(f.m, res, pluginapi.Version))
	testutil.WaitFor(t, "the new plugin's devices", func() bool { return f.capacity(t) == "capacity=3 allocatable=3" })
	step("registered again, ListAndWatch: 3 healthy")
	p2.srv.Stop()
	testutil.WaitFor(t, "the plugin seen stopped", func() bool { return f.capacity(t) == "capacity=3 allocatable=0" })
	step("plugin stopped")
	f.clock.Step(endpointStopGracePeriod + time.Second)
	step("5m1s later: removed")
	testutil.Golden(t, filepath.Join("testdata", "resource_lifecycle.txt"), strings.Join(trace, "\n")+"\n")
}

// TestCheckpointMissingUntilDevicesArrive: a node no plugin has given
// devices has no checkpoint (its extended resources are reset when
// nodelet finds its Node registered); the first devices write it, and a
// restarted manager finds it.
func TestCheckpointMissingUntilDevicesArrive(t *testing.T) {
	root := t.TempDir()
	f := start(t, root, nil)
	if !f.m.CheckpointMissing() {
		t.Fatal("a checkpoint before any plugin")
	}
	p := startPlugin(t, f.m.dir, "dp1", &pluginapi.DevicePluginOptions{}, dev("Dev-1", true))
	testutil.Must(t, p.register(f.m, res, pluginapi.Version))
	testutil.WaitFor(t, "devices listed", func() bool { return f.capacity(t) == "capacity=1 allocatable=1" })
	if f.m.CheckpointMissing() {
		t.Fatal("no checkpoint once the plugin's devices arrived")
	}
	f.stop()
	if again := start(t, root, nil); again.m.CheckpointMissing() {
		t.Fatal("the restarted manager finds no checkpoint")
	}
}

// TestRegistrationRefused: versions, names and endpoints are checked.
func TestRegistrationRefused(t *testing.T) {
	f := start(t, t.TempDir(), nil)
	p := startPlugin(t, f.m.dir, "dp", &pluginapi.DevicePluginOptions{}, dev("Dev-1", true))
	for _, tc := range []struct{ resource, version, endpoint, want string }{
		{res, "v1alpha", "", `requested API version "v1alpha" is not supported`},
		{"resource", pluginapi.Version, "", `the ResourceName "resource" is invalid`},
		{"kubernetes.io/gpu", pluginapi.Version, "", `the ResourceName "kubernetes.io/gpu" is invalid`},
		{res, pluginapi.Version, "../../../run/other.sock", `invalid endpoint "../../../run/other.sock"`},
	} {
		p.endpoint = tc.endpoint
		err := p.register(f.m, tc.resource, tc.version)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v", tc, err)
		}
	}
	if got := f.capacity(t); got != "none" {
		t.Fatalf("a refused plugin has capacity: %s", got)
	}
}

// TestAllocateAndCreate: a container gets free devices at admission
// (the plugin's preferred first), and its config the plugin's answer,
// after PreStartContainer; a pod asking for more than is free is
// refused as upstream refuses it.
func TestAllocateAndCreate(t *testing.T) {
	f := start(t, t.TempDir(), nil)
	p := startPlugin(t, f.m.dir, "dp", &pluginapi.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true},
		dev("Dev-1", true), dev("Dev-2", true), dev("Dev-3", true))
	p.preferred = []string{"Dev-3"}
	testutil.Must(t, p.register(f.m, res, pluginapi.Version))
	testutil.WaitFor(t, "devices listed", func() bool { return f.capacity(t) == "capacity=3 allocatable=3" })

	a := podWith("a", 1)
	testutil.Must(t, f.m.Allocate(a, &a.Spec.Containers[0], topologymanager.Hint{}))
	cfg := &runtimeapi.ContainerConfig{Envs: []*runtimeapi.KeyValue{{Key: "DEVICES", Value: []byte("the pod's own")}}}
	testutil.Must(t, f.m.PreCreateContainer(context.Background(), a, &a.Spec.Containers[0], cfg))
	if got := strings.Join(p.recorded(), "|"); got != "preferred of [Dev-1 Dev-2 Dev-3] size 1|allocate [Dev-3]|prestart [Dev-3]" {
		t.Fatalf("plugin calls %s", got)
	}
	if len(cfg.Mounts) != 1 || cfg.Mounts[0].HostPath != "/tmp/Dev-3" || len(cfg.Devices) != 1 || cfg.Devices[0].ContainerPath != "/dev/Dev-3" ||
		len(cfg.CDIDevices) != 1 || cfg.CDIDevices[0].Name != res+"=CDI-Dev-3" || cfg.Annotations["example.com/devices"] != "Dev-3" ||
		len(cfg.Envs) != 1 || string(cfg.Envs[0].Value) != "the pod's own" {
		t.Fatalf("config %+v", cfg)
	}
	if d := f.m.ContainerDevices("a", "c"); len(d) != 1 || d[0].IDs[0] != "Dev-3" {
		t.Fatalf("container devices %+v", d)
	}

	b := podWith("b", 3)
	err := f.m.Allocate(b, &b.Spec.Containers[0], topologymanager.Hint{})
	if err == nil || err.Error() != "requested number of devices unavailable for example.com/resource. Requested: 3, Available: 2" {
		t.Fatalf("3 of 2 free: %v", err)
	}
	// Once pod a is no longer active its device is free.
	f.m.RetainActive(nil)
	testutil.Must(t, f.m.Allocate(b, &b.Spec.Containers[0], topologymanager.Hint{}))
}

// TestInitContainerDevicesReused: the app container takes its init
// container's devices.
func TestInitContainerDevicesReused(t *testing.T) {
	f := start(t, t.TempDir(), nil)
	p := startPlugin(t, f.m.dir, "dp", &pluginapi.DevicePluginOptions{}, dev("Dev-1", true), dev("Dev-2", true))
	testutil.Must(t, p.register(f.m, res, pluginapi.Version))
	testutil.WaitFor(t, "devices listed", func() bool { return f.capacity(t) == "capacity=2 allocatable=2" })
	pod := podWith("p", 2, 2)
	testutil.Must(t, f.m.Allocate(pod, &pod.Spec.InitContainers[0], topologymanager.Hint{}))
	testutil.Must(t, f.m.Allocate(pod, &pod.Spec.Containers[0], topologymanager.Hint{}))
	if i, c := f.m.ContainerDevices("p", "init0"), f.m.ContainerDevices("p", "c"); strings.Join(i[0].IDs, ",") != "Dev-1,Dev-2" || strings.Join(c[0].IDs, ",") != "Dev-1,Dev-2" {
		t.Fatalf("init %+v, app %+v", i, c)
	}
}

// TestNUMAHintsAndAffinity: hints name the NUMA nodes holding enough
// devices, and an allocation takes devices of the affinity's nodes.
func TestNUMAHintsAndAffinity(t *testing.T) {
	f := start(t, t.TempDir(), nil)
	p := startPlugin(t, f.m.dir, "dp", &pluginapi.DevicePluginOptions{}, dev("Dev-1", true, 0), dev("Dev-2", true, 1), dev("Dev-3", true, 1))
	testutil.Must(t, p.register(f.m, res, pluginapi.Version))
	testutil.WaitFor(t, "devices listed", func() bool { return f.capacity(t) == "capacity=3 allocatable=3" })
	pod := podWith("p", 2)
	var got []string
	for _, h := range f.m.TopologyHints(pod, &pod.Spec.Containers[0])[res] {
		got = append(got, h.String())
	}
	if s := strings.Join(got, " "); s != "{1} preferred=true {0,1} preferred=false" {
		t.Fatalf("hints %s", s)
	}
	one := podWith("one", 1)
	testutil.Must(t, f.m.Allocate(one, &one.Spec.Containers[0], topologymanager.Hint{NUMANodes: topologymanager.NewMask(1), Preferred: true}))
	if d := f.m.ContainerDevices("one", "c"); d[0].IDs[0] == "Dev-1" || d[0].NUMANodes[0] != 1 {
		t.Fatalf("affinity {1}: %+v", d)
	}
}

// TestCheckpointAcrossRestart: a restarted manager knows what every
// container holds; a container that kept running keeps its devices
// before its plugin is back, admission counts them, and a new one
// waits for the plugin.
func TestCheckpointAcrossRestart(t *testing.T) {
	root := t.TempDir()
	f := start(t, root, nil)
	p := startPlugin(t, f.m.dir, "dp", &pluginapi.DevicePluginOptions{}, dev("Dev-1", true), dev("Dev-2", true))
	testutil.Must(t, p.register(f.m, res, pluginapi.Version))
	testutil.WaitFor(t, "devices listed", func() bool { return f.capacity(t) == "capacity=2 allocatable=2" })
	a := podWith("a", 2)
	testutil.Must(t, f.m.Allocate(a, &a.Spec.Containers[0], topologymanager.Hint{}))
	f.stop()
	p.srv.Stop()

	g := start(t, root, map[types.UID]sets.Set[string]{"a": sets.New("c")})
	if got := g.capacity(t); got != "capacity=0 allocatable=0" {
		t.Fatalf("before the plugin is back: %s", got)
	}
	if q := g.m.AdmissionAllocatable()[res]; q.Value() != 2 {
		t.Fatalf("admission counts %d devices, want the 2 held", q.Value())
	}
	testutil.Must(t, g.m.Allocate(a, &a.Spec.Containers[0], topologymanager.Hint{}))
	if d := g.m.ContainerDevices("a", "c"); strings.Join(d[0].IDs, ",") != "Dev-1,Dev-2" {
		t.Fatalf("after the restart: %+v", d)
	}
	b := podWith("b", 1)
	if err := g.m.Allocate(b, &b.Spec.Containers[0], topologymanager.Hint{}); err == nil || err.Error() != "cannot allocate unregistered device example.com/resource" {
		t.Fatalf("new pod before the plugin is back: %v", err)
	}
	// The sockets left behind were removed, so plugins see the
	// registration socket made anew.
	if _, err := os.Stat(p.socket); !os.IsNotExist(err) {
		t.Fatalf("stale plugin socket: %v", err)
	}
}
