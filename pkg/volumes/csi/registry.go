// Package csi is the node side of the Container Storage Interface, as the
// upstream kubelet speaks it: CSI drivers register through the plugin
// watcher (pkg/resources/pluginwatcher: a socket under <root-dir>/plugins_registry
// answering pluginregistration.v1 GetInfo), nodelet
// asks each driver NodeGetInfo and keeps the CSINode object and the
// Node's topology labels current, and pods' CSI volumes are staged
// (NodeStageVolume, for drivers with STAGE_UNSTAGE_VOLUME) to a global
// mount and published (NodePublishVolume) to the pod's volume directory,
// and unpublished and unstaged in reverse. What is published is recorded
// beside it on disk (vol_data.json), so teardown works after a restart.
//
//	socket appears ─▶ GetInfo ─▶ NodeGetInfo ─▶ CSINode + labels ─▶ NotifyRegistrationStatus(ok)
//	socket goes    ─▶ driver forgotten, removed from CSINode
package csi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/nodelet/nodelet/pkg/resources/pluginwatcher"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Nodes is what registration changes in the API: the driver's entry in
// the CSINode object, and the Node's topology labels and node ID
// annotation. Nil on a node without an API server.
type Nodes interface {
	SetDriver(ctx context.Context, d DriverInfo) error
	RemoveDriver(ctx context.Context, name string) error
}

// DriverInfo is what a driver told nodelet when it registered.
type DriverInfo struct {
	Name   string
	NodeID string
	// MaxVolumes is the most volumes the driver can publish on the node;
	// 0 is no limit.
	MaxVolumes int64
	// Topology is the node's topology segments, as labels.
	Topology map[string]string
	// Stages says the driver has STAGE_UNSTAGE_VOLUME.
	Stages bool
	// Stats says the driver has GET_VOLUME_STATS.
	Stats bool
	// MountGroup says the driver has VOLUME_MOUNT_GROUP: it applies the
	// pod's fsGroup itself, given in the mount capability.
	MountGroup bool
}

// Driver is a registered driver: what it said, and its Node service.
type Driver struct {
	DriverInfo
	Node csipb.NodeClient
	conn *grpc.ClientConn
	// socket is the registration socket it came through.
	socket string
}

// RegistryOptions configure a Registry.
type RegistryOptions struct {
	RootDir string
	Nodes   Nodes
	Clock   clock.WithTicker
	// Poll is how often refused CSINode changes are looked at; 0 is a
	// second.
	Poll time.Duration
	// Timeout bounds each call to a driver; 0 is a minute.
	Timeout time.Duration
}

// Registry keeps the registered drivers.
type Registry struct {
	o RegistryOptions

	mu      sync.Mutex
	drivers map[string]*Driver
	// pending holds the CSINode changes the API server has not taken
	// yet, by driver.
	pending map[string]*apiChange
}

// NewRegistry returns a registry with no drivers; Run watches for them.
func NewRegistry(o RegistryOptions) *Registry {
	if o.Poll == 0 {
		o.Poll = time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	return &Registry{o: o, drivers: map[string]*Driver{}, pending: map[string]*apiChange{}}
}

// Dir is the registration directory drivers register through.
func (r *Registry) Dir() string { return pluginwatcher.Dir(r.o.RootDir) }

// Driver returns a registered driver by name.
func (r *Registry) Driver(name string) (*Driver, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d, ok := r.drivers[name]; ok {
		return d, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrNotRegistered, name)
}

// ErrNotRegistered says no driver of that name registered (yet).
var ErrNotRegistered = errors.New("CSI driver not registered")

// Run retries the CSINode changes the API server has not taken yet,
// until ctx ends; the drivers themselves come from the plugin watcher.
func (r *Registry) Run(ctx context.Context) error {
	tick := r.o.Clock.NewTicker(r.o.Poll)
	defer tick.Stop()
	defer r.closeAll()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
			r.retryAPI(ctx)
		}
	}
}

// retryAfter is how long a CSINode change the API refused waits.
const retryAfter = 10 * time.Second

func dial(sock string) (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// Register implements pluginwatcher.Handler: a CSI driver answering
// NodeGetInfo is recorded, and the API told.
func (r *Registry) Register(ctx context.Context, p pluginwatcher.Plugin) error {
	cctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	d, err := r.validate(cctx, p)
	if err != nil {
		return err
	}
	d.socket = p.Socket
	r.add(ctx, d)
	return nil
}

// validate checks what a plugin says it is and asks the driver about the
// node.
func (r *Registry) validate(ctx context.Context, info pluginwatcher.Plugin) (*Driver, error) {
	if !supported(info.Versions) {
		return nil, fmt.Errorf("CSI driver %q supports versions %v; nodelet speaks CSI 1.x", info.Name, info.Versions)
	}
	endpoint := info.Endpoint
	if endpoint == "" {
		return nil, fmt.Errorf("CSI driver %q gave no endpoint", info.Name)
	}
	conn, err := dial(strings.TrimPrefix(endpoint, "unix://"))
	if err != nil {
		return nil, err
	}
	node := csipb.NewNodeClient(conn)
	d := &Driver{DriverInfo: DriverInfo{Name: info.Name}, Node: node, conn: conn}
	if err := r.ask(ctx, d); err != nil {
		conn.Close()
		return nil, err
	}
	return d, nil
}

// ask fills in what the driver says about the node and itself.
func (r *Registry) ask(ctx context.Context, d *Driver) error {
	ni, err := d.Node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	if err != nil {
		return fmt.Errorf("CSI driver %q: NodeGetInfo: %w", d.Name, err)
	}
	if ni.NodeId == "" {
		return fmt.Errorf("CSI driver %q: NodeGetInfo gave no node ID", d.Name)
	}
	d.NodeID, d.MaxVolumes = ni.NodeId, ni.MaxVolumesPerNode
	if t := ni.AccessibleTopology; t != nil {
		d.Topology = t.Segments
	}
	caps, err := d.Node.NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{})
	if err != nil {
		return fmt.Errorf("CSI driver %q: NodeGetCapabilities: %w", d.Name, err)
	}
	for _, c := range caps.Capabilities {
		switch c.GetRpc().GetType() {
		case csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME:
			d.Stages = true
		case csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS:
			d.Stats = true
		case csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP:
			d.MountGroup = true
		}
	}
	return nil
}

// supported reports whether a 1.x version is among versions.
func supported(versions []string) bool {
	for _, v := range versions {
		if v == "1" || strings.HasPrefix(strings.TrimPrefix(v, "v"), "1.") {
			return true
		}
	}
	return false
}

// add records a driver (replacing an older registration of the same
// name) and tells the API. A driver serves this node's volumes whether
// or not the API server can be told now (nodelet restarted while it is
// down must set up its pods' volumes again): its CSINode entry is
// retried until written.
func (r *Registry) add(ctx context.Context, d *Driver) {
	info := d.DriverInfo
	r.toAPI(ctx, d.Name, &info)
	r.mu.Lock()
	old := r.drivers[d.Name]
	r.drivers[d.Name] = d
	r.mu.Unlock()
	if old != nil {
		old.conn.Close()
	}
	klog.InfoS("CSI driver registered", "driver", d.Name, "nodeID", d.NodeID, "stages", d.Stages, "topology", d.Topology, "socket", d.socket)
}

// Deregister implements pluginwatcher.Handler: the driver's
// registration socket went, so it is forgotten (unless it registered
// again through another socket) and removed from CSINode.
func (r *Registry) Deregister(ctx context.Context, p pluginwatcher.Plugin) {
	r.mu.Lock()
	d, ok := r.drivers[p.Name]
	if !ok || d.socket != p.Socket {
		r.mu.Unlock()
		return
	}
	delete(r.drivers, p.Name)
	r.mu.Unlock()
	d.conn.Close()
	klog.InfoS("CSI driver deregistered: its registration socket is gone", "driver", d.Name, "socket", d.socket)
	r.toAPI(ctx, d.Name, nil)
}

// apiChange is a driver's CSINode entry still to write (set), or to
// remove (set is nil), and when that was last tried.
type apiChange struct {
	set   *DriverInfo
	tried time.Time
}

// toAPI writes (or, with a nil set, removes) a driver's CSINode entry at
// once, replacing any change of it still pending, and keeps it pending if
// the API server does not take it.
func (r *Registry) toAPI(ctx context.Context, name string, set *DriverInfo) {
	if r.o.Nodes == nil {
		return
	}
	r.mu.Lock()
	r.pending[name] = &apiChange{set: set} // never tried: due now
	r.mu.Unlock()
	r.retryAPI(ctx)
}

// retryAPI tries the pending CSINode changes never tried, or last tried
// retryAfter ago.
func (r *Registry) retryAPI(ctx context.Context) {
	r.mu.Lock()
	var names []string
	for name, c := range r.pending {
		if r.o.Clock.Since(c.tried) >= retryAfter {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	changes := make([]*apiChange, len(names))
	for i, name := range names {
		changes[i] = r.pending[name]
	}
	r.mu.Unlock()
	for i, c := range changes {
		err := r.applyAPI(ctx, names[i], c)
		r.mu.Lock()
		if r.pending[names[i]] == c {
			if err == nil {
				delete(r.pending, names[i])
			} else {
				c.tried = r.o.Clock.Now()
			}
		}
		r.mu.Unlock()
		if err != nil {
			klog.ErrorS(err, "Updating the CSINode object failed; retrying", "driver", names[i], "retryIn", retryAfter)
		}
	}
}

func (r *Registry) applyAPI(ctx context.Context, name string, c *apiChange) error {
	ctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	if c.set == nil {
		return r.o.Nodes.RemoveDriver(ctx, name)
	}
	return r.o.Nodes.SetDriver(ctx, *c.set)
}

func (r *Registry) closeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.drivers {
		d.conn.Close()
	}
}

// Drivers lists the registered drivers' names.
func (r *Registry) Drivers() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.drivers))
}
