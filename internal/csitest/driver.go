// Package csitest is a small hostpath-style CSI driver for tests, speaking
// the real CSI gRPC spec and the kubelet plugin registration protocol on
// unix sockets: each volume is a directory under the driver's backing
// directory, staged and published with bind mounts (so it needs root).
package csitest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/moby/sys/mountinfo"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Options configure a Driver.
type Options struct {
	Name string
	// RegistryDir is the kubelet's plugins_registry directory.
	RegistryDir string
	// Dir holds the driver's CSI socket and its backing directory.
	Dir string
	// Stage gives the driver STAGE_UNSTAGE_VOLUME.
	Stage bool
	// Stats gives the driver GET_VOLUME_STATS.
	Stats bool
	// MountGroup gives the driver VOLUME_MOUNT_GROUP.
	MountGroup bool
	// Type is the plugin type it registers as; empty is CSIPlugin.
	Type     string
	NodeID   string
	Topology map[string]string
	MaxVols  int64
	// CallLog, if set, is a file each node call is appended to, one line
	// each: how a test reads the calls of a driver in another process.
	CallLog string
}

// Driver is a running test driver.
type Driver struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedNodeServer
	registerapi.UnimplementedRegistrationServer

	o        Options
	Backing  string
	RegSock  string
	CSISock  string
	servers  []*grpc.Server
	mu       sync.Mutex
	calls    []string
	requests []any
	statuses []*registerapi.RegistrationStatus
}

// Start runs the driver: its CSI socket first, then its registration
// socket (which the kubelet watches for).
func Start(o Options) (*Driver, error) {
	if o.Type == "" {
		o.Type = registerapi.CSIPlugin
	}
	if o.NodeID == "" {
		o.NodeID = "node-id-" + o.Name
	}
	d := &Driver{o: o, Backing: filepath.Join(o.Dir, "backing"), CSISock: filepath.Join(o.Dir, "csi.sock"),
		RegSock: filepath.Join(o.RegistryDir, o.Name+"-reg.sock")}
	if err := os.MkdirAll(d.Backing, 0o755); err != nil {
		return nil, err
	}
	csiSrv := grpc.NewServer()
	csipb.RegisterIdentityServer(csiSrv, d)
	csipb.RegisterNodeServer(csiSrv, d)
	if err := serve(csiSrv, d.CSISock); err != nil {
		return nil, err
	}
	d.servers = append(d.servers, csiSrv)
	if err := d.Register(); err != nil {
		d.Stop()
		return nil, err
	}
	return d, nil
}

// Register (re)creates the registration socket.
func (d *Driver) Register() error {
	reg := grpc.NewServer()
	registerapi.RegisterRegistrationServer(reg, d)
	if err := serve(reg, d.RegSock); err != nil {
		return err
	}
	d.mu.Lock()
	d.servers = append(d.servers, reg)
	d.mu.Unlock()
	return nil
}

// Deregister removes the registration socket, as a driver that goes does.
func (d *Driver) Deregister() error {
	return os.Remove(d.RegSock)
}

func serve(s *grpc.Server, sock string) error {
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	go func() { _ = s.Serve(l) }()
	return nil
}

// Stop stops the driver and removes its sockets.
func (d *Driver) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.servers {
		s.Stop()
	}
	_ = os.Remove(d.RegSock)
	_ = os.Remove(d.CSISock)
}

func (d *Driver) record(call string, req any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, call)
	d.requests = append(d.requests, req)
	if d.o.CallLog != "" {
		appendLine(d.o.CallLog, call)
	}
}

// appendLine appends one line to a file; a test that finds it missing
// sees the call missing.
func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	_, _ = f.WriteString(line + "\n")
	_ = f.Close()
}

// ReadCallLog lists the calls a driver appended to its CallLog.
func ReadCallLog(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// Calls lists the CSI node calls made, in order ("NodePublishVolume vol").
func (d *Driver) Calls() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.calls...)
}

// LastRequest returns the newest request of a call.
func (d *Driver) LastRequest(call string) any {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := len(d.calls) - 1; i >= 0; i-- {
		if len(d.calls[i]) >= len(call) && d.calls[i][:len(call)] == call {
			return d.requests[i]
		}
	}
	return nil
}

// Statuses lists the registration statuses the kubelet sent.
func (d *Driver) Statuses() []*registerapi.RegistrationStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*registerapi.RegistrationStatus(nil), d.statuses...)
}

func (d *Driver) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: d.o.Type, Name: d.o.Name, Endpoint: d.CSISock, SupportedVersions: []string{"1.0.0"}}, nil
}

func (d *Driver) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	d.mu.Lock()
	d.statuses = append(d.statuses, s)
	d.mu.Unlock()
	return &registerapi.RegistrationStatusResponse{}, nil
}

func (d *Driver) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: d.o.Name, VendorVersion: "test"}, nil
}

func (d *Driver) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return &csipb.ProbeResponse{}, nil
}

func (d *Driver) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	r := &csipb.NodeGetInfoResponse{NodeId: d.o.NodeID, MaxVolumesPerNode: d.o.MaxVols}
	if d.o.Topology != nil {
		r.AccessibleTopology = &csipb.Topology{Segments: d.o.Topology}
	}
	return r, nil
}

func (d *Driver) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	r := &csipb.NodeGetCapabilitiesResponse{}
	if d.o.Stage {
		r.Capabilities = append(r.Capabilities, &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{
			Rpc: &csipb.NodeServiceCapability_RPC{Type: csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}}})
	}
	if d.o.MountGroup {
		r.Capabilities = append(r.Capabilities, &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{
			Rpc: &csipb.NodeServiceCapability_RPC{Type: csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP}}})
	}
	if d.o.Stats {
		r.Capabilities = append(r.Capabilities, &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{
			Rpc: &csipb.NodeServiceCapability_RPC{Type: csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS}}})
	}
	return r, nil
}

// NodeGetVolumeStats reports the filesystem holding the volume, as
// statfs sees it.
func (d *Driver) NodeGetVolumeStats(_ context.Context, r *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(r.VolumePath, &st); err != nil {
		return nil, status.Errorf(codes.NotFound, "statfs %s: %v", r.VolumePath, err)
	}
	bs := int64(st.Bsize)
	return &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{
		{Unit: csipb.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
		{Unit: csipb.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
	}}, nil
}

// backing is a volume's directory, made on first use.
func (d *Driver) backing(id string) (string, error) {
	if id == "" || filepath.Base(id) != id {
		return "", status.Errorf(codes.InvalidArgument, "bad volume ID %q", id)
	}
	p := filepath.Join(d.Backing, id)
	return p, os.MkdirAll(p, 0o777)
}

func bind(src, target string, readOnly bool) error {
	if err := os.MkdirAll(target, 0o750); err != nil {
		return err
	}
	if mounted(target) {
		return nil // idempotent, as the spec asks
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return status.Errorf(codes.Internal, "bind %s on %s: %v", src, target, err)
	}
	if readOnly {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return status.Errorf(codes.Internal, "read-only remount of %s: %v", target, err)
		}
	}
	return nil
}

// mounted reports whether path is a mount point (bind mounts keep their
// device, so only the mount table says).
func mounted(path string) bool {
	ok, err := mountinfo.Mounted(path)
	return err == nil && ok
}

func unbind(target string) error {
	if err := unix.Unmount(target, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return status.Errorf(codes.Internal, "unmount %s: %v", target, err)
	}
	return nil
}

func (d *Driver) NodeStageVolume(_ context.Context, r *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	d.record("NodeStageVolume "+r.VolumeId, r)
	src, err := d.backing(r.VolumeId)
	if err != nil {
		return nil, err
	}
	return &csipb.NodeStageVolumeResponse{}, bind(src, r.StagingTargetPath, false)
}

func (d *Driver) NodeUnstageVolume(_ context.Context, r *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	d.record("NodeUnstageVolume "+r.VolumeId, r)
	return &csipb.NodeUnstageVolumeResponse{}, unbind(r.StagingTargetPath)
}

func (d *Driver) NodePublishVolume(_ context.Context, r *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	d.record("NodePublishVolume "+r.VolumeId, r)
	src := r.StagingTargetPath
	// An ephemeral inline volume is never staged: it is published
	// straight from the driver's own storage, made on the fly.
	if d.o.Stage && r.VolumeContext["csi.storage.k8s.io/ephemeral"] != "true" {
		if src == "" || !mounted(src) {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %q", r.VolumeId, src)
		}
	} else {
		var err error
		if src, err = d.backing(r.VolumeId); err != nil {
			return nil, err
		}
	}
	return &csipb.NodePublishVolumeResponse{}, bind(src, r.TargetPath, r.Readonly)
}

func (d *Driver) NodeUnpublishVolume(_ context.Context, r *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	d.record("NodeUnpublishVolume "+r.VolumeId, r)
	if err := unbind(r.TargetPath); err != nil {
		return nil, err
	}
	if err := os.Remove(r.TargetPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "removing %s: %v", r.TargetPath, err)
	}
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

// String names the driver.
func (d *Driver) String() string { return fmt.Sprintf("test CSI driver %s", d.o.Name) }
