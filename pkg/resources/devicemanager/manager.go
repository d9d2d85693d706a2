// Package devicemanager is the device plugin manager, as the upstream
// kubelet's: device plugins (the NVIDIA, AMD and Intel GPU plugins,
// SR-IOV, FPGA...) register at <root>/device-plugins/kubelet.sock, and
// their devices become the node's extended resources, given to
// containers at admission.
//
// Each resource goes through these states:
//
//	           Register
//	(none) ──────────────► connected ──ListAndWatch──► devices (healthy, unhealthy)
//	                         ▲    │ the stream ends (the plugin stopped)
//	            Register     │    ▼
//	            again ───────┴─ stopped: every device unhealthy, capacity kept
//	                              │ endpointStopGracePeriod (5 min)
//	                              ▼
//	                           removed: capacity and allocatable 0
//
// Capacity counts every device, allocatable the healthy ones. At
// admission (the topology manager's Allocate) a container asking for a
// resource gets devices not held by another container (an init
// container's go on to the containers after it), the plugin's preferred
// ones first, and the plugin's Allocate answer for them; a pod asking for
// more than is free is refused (UnexpectedAdmissionError). When the
// container is created it gets the answer's devices, mounts, environment,
// annotations and CDI devices, after the plugin's PreStartContainer if it
// asks for one. Allocations are kept in <root>/device-plugins/
// kubelet_internal_checkpoint (upstream's format), so a restarted nodelet,
// or the kubelet after it, knows which devices each running container
// holds. A pod's devices are free again once it is no longer active.
package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/resources/devicemanager/checkpoint"
	"github.com/nodelet/nodelet/pkg/resources/pluginwatcher"
)

// endpointStopGracePeriod is how long a stopped plugin's resource is
// still reported, as upstream: a plugin being upgraded comes back.
const endpointStopGracePeriod = 5 * time.Minute

// Options configure a Manager.
type Options struct {
	RootDir string
	Clock   clock.Clock
	// RunningAtStart are the containers running when nodelet started, by
	// pod UID: they keep the devices the checkpoint gives them even
	// before their plugin registers again.
	RunningAtStart map[types.UID]sets.Set[string]
	// Changed is told when capacity or allocatable changed (the node
	// status writes them then); nil for nobody.
	Changed func()
}

// resourceState is one resource: its plugin and devices.
type resourceState struct {
	endpoint *endpoint
	// generation tells a stale ListAndWatch (of a plugin that registered
	// again since) from the current one.
	generation int
	stopped    time.Time
	devices    map[string]*pluginapi.Device
}

func (r *resourceState) healthy() sets.Set[string] {
	out := sets.New[string]()
	if r.endpoint == nil {
		return out
	}
	for id, d := range r.devices {
		if d.Health == pluginapi.Healthy {
			out.Insert(id)
		}
	}
	return out
}

// allocation is what one container holds of one resource.
type allocation struct {
	ids  checkpoint.DevicesPerNUMA
	resp *pluginapi.ContainerAllocateResponse
}

func (a allocation) devices() sets.Set[string] {
	out := sets.New[string]()
	for _, ids := range a.ids {
		out.Insert(ids...)
	}
	return out
}

// Manager is the device plugin manager.
type Manager struct {
	o    Options
	dir  string
	path string

	// allocMu serializes allocations; mu guards the state.
	allocMu   sync.Mutex
	mu        sync.Mutex
	resources map[string]*resourceState
	// removed are resources once registered whose plugin went for good:
	// reported with capacity 0, as upstream.
	removed sets.Set[string]
	pods    podDevices
	// reuse: devices the pod being admitted may give its next containers.
	reuse map[string]map[string]sets.Set[string]
}

// New reads the checkpoint: resources it names are known (with no
// devices until their plugin registers), and containers keep what it
// says they hold.
func New(o Options) (*Manager, error) {
	dir := filepath.Join(o.RootDir, "device-plugins")
	m := &Manager{o: o, dir: dir, path: filepath.Join(dir, checkpoint.File), resources: map[string]*resourceState{},
		removed: sets.New[string](), pods: podDevices{}, reuse: map[string]map[string]sets.Set[string]{}}
	if o.Changed == nil {
		m.o.Changed = func() {}
	}
	cp, err := checkpoint.Load(m.path)
	if err != nil {
		return nil, err
	}
	for _, e := range cp.Entries() {
		resp := &pluginapi.ContainerAllocateResponse{}
		if err := proto.Unmarshal(e.AllocResp, resp); err != nil {
			klog.ErrorS(err, "Skipping a device checkpoint entry that does not decode", "podUID", e.PodUID, "container", e.ContainerName, "resource", e.ResourceName)
			continue
		}
		m.pods.set(e.PodUID, e.ContainerName, e.ResourceName, allocation{ids: e.DeviceIDs, resp: resp})
	}
	now := o.Clock.Now()
	for name := range cp.Registered() {
		// Capacity stays 0 until the plugin registers again.
		m.resources[name] = &resourceState{stopped: now, devices: map[string]*pluginapi.Device{}}
	}
	return m, nil
}

// podDevices are what containers hold: pod UID → container → resource →
// allocation.
type podDevices map[string]map[string]map[string]allocation

func (p podDevices) set(pod, container, resource string, a allocation) {
	if p[pod] == nil {
		p[pod] = map[string]map[string]allocation{}
	}
	if p[pod][container] == nil {
		p[pod][container] = map[string]allocation{}
	}
	p[pod][container][resource] = a
}

// SocketPath is where plugins register.
func (m *Manager) SocketPath() string {
	return filepath.Join(m.dir, filepath.Base(pluginapi.KubeletSocket))
}

// Run serves the registration socket until ctx ends. Sockets left in the
// directory are removed first, as upstream does: plugins watch for the
// registration socket to be made anew and register again.
func (m *Manager) Run(ctx context.Context) error {
	if err := os.MkdirAll(m.dir, 0o750); err != nil {
		return err
	}
	removeSockets(m.dir)
	ln, err := net.Listen("unix", m.SocketPath())
	if err != nil {
		return fmt.Errorf("device plugin registration socket: %w", err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, &registration{m: m, ctx: ctx})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	klog.InfoS("Device plugin registration serving", "socket", m.SocketPath())
	select {
	case <-ctx.Done():
		srv.Stop()
		<-done
	case err = <-done:
	}
	m.mu.Lock()
	for _, r := range m.resources {
		if r.endpoint != nil {
			r.endpoint.close()
		}
	}
	m.mu.Unlock()
	os.Remove(m.SocketPath())
	return err
}

// removeSockets removes the sockets plugins left in dir: a plugin sees
// its socket gone and registers again, as with upstream's kubelet.
func removeSockets(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Type()&os.ModeSocket == 0 {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			klog.ErrorS(err, "Failed to remove a socket from the device plugin directory", "socket", e.Name())
		}
	}
}

// registration is the Registration service plugins call.
type registration struct {
	pluginapi.UnimplementedRegistrationServer
	m   *Manager
	ctx context.Context
}

func (r *registration) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	klog.InfoS("Device plugin registering", "resource", req.ResourceName, "endpoint", req.Endpoint, "version", req.Version)
	if err := validRegistration(req); err != nil {
		klog.ErrorS(err, "Refused a device plugin registration", "resource", req.ResourceName)
		return &pluginapi.Empty{}, err
	}
	e, err := connect(ctx, req.ResourceName, filepath.Join(r.m.dir, req.Endpoint))
	if err != nil {
		klog.ErrorS(err, "Could not reach a registering device plugin", "resource", req.ResourceName, "endpoint", req.Endpoint)
		return &pluginapi.Empty{}, err
	}
	r.m.connected(r.ctx, e)
	return &pluginapi.Empty{}, nil
}

// validRegistration: the API version nodelet speaks, an extended
// resource name, and an endpoint that is a file in the directory.
func validRegistration(req *pluginapi.RegisterRequest) error {
	supported := false
	for _, v := range pluginapi.SupportedVersions {
		supported = supported || v == req.Version
	}
	if !supported {
		return fmt.Errorf("requested API version %q is not supported by kubelet. Supported version is %q", req.Version, pluginapi.SupportedVersions)
	}
	if !podutil.IsExtendedResourceName(v1.ResourceName(req.ResourceName)) {
		return fmt.Errorf("the ResourceName %q is invalid", req.ResourceName)
	}
	if req.Endpoint == "" || filepath.Base(req.Endpoint) != req.Endpoint || req.Endpoint == ".." || req.Endpoint == "." {
		return fmt.Errorf("invalid endpoint %q: a socket file name in the device plugin directory", req.Endpoint)
	}
	return nil
}

// connected makes a registered plugin the resource's endpoint (a plugin
// registering again replaces its former self) and follows its devices.
func (m *Manager) connected(ctx context.Context, e *endpoint) {
	m.mu.Lock()
	r := m.resources[e.resource]
	if r == nil {
		r = &resourceState{devices: map[string]*pluginapi.Device{}}
		m.resources[e.resource] = r
	}
	if r.endpoint != nil {
		r.endpoint.close()
	}
	r.generation++
	r.endpoint, r.stopped = e, time.Time{}
	m.removed.Delete(e.resource)
	gen := r.generation
	lctx, cancel := context.WithCancel(ctx)
	e.cancel = cancel
	m.mu.Unlock()
	klog.InfoS("Device plugin registered", "resource", e.resource, "socket", e.socket, "preStartRequired", e.options.PreStartRequired,
		"getPreferredAllocationAvailable", e.options.GetPreferredAllocationAvailable)
	go m.listAndWatch(lctx, e, gen)
}

// listAndWatch follows the plugin's devices until its stream ends.
func (m *Manager) listAndWatch(ctx context.Context, e *endpoint, gen int) {
	stream, err := e.api.ListAndWatch(ctx, &pluginapi.Empty{})
	for err == nil {
		var resp *pluginapi.ListAndWatchResponse
		if resp, err = stream.Recv(); err == nil {
			m.devicesChanged(e.resource, gen, resp.Devices)
		}
	}
	if ctx.Err() == nil {
		klog.ErrorS(err, "ListAndWatch ended unexpectedly for device plugin", "resource", e.resource)
	}
	m.stopped(e.resource, gen)
}

func (m *Manager) devicesChanged(resource string, gen int, devices []*pluginapi.Device) {
	m.mu.Lock()
	r := m.resources[resource]
	if r == nil || r.generation != gen {
		m.mu.Unlock()
		return
	}
	r.devices = map[string]*pluginapi.Device{}
	for _, d := range devices {
		r.devices[d.ID] = d
	}
	healthy := r.healthy().Len()
	err := saveCheckpoint(m.path, m.pods, m.resources)
	m.mu.Unlock()
	if err != nil {
		klog.ErrorS(err, "Failed to write the device manager checkpoint")
	}
	klog.V(2).InfoS("Processed device updates for resource", "resource", resource, "total", len(devices), "healthy", healthy)
	m.o.Changed()
}

// stopped: the plugin's stream ended; unless it registered again since,
// its devices are unhealthy now and the grace period starts.
func (m *Manager) stopped(resource string, gen int) {
	m.mu.Lock()
	r := m.resources[resource]
	if r == nil || r.generation != gen {
		m.mu.Unlock()
		return
	}
	r.endpoint.close()
	r.endpoint, r.stopped = nil, m.o.Clock.Now()
	m.mu.Unlock()
	klog.InfoS("Device plugin stopped: its devices are unhealthy until it registers again", "resource", resource, "gracePeriod", endpointStopGracePeriod)
	m.o.Changed()
}

// Capacity is the device plugin resources of the node status: every
// device in capacity, the healthy ones in allocatable. A resource whose
// plugin has been gone past the grace period is reported as 0 (it had
// been registered), as upstream.
func (m *Manager) Capacity() (capacity, allocatable v1.ResourceList) {
	m.mu.Lock()
	defer m.mu.Unlock()
	capacity, allocatable = v1.ResourceList{}, v1.ResourceList{}
	now := m.o.Clock.Now()
	removed := false
	for name, r := range m.resources {
		if r.endpoint == nil && now.Sub(r.stopped) > endpointStopGracePeriod {
			delete(m.resources, name)
			m.removed.Insert(name)
			removed = true
			klog.InfoS("Device plugin resource removed: its plugin did not come back", "resource", name)
			continue
		}
		capacity[v1.ResourceName(name)] = *resource.NewQuantity(int64(len(r.devices)), resource.DecimalSI)
		allocatable[v1.ResourceName(name)] = *resource.NewQuantity(int64(r.healthy().Len()), resource.DecimalSI)
	}
	for name := range m.removed {
		capacity[v1.ResourceName(name)] = *resource.NewQuantity(0, resource.DecimalSI)
		allocatable[v1.ResourceName(name)] = *resource.NewQuantity(0, resource.DecimalSI)
	}
	if removed {
		if err := saveCheckpoint(m.path, m.pods, m.resources); err != nil {
			klog.ErrorS(err, "Failed to write the device manager checkpoint")
		}
	}
	return capacity, allocatable
}

// CheckpointMissing reports whether no checkpoint exists: no device
// plugin has ever given this node a device, or the node was recreated
// (upstream's ShouldResetExtendedResourceCapacity). The checkpoint is
// written as a plugin's devices arrive, never at start.
func (m *Manager) CheckpointMissing() bool {
	_, err := os.Stat(m.path)
	return errors.Is(err, os.ErrNotExist)
}

// AdmissionAllocatable is allocatable as admission counts it: at least
// the devices containers hold, so pods holding devices are admitted
// again after a restart before their plugin registers (upstream's
// sanitizeNodeAllocatable).
func (m *Manager) AdmissionAllocatable() v1.ResourceList {
	_, alloc := m.Capacity()
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, held := range m.pods.allocated() {
		if q, ok := alloc[v1.ResourceName(name)]; !ok || q.Value() < int64(held.Len()) {
			alloc[v1.ResourceName(name)] = *resource.NewQuantity(int64(held.Len()), resource.DecimalSI)
		}
	}
	return alloc
}

// allocated are the devices containers hold, by resource.
func (p podDevices) allocated() map[string]sets.Set[string] {
	out := map[string]sets.Set[string]{}
	for _, cs := range p {
		for _, rs := range cs {
			for name, a := range rs {
				if out[name] == nil {
					out[name] = sets.New[string]()
				}
				out[name] = out[name].Union(a.devices())
			}
		}
	}
	return out
}

// saveCheckpoint writes what containers hold and the resources
// registered (with their healthy devices) to path; the caller holds the
// lock that guards pods and resources.
func saveCheckpoint(path string, pods podDevices, resources map[string]*resourceState) error {
	entries, err := pods.entries()
	if err != nil {
		return err
	}
	registered := map[string][]string{}
	for name, r := range resources {
		registered[name] = sets.List(r.healthy())
	}
	return checkpoint.New(entries, registered).Save(path)
}

// RetainActive frees the devices of every pod not active.
func (m *Manager) RetainActive(active []*v1.Pod) {
	keep := podutil.UIDs(active)
	m.mu.Lock()
	defer m.mu.Unlock()
	freed := false
	for pod := range m.pods {
		if !keep[types.UID(pod)] {
			delete(m.pods, pod)
			freed = true
			klog.InfoS("Freed the devices of a pod no longer active", "podUID", pod)
		}
	}
	if freed {
		if err := saveCheckpoint(m.path, m.pods, m.resources); err != nil {
			klog.ErrorS(err, "Failed to write the device manager checkpoint")
		}
	}
}

// Register implements pluginwatcher.Handler: device plugins may
// register through the plugin watcher (type DevicePlugin) too, naming
// their resource and their socket.
func (m *Manager) Register(ctx context.Context, p pluginwatcher.Plugin) error {
	if !slices.ContainsFunc(p.Versions, func(v string) bool { return slices.Contains(pluginapi.SupportedVersions[:], v) }) {
		return fmt.Errorf("requested API versions %q are not supported by kubelet. Supported version is %q", p.Versions, pluginapi.SupportedVersions)
	}
	if !podutil.IsExtendedResourceName(v1.ResourceName(p.Name)) {
		return fmt.Errorf("invalid name of device plugin socket: the ResourceName %q is invalid", p.Name)
	}
	e, err := connect(ctx, p.Name, p.Endpoint)
	if err != nil {
		return err
	}
	// The plugin's stream lives until it goes or Run ends, not with the
	// registration call.
	m.connected(context.Background(), e)
	return nil
}

// Deregister implements pluginwatcher.Handler: the plugin's
// registration socket went, so it stopped.
func (m *Manager) Deregister(_ context.Context, p pluginwatcher.Plugin) {
	m.mu.Lock()
	r := m.resources[p.Name]
	gen := 0
	if r != nil && r.endpoint != nil && r.endpoint.socket == p.Endpoint {
		gen = r.generation
	}
	m.mu.Unlock()
	if gen != 0 {
		m.stopped(p.Name, gen)
	}
}

// entries are the checkpoint's record of what containers hold, in a
// stable order.
func (p podDevices) entries() ([]checkpoint.PodDevicesEntry, error) {
	var entries []checkpoint.PodDevicesEntry
	for _, pod := range slices.Sorted(maps.Keys(p)) {
		for _, c := range slices.Sorted(maps.Keys(p[pod])) {
			for _, res := range slices.Sorted(maps.Keys(p[pod][c])) {
				a := p[pod][c][res]
				resp, err := proto.Marshal(a.resp)
				if err != nil {
					return nil, err
				}
				entries = append(entries, checkpoint.PodDevicesEntry{PodUID: pod, ContainerName: c, ResourceName: res, DeviceIDs: a.ids, AllocResp: resp})
			}
		}
	}
	return entries, nil
}
