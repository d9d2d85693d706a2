// Package csi is the node side of the Container Storage Interface, as the
// upstream kubelet speaks it: CSI drivers register through the kubelet
// plugin watcher (a socket under <root-dir>/plugins_registry answering
// pluginregistration.v1 GetInfo and NotifyRegistrationStatus), nodelet
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
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/clock"
)

// RegistryDir is where drivers put their registration sockets, under the
// root directory (upstream's plugin watcher path).
const RegistryDir = "plugins_registry"

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
	// socket is the registration socket it came through, and socketID
	// which file that was: a driver started again makes a new socket at
	// the same path, perhaps between two scans, and must register again.
	socket, socketID string
}

// RegistryOptions configure a Registry.
type RegistryOptions struct {
	RootDir string
	Nodes   Nodes
	Clock   clock.WithTicker
	// Poll is how often the registration directory is read; 0 is a
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
	// failed remembers socket files that failed to register, with when, so a
	// broken driver is retried, not hammered.
	failed map[string]failure
	// pending holds the CSINode changes the API server has not taken
	// yet, by driver.
	pending map[string]*apiChange
}

// failure is a socket file's failed registration.
type failure struct {
	socketID string
	at       time.Time
}

// NewRegistry returns a registry with no drivers; Run watches for them.
func NewRegistry(o RegistryOptions) *Registry {
	if o.Poll == 0 {
		o.Poll = time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	return &Registry{o: o, drivers: map[string]*Driver{}, failed: map[string]failure{}, pending: map[string]*apiChange{}}
}

// Dir is the registration directory.
func (r *Registry) Dir() string { return filepath.Join(r.o.RootDir, RegistryDir) }

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

// Run watches the registration directory until ctx ends.
func (r *Registry) Run(ctx context.Context) error {
	if err := os.MkdirAll(r.Dir(), 0o750); err != nil {
		return fmt.Errorf("creating %s: %w", r.Dir(), err)
	}
	tick := r.o.Clock.NewTicker(r.o.Poll)
	defer tick.Stop()
	defer r.closeAll()
	for {
		r.scan(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
		}
	}
}

// retryAfter is how long a socket that failed to register waits.
const retryAfter = 10 * time.Second

// scan registers new sockets and forgets drivers whose socket went. Like
// upstream's plugin watcher it looks through subdirectories too, and
// passes over names starting with a dot (a driver's files in the making).
func (r *Registry) scan(ctx context.Context) {
	present := map[string]bool{}
	err := filepath.WalkDir(r.Dir(), func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != r.Dir() && strings.HasPrefix(e.Name(), ".") {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e.Type()&os.ModeSocket != 0 {
			present[path] = true
			r.registerNew(ctx, path, fileID(e))
		}
		return nil
	})
	if err != nil {
		// Forgetting drivers on a partial scan could drop live ones.
		klog.ErrorS(err, "Reading the plugin registration directory", "dir", r.Dir())
		return
	}
	r.forgetGone(ctx, present)
	r.retryAPI(ctx)
}

// registerNew registers a socket unless it registered, or failed too
// recently.
func (r *Registry) registerNew(ctx context.Context, sock, id string) {
	if r.known(sock, id) {
		return
	}
	if err := r.register(ctx, sock, id); err != nil {
		klog.ErrorS(err, "CSI driver registration failed; retrying", "socket", sock, "retryIn", retryAfter)
		r.mu.Lock()
		r.failed[sock] = failure{socketID: id, at: r.o.Clock.Now()}
		r.mu.Unlock()
	}
}

// fileID names a file by its inode and modification time (a socket's
// creation), which differ for a socket made again at the same path even
// when the inode number is reused; "" if it is gone.
func fileID(e fs.DirEntry) string {
	fi, err := e.Info()
	if err != nil {
		return ""
	}
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	return fmt.Sprintf("%d@%d", ino, fi.ModTime().UnixNano())
}

// known reports whether this socket file registered, or failed too
// recently.
func (r *Registry) known(sock, id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.drivers {
		if d.socket == sock && d.socketID == id {
			return true
		}
	}
	f, failed := r.failed[sock]
	return failed && f.socketID == id && r.o.Clock.Since(f.at) < retryAfter
}

func dial(sock string) (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// register runs the registration handshake with one socket.
func (r *Registry) register(ctx context.Context, sock, id string) error {
	conn, err := dial(sock)
	if err != nil {
		return err
	}
	defer conn.Close()
	reg := registerapi.NewRegistrationClient(conn)
	cctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	info, err := reg.GetInfo(cctx, &registerapi.InfoRequest{})
	if err != nil {
		return fmt.Errorf("GetInfo: %w", err)
	}
	d, err := r.validate(cctx, info)
	if err == nil {
		d.socket, d.socketID = sock, id
		r.add(ctx, d)
	}
	status := &registerapi.RegistrationStatus{PluginRegistered: err == nil}
	if err != nil {
		status.Error = err.Error()
	}
	if _, nerr := reg.NotifyRegistrationStatus(cctx, status); nerr != nil {
		klog.ErrorS(nerr, "NotifyRegistrationStatus", "socket", sock)
	}
	return err
}

// validate checks what a plugin says it is and asks the driver about the
// node.
func (r *Registry) validate(ctx context.Context, info *registerapi.PluginInfo) (*Driver, error) {
	if info.Type != registerapi.CSIPlugin {
		return nil, fmt.Errorf("plugin %q is of type %q; nodelet supports %s plugins only", info.Name, info.Type, registerapi.CSIPlugin)
	}
	if info.Name == "" {
		return nil, fmt.Errorf("plugin has no name")
	}
	if !supported(info.SupportedVersions) {
		return nil, fmt.Errorf("CSI driver %q supports versions %v; nodelet speaks CSI 1.x", info.Name, info.SupportedVersions)
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
	delete(r.failed, d.socket)
	r.mu.Unlock()
	if old != nil {
		old.conn.Close()
	}
	klog.InfoS("CSI driver registered", "driver", d.Name, "nodeID", d.NodeID, "stages", d.Stages, "topology", d.Topology, "socket", d.socket)
}

// forgetGone forgets the drivers whose registration socket is gone.
func (r *Registry) forgetGone(ctx context.Context, present map[string]bool) {
	r.mu.Lock()
	var gone []*Driver
	for name, d := range r.drivers {
		if !present[d.socket] {
			gone = append(gone, d)
			delete(r.drivers, name)
		}
	}
	for sock := range r.failed {
		if !present[sock] {
			delete(r.failed, sock)
		}
	}
	r.mu.Unlock()
	sort.Slice(gone, func(i, j int) bool { return gone[i].Name < gone[j].Name })
	for _, d := range gone {
		d.conn.Close()
		klog.InfoS("CSI driver deregistered: its registration socket is gone", "driver", d.Name, "socket", d.socket)
		r.toAPI(ctx, d.Name, nil)
	}
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
