// Package fakecri is an in-memory CRI runtime for unit tests. It keeps
// sandboxes, containers and images in maps, records every call, and lets
// a test make containers exit or calls fail. Integration tests use a real
// containerd instead; this fake never stands in for one.
package fakecri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
)

// Runtime is the fake. Its zero value is not usable: call New.
type Runtime struct {
	mu         sync.Mutex
	clock      clock.PassiveClock
	nextID     int
	sandboxes  map[string]*sandbox
	containers map[string]*ctr
	images     map[string]string // name -> id
	calls      []string
	// errors maps a method name to the error its next call returns.
	errors map[string]error
	// NetworkReady is reported by Status.
	NetworkReady bool
	// OnStop runs when StopContainer is called, before it returns.
	OnStop func(id string, timeout int64)
	// OnPull runs when PullImage is called; an error it returns fails
	// the pull.
	OnPull func(ctx context.Context, image string) error
	// OnStart runs when StartContainer is called, with the call's
	// context, before the container starts.
	OnStart func(ctx context.Context, id string)
	// ExecResult is what ExecSync returns.
	ExecResult func(id string, cmd []string) (*runtimeapi.ExecSyncResponse, error)
	// OnExec, when set, answers ExecSync instead, seeing the request
	// (its timeout) and the call's context (its deadline).
	OnExec  func(ctx context.Context, in *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error)
	events  chan *runtimeapi.ContainerEventResponse
	imageFs string
	// usage holds what ListPodSandboxStats reports per sandbox or
	// container id: cumulative CPU nanoseconds and working set bytes.
	usage map[string][2]uint64
}

type sandbox struct {
	cfg     *runtimeapi.PodSandboxConfig
	state   runtimeapi.PodSandboxState
	created time.Time
	ip      string
	handler string
}

type ctr struct {
	sandboxID string
	cfg       *runtimeapi.ContainerConfig
	image     string
	state     runtimeapi.ContainerState
	created   time.Time
	started   time.Time
	finished  time.Time
	exitCode  int32
	reason    string
}

// New returns an empty fake runtime that has the given images.
func New(clk clock.PassiveClock, images ...string) *Runtime {
	r := &Runtime{
		clock: clk, sandboxes: map[string]*sandbox{}, containers: map[string]*ctr{},
		images: map[string]string{}, errors: map[string]error{}, NetworkReady: true, usage: map[string][2]uint64{},
	}
	for _, img := range images {
		r.images[img] = "sha256:" + img
	}
	return r
}

// FailNext makes the next call of method fail with err.
func (r *Runtime) FailNext(method string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors[method] = err
}

// Calls returns the methods called so far, with their main argument.
func (r *Runtime) Calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

// ResetCalls forgets the recorded calls.
func (r *Runtime) ResetCalls() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = nil
}

// record notes a call and returns its injected error, if any. Call with mu held.
func (r *Runtime) record(method, arg string) error {
	r.calls = append(r.calls, method+" "+arg)
	if err, ok := r.errors[method]; ok {
		delete(r.errors, method)
		return err
	}
	return nil
}

func (r *Runtime) id(prefix string) string {
	r.nextID++
	return fmt.Sprintf("%s%d", prefix, r.nextID)
}

func notFound(what, id string) error {
	return status.Errorf(codes.NotFound, "%s %q not found", what, id)
}

// Exit makes a running container exit with code.
func (r *Runtime) Exit(id string, code int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.containers[id]; ok && c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
		c.state, c.exitCode, c.finished = runtimeapi.ContainerState_CONTAINER_EXITED, code, r.clock.Now()
		c.reason = "Completed"
		if code != 0 {
			c.reason = "Error"
		}
	}
}

// SandboxHandlers returns the runtime handlers the sandboxes of the pod
// named name were run with, in no order.
func (r *Runtime) SandboxHandlers(name string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.sandboxes {
		if s.cfg.GetMetadata().GetName() == name {
			out = append(out, s.handler)
		}
	}
	return out
}

// ContainerIDs returns the IDs of containers with the given name and
// state (any state when state is nil), oldest first.
func (r *Runtime) ContainerIDs(name string, state *runtimeapi.ContainerState) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for id, c := range r.containers {
		if c.cfg.Metadata.Name == name && (state == nil || c.state == *state) {
			out = append(out, id)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return r.containers[out[i]].created.Before(r.containers[out[j]].created) || out[i] < out[j]
	})
	return out
}

// SetSandboxState forces a sandbox's state.
func (r *Runtime) SetSandboxState(id string, ready bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.sandboxes[id]; ok {
		s.state = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		if ready {
			s.state = runtimeapi.PodSandboxState_SANDBOX_READY
		}
	}
}

// Counts returns how many sandboxes and containers exist.
func (r *Runtime) Counts() (sandboxes, containers int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sandboxes), len(r.containers)
}

// Version reports the fake's identity.
func (r *Runtime) Version(ctx context.Context, in *runtimeapi.VersionRequest, _ ...grpc.CallOption) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "fake", RuntimeVersion: "1.0", RuntimeApiVersion: "v1"}, nil
}

// Status reports the runtime ready and the network as NetworkReady says.
func (r *Runtime) Status(ctx context.Context, in *runtimeapi.StatusRequest, _ ...grpc.CallOption) (*runtimeapi.StatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.record("Status", ""); err != nil {
		return nil, err
	}
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: r.NetworkReady, Reason: "NetworkPluginNotReady"},
	}}}, nil
}

// RunPodSandbox creates a ready sandbox with an IP unless host network.
func (r *Runtime) RunPodSandbox(ctx context.Context, in *runtimeapi.RunPodSandboxRequest, _ ...grpc.CallOption) (*runtimeapi.RunPodSandboxResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.record("RunPodSandbox", in.Config.Metadata.Name); err != nil {
		return nil, err
	}
	id := r.id("sb")
	s := &sandbox{cfg: in.Config, state: runtimeapi.PodSandboxState_SANDBOX_READY, created: r.clock.Now(), handler: in.RuntimeHandler}
	if in.Config.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() != runtimeapi.NamespaceMode_NODE {
		s.ip = fmt.Sprintf("10.0.0.%d", r.nextID)
	}
	r.sandboxes[id] = s
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

// StopPodSandbox stops a sandbox and every container in it.
func (r *Runtime) StopPodSandbox(ctx context.Context, in *runtimeapi.StopPodSandboxRequest, _ ...grpc.CallOption) (*runtimeapi.StopPodSandboxResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.record("StopPodSandbox", in.PodSandboxId); err != nil {
		return nil, err
	}
	s, ok := r.sandboxes[in.PodSandboxId]
	if !ok {
		return nil, notFound("sandbox", in.PodSandboxId)
	}
	s.state = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	for _, c := range r.containers {
		if c.sandboxID == in.PodSandboxId && c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
			c.state, c.exitCode, c.finished, c.reason = runtimeapi.ContainerState_CONTAINER_EXITED, 137, r.clock.Now(), "Error"
		}
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

// RemovePodSandbox removes a sandbox and its containers.
func (r *Runtime) RemovePodSandbox(ctx context.Context, in *runtimeapi.RemovePodSandboxRequest, _ ...grpc.CallOption) (*runtimeapi.RemovePodSandboxResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.record("RemovePodSandbox", in.PodSandboxId); err != nil {
		return nil, err
	}
	delete(r.sandboxes, in.PodSandboxId)
	for id, c := range r.containers {
		if c.sandboxID == in.PodSandboxId {
			delete(r.containers, id)
		}
	}
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

// PodSandboxStatus describes a sandbox.
func (r *Runtime) PodSandboxStatus(ctx context.Context, in *runtimeapi.PodSandboxStatusRequest, _ ...grpc.CallOption) (*runtimeapi.PodSandboxStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.record("PodSandboxStatus", in.PodSandboxId); err != nil {
		return nil, err
	}
	s, ok := r.sandboxes[in.PodSandboxId]
	if !ok {
		return nil, notFound("sandbox", in.PodSandboxId)
	}
	st := &runtimeapi.PodSandboxStatus{
		Id: in.PodSandboxId, Metadata: s.cfg.Metadata, State: s.state, CreatedAt: s.created.UnixNano(),
		Labels: s.cfg.Labels, Annotations: s.cfg.Annotations,
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: s.cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()}},
	}
	if s.ip != "" {
		st.Network = &runtimeapi.PodSandboxNetworkStatus{Ip: s.ip}
	}
	return &runtimeapi.PodSandboxStatusResponse{Status: st}, nil
}

// ListPodSandbox lists sandboxes matching the filter.
func (r *Runtime) ListPodSandbox(ctx context.Context, in *runtimeapi.ListPodSandboxRequest, _ ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.record("ListPodSandbox", ""); err != nil {
		return nil, err
	}
	out := &runtimeapi.ListPodSandboxResponse{}
	for id, s := range r.sandboxes {
		if f := in.GetFilter(); f != nil && (!labelsMatch(s.cfg.Labels, f.LabelSelector) || (f.State != nil && f.State.State != s.state)) {
			continue
		}
		out.Items = append(out.Items, &runtimeapi.PodSandbox{
			Id: id, Metadata: s.cfg.Metadata, State: s.state, CreatedAt: s.created.UnixNano(),
			Labels: s.cfg.Labels, Annotations: s.cfg.Annotations,
		})
	}
	sort.Slice(out.Items, func(i, j int) bool { return out.Items[i].Id < out.Items[j].Id })
	return out, nil
}

func labelsMatch(labels, selector map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// CreateContainer creates a container in a sandbox.
func (r *Runtime) CreateContainer(ctx context.Context, in *runtimeapi.CreateContainerRequest, _ ...grpc.CallOption) (*runtimeapi.CreateContainerResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.record("CreateContainer", in.Config.Metadata.Name); err != nil {
		return nil, err
	}
	if _, ok := r.sandboxes[in.PodSandboxId]; !ok {
		return nil, notFound("sandbox", in.PodSandboxId)
	}
	id := r.id("c")
	r.containers[id] = &ctr{
		sandboxID: in.PodSandboxId, cfg: in.Config, image: in.Config.Image.Image,
		state: runtimeapi.ContainerState_CONTAINER_CREATED, created: r.clock.Now().Add(time.Duration(r.nextID)),
	}
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
}

// StartContainer starts a created container.
func (r *Runtime) StartContainer(ctx context.Context, in *runtimeapi.StartContainerRequest, _ ...grpc.CallOption) (*runtimeapi.StartContainerResponse, error) {
	if r.OnStart != nil {
		r.OnStart(ctx, in.ContainerId)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[in.ContainerId]
	if err := r.record("StartContainer", nameOf(c)); err != nil {
		return nil, err
	}
	if !ok {
		return nil, notFound("container", in.ContainerId)
	}
	c.state, c.started = runtimeapi.ContainerState_CONTAINER_RUNNING, r.clock.Now()
	return &runtimeapi.StartContainerResponse{}, nil
}

func nameOf(c *ctr) string {
	if c == nil {
		return "?"
	}
	return c.cfg.Metadata.Name
}

// StopContainer stops a container as if it exited on SIGTERM.
func (r *Runtime) StopContainer(ctx context.Context, in *runtimeapi.StopContainerRequest, _ ...grpc.CallOption) (*runtimeapi.StopContainerResponse, error) {
	r.mu.Lock()
	c, ok := r.containers[in.ContainerId]
	err := r.record("StopContainer", fmt.Sprintf("%s timeout=%d", nameOf(c), in.Timeout))
	onStop := r.OnStop
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, notFound("container", in.ContainerId)
	}
	if onStop != nil {
		onStop(in.ContainerId, in.Timeout)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.state == runtimeapi.ContainerState_CONTAINER_RUNNING || c.state == runtimeapi.ContainerState_CONTAINER_CREATED {
		c.state, c.exitCode, c.finished, c.reason = runtimeapi.ContainerState_CONTAINER_EXITED, 0, r.clock.Now(), "Completed"
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

// RemoveContainer removes a container.
func (r *Runtime) RemoveContainer(ctx context.Context, in *runtimeapi.RemoveContainerRequest, _ ...grpc.CallOption) (*runtimeapi.RemoveContainerResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.record("RemoveContainer", nameOf(r.containers[in.ContainerId])); err != nil {
		return nil, err
	}
	delete(r.containers, in.ContainerId)
	return &runtimeapi.RemoveContainerResponse{}, nil
}

// ListContainers lists containers matching the filter.
func (r *Runtime) ListContainers(ctx context.Context, in *runtimeapi.ListContainersRequest, _ ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.record("ListContainers", ""); err != nil {
		return nil, err
	}
	out := &runtimeapi.ListContainersResponse{}
	for id, c := range r.containers {
		if f := in.GetFilter(); f != nil && (!labelsMatch(c.cfg.Labels, f.LabelSelector) || (f.PodSandboxId != "" && f.PodSandboxId != c.sandboxID) ||
			(f.State != nil && f.State.State != c.state)) {
			continue
		}
		out.Containers = append(out.Containers, &runtimeapi.Container{
			Id: id, PodSandboxId: c.sandboxID, Metadata: c.cfg.Metadata, Image: &runtimeapi.ImageSpec{Image: c.image},
			ImageRef: "sha256:" + c.image, State: c.state, CreatedAt: c.created.UnixNano(),
			Labels: c.cfg.Labels, Annotations: c.cfg.Annotations,
		})
	}
	sort.Slice(out.Containers, func(i, j int) bool { return out.Containers[i].Id < out.Containers[j].Id })
	return out, nil
}

// ContainerStatus describes a container.
func (r *Runtime) ContainerStatus(ctx context.Context, in *runtimeapi.ContainerStatusRequest, _ ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.record("ContainerStatus", in.ContainerId); err != nil {
		return nil, err
	}
	c, ok := r.containers[in.ContainerId]
	if !ok {
		return nil, notFound("container", in.ContainerId)
	}
	st := &runtimeapi.ContainerStatus{
		Id: in.ContainerId, Metadata: c.cfg.Metadata, State: c.state, CreatedAt: c.created.UnixNano(),
		Image: &runtimeapi.ImageSpec{Image: c.image}, ImageRef: "sha256:" + c.image, ExitCode: c.exitCode,
		Reason: c.reason, Labels: c.cfg.Labels, Annotations: c.cfg.Annotations, Mounts: c.cfg.Mounts,
	}
	if sb := r.sandboxes[c.sandboxID]; sb != nil && c.cfg.LogPath != "" {
		st.LogPath = filepath.Join(sb.cfg.LogDirectory, c.cfg.LogPath)
	}
	if !c.started.IsZero() {
		st.StartedAt = c.started.UnixNano()
	}
	if !c.finished.IsZero() {
		st.FinishedAt = c.finished.UnixNano()
	}
	return &runtimeapi.ContainerStatusResponse{Status: st}, nil
}

// ExecSync runs ExecResult, or succeeds with no output.
func (r *Runtime) ExecSync(ctx context.Context, in *runtimeapi.ExecSyncRequest, _ ...grpc.CallOption) (*runtimeapi.ExecSyncResponse, error) {
	r.mu.Lock()
	err := r.record("ExecSync", strings.Join(in.Cmd, " "))
	fn, onExec := r.ExecResult, r.OnExec
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if onExec != nil {
		return onExec(ctx, in)
	}
	if fn != nil {
		return fn(in.ContainerId, in.Cmd)
	}
	return &runtimeapi.ExecSyncResponse{}, nil
}

// PullImage adds the image.
func (r *Runtime) PullImage(ctx context.Context, in *runtimeapi.PullImageRequest, _ ...grpc.CallOption) (*runtimeapi.PullImageResponse, error) {
	if r.OnPull != nil {
		if err := r.OnPull(ctx, in.Image.Image); err != nil {
			return nil, err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.record("PullImage", in.Image.Image); err != nil {
		return nil, err
	}
	r.images[in.Image.Image] = "sha256:" + in.Image.Image
	return &runtimeapi.PullImageResponse{ImageRef: r.images[in.Image.Image]}, nil
}

// ImageStatus reports whether the image is present.
func (r *Runtime) ImageStatus(ctx context.Context, in *runtimeapi.ImageStatusRequest, _ ...grpc.CallOption) (*runtimeapi.ImageStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.record("ImageStatus", in.Image.Image); err != nil {
		return nil, err
	}
	id, ok := r.images[in.Image.Image]
	if !ok {
		// As containerd, an image is also found by its ID.
		for name, iid := range r.images {
			if iid == in.Image.Image {
				return &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: iid, RepoTags: []string{name}, Size: fakeImageSize}}, nil
			}
		}
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	return &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: id, RepoTags: []string{in.Image.Image}, Size: fakeImageSize}}, nil
}

// fakeImageSize is every fake image's size.
const fakeImageSize = 4 << 20

// ListImages lists the images.
func (r *Runtime) ListImages(ctx context.Context, in *runtimeapi.ListImagesRequest, _ ...grpc.CallOption) (*runtimeapi.ListImagesResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := &runtimeapi.ListImagesResponse{}
	for name, id := range r.images {
		out.Images = append(out.Images, &runtimeapi.Image{Id: id, RepoTags: []string{name}})
	}
	return out, nil
}

// RemoveImage removes an image.
func (r *Runtime) RemoveImage(ctx context.Context, in *runtimeapi.RemoveImageRequest, _ ...grpc.CallOption) (*runtimeapi.RemoveImageResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, "RemoveImage "+in.Image.Image)
	for name, id := range r.images {
		if name == in.Image.Image || id == in.Image.Image {
			delete(r.images, name)
		}
	}
	return &runtimeapi.RemoveImageResponse{}, nil
}

// ContainerConfig returns the config a container was created with.
func (r *Runtime) ContainerConfig(id string) *runtimeapi.ContainerConfig {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.containers[id]; ok {
		return c.cfg
	}
	return nil
}

// EnableEvents makes the fake offer a container event stream (newer
// containerd); by default it answers Unimplemented, as containerd 1.6 does.
// The returned channel feeds the stream.
func (r *Runtime) EnableEvents() chan<- *runtimeapi.ContainerEventResponse {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = make(chan *runtimeapi.ContainerEventResponse, 100)
	return r.events
}

// GetContainerEvents serves the event stream if enabled.
func (r *Runtime) GetContainerEvents(ctx context.Context, in *runtimeapi.GetEventsRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[runtimeapi.ContainerEventResponse], error) {
	r.mu.Lock()
	ch := r.events
	r.mu.Unlock()
	if ch == nil {
		return nil, status.Error(codes.Unimplemented, "GetContainerEvents is not implemented")
	}
	return &eventStream{ctx: ctx, ch: ch}, nil
}

type eventStream struct {
	grpc.ClientStream
	ctx context.Context
	ch  chan *runtimeapi.ContainerEventResponse
}

func (s *eventStream) Recv() (*runtimeapi.ContainerEventResponse, error) {
	select {
	case e := <-s.ch:
		return e, nil
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

// SetImageFs makes ImageFsInfo report the given mount point.
func (r *Runtime) SetImageFs(mount string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.imageFs = mount
}

// ImageFsInfo reports the image filesystem's mount point.
func (r *Runtime) ImageFsInfo(ctx context.Context, in *runtimeapi.ImageFsInfoRequest, _ ...grpc.CallOption) (*runtimeapi.ImageFsInfoResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: r.imageFs}}}}, nil
}

// Images lists the image names the fake holds.
func (r *Runtime) Images() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for name := range r.images {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// Exec returns a fake streaming URL naming the container.
func (r *Runtime) Exec(ctx context.Context, in *runtimeapi.ExecRequest, _ ...grpc.CallOption) (*runtimeapi.ExecResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.record("Exec", in.ContainerId); err != nil {
		return nil, err
	}
	return &runtimeapi.ExecResponse{Url: "http://127.0.0.1:1/exec/" + in.ContainerId}, nil
}

// Attach returns a fake streaming URL naming the container.
func (r *Runtime) Attach(ctx context.Context, in *runtimeapi.AttachRequest, _ ...grpc.CallOption) (*runtimeapi.AttachResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.record("Attach", in.ContainerId); err != nil {
		return nil, err
	}
	return &runtimeapi.AttachResponse{Url: "http://127.0.0.1:1/attach/" + in.ContainerId}, nil
}

// PortForward returns a fake streaming URL naming the sandbox.
func (r *Runtime) PortForward(ctx context.Context, in *runtimeapi.PortForwardRequest, _ ...grpc.CallOption) (*runtimeapi.PortForwardResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.record("PortForward", in.PodSandboxId); err != nil {
		return nil, err
	}
	return &runtimeapi.PortForwardResponse{Url: "http://127.0.0.1:1/portforward/" + in.PodSandboxId}, nil
}

// SetUsage sets the cumulative CPU time (ns) and the working set (bytes)
// ListPodSandboxStats reports for a sandbox or container.
func (r *Runtime) SetUsage(id string, cpuNanos, workingSet uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.usage[id] = [2]uint64{cpuNanos, workingSet}
}

// ListPodSandboxStats reports the usage set by SetUsage for ready
// sandboxes and their running containers, stamped with the clock.
func (r *Runtime) ListPodSandboxStats(ctx context.Context, in *runtimeapi.ListPodSandboxStatsRequest, _ ...grpc.CallOption) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.record("ListPodSandboxStats", ""); err != nil {
		return nil, err
	}
	now := r.clock.Now().UnixNano()
	cpu := func(id string) *runtimeapi.CpuUsage {
		return &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: r.usage[id][0]}}
	}
	mem := func(id string) *runtimeapi.MemoryUsage {
		return &runtimeapi.MemoryUsage{Timestamp: now, WorkingSetBytes: &runtimeapi.UInt64Value{Value: r.usage[id][1]}}
	}
	out := &runtimeapi.ListPodSandboxStatsResponse{}
	for id, s := range r.sandboxes {
		if s.state != runtimeapi.PodSandboxState_SANDBOX_READY || in.GetFilter().GetId() != "" && in.GetFilter().GetId() != id {
			continue
		}
		st := &runtimeapi.PodSandboxStats{
			Attributes: &runtimeapi.PodSandboxAttributes{Id: id, Metadata: s.cfg.Metadata, Labels: s.cfg.Labels},
			Linux:      &runtimeapi.LinuxPodSandboxStats{Cpu: cpu(id), Memory: mem(id)},
		}
		for cid, c := range r.containers {
			if c.sandboxID != id || c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
				continue
			}
			st.Linux.Containers = append(st.Linux.Containers, &runtimeapi.ContainerStats{
				Attributes: &runtimeapi.ContainerAttributes{Id: cid, Metadata: c.cfg.Metadata, Labels: c.cfg.Labels},
				Cpu:        cpu(cid), Memory: mem(cid),
			})
		}
		sort.Slice(st.Linux.Containers, func(i, j int) bool {
			return st.Linux.Containers[i].Attributes.Id < st.Linux.Containers[j].Attributes.Id
		})
		out.Stats = append(out.Stats, st)
	}
	sort.Slice(out.Stats, func(i, j int) bool { return out.Stats[i].Attributes.Id < out.Stats[j].Attributes.Id })
	return out, nil
}

// ReopenContainerLog creates the running container's log file afresh, as
// a runtime does after the file was renamed.
func (r *Runtime) ReopenContainerLog(ctx context.Context, in *runtimeapi.ReopenContainerLogRequest, _ ...grpc.CallOption) (*runtimeapi.ReopenContainerLogResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.record("ReopenContainerLog", in.ContainerId); err != nil {
		return nil, err
	}
	c, ok := r.containers[in.ContainerId]
	if !ok {
		return nil, notFound("container", in.ContainerId)
	}
	if c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil, status.Errorf(codes.FailedPrecondition, "container %q is not running", in.ContainerId)
	}
	sb := r.sandboxes[c.sandboxID]
	f, err := os.OpenFile(filepath.Join(sb.cfg.LogDirectory, c.cfg.LogPath), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o640)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &runtimeapi.ReopenContainerLogResponse{}, f.Close()
}

// UpdateContainerResources records the container's new CPU and memory.
func (r *Runtime) UpdateContainerResources(ctx context.Context, in *runtimeapi.UpdateContainerResourcesRequest, _ ...grpc.CallOption) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[in.ContainerId]
	l := in.GetLinux()
	if err := r.record("UpdateContainerResources", fmt.Sprintf("%s shares=%d quota=%d memory=%d", nameOf(c), l.GetCpuShares(), l.GetCpuQuota(), l.GetMemoryLimitInBytes())); err != nil {
		return nil, err
	}
	if !ok {
		return nil, notFound("container", in.ContainerId)
	}
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}
