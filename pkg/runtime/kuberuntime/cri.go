package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The CRI calls nodelet makes, split by what they act on. Each method has
// the signature of the generated gRPC client, so runtimeapi's clients
// satisfy these interfaces without a wrapper and a fake can stand in for
// them in unit tests.

// SandboxService runs and inspects pod sandboxes.
type SandboxService interface {
	RunPodSandbox(ctx context.Context, in *runtimeapi.RunPodSandboxRequest, opts ...grpc.CallOption) (*runtimeapi.RunPodSandboxResponse, error)
	StopPodSandbox(ctx context.Context, in *runtimeapi.StopPodSandboxRequest, opts ...grpc.CallOption) (*runtimeapi.StopPodSandboxResponse, error)
	RemovePodSandbox(ctx context.Context, in *runtimeapi.RemovePodSandboxRequest, opts ...grpc.CallOption) (*runtimeapi.RemovePodSandboxResponse, error)
	PodSandboxStatus(ctx context.Context, in *runtimeapi.PodSandboxStatusRequest, opts ...grpc.CallOption) (*runtimeapi.PodSandboxStatusResponse, error)
	ListPodSandbox(ctx context.Context, in *runtimeapi.ListPodSandboxRequest, opts ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error)
}

// ContainerService runs and inspects containers.
type ContainerService interface {
	CreateContainer(ctx context.Context, in *runtimeapi.CreateContainerRequest, opts ...grpc.CallOption) (*runtimeapi.CreateContainerResponse, error)
	StartContainer(ctx context.Context, in *runtimeapi.StartContainerRequest, opts ...grpc.CallOption) (*runtimeapi.StartContainerResponse, error)
	StopContainer(ctx context.Context, in *runtimeapi.StopContainerRequest, opts ...grpc.CallOption) (*runtimeapi.StopContainerResponse, error)
	RemoveContainer(ctx context.Context, in *runtimeapi.RemoveContainerRequest, opts ...grpc.CallOption) (*runtimeapi.RemoveContainerResponse, error)
	ListContainers(ctx context.Context, in *runtimeapi.ListContainersRequest, opts ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error)
	ContainerStatus(ctx context.Context, in *runtimeapi.ContainerStatusRequest, opts ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error)
	ExecSync(ctx context.Context, in *runtimeapi.ExecSyncRequest, opts ...grpc.CallOption) (*runtimeapi.ExecSyncResponse, error)
	UpdateContainerResources(ctx context.Context, in *runtimeapi.UpdateContainerResourcesRequest, opts ...grpc.CallOption) (*runtimeapi.UpdateContainerResourcesResponse, error)
}

// EventService is the runtime's container event stream. Runtimes without
// one answer Unimplemented.
type EventService interface {
	GetContainerEvents(ctx context.Context, in *runtimeapi.GetEventsRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[runtimeapi.ContainerEventResponse], error)
}

// RuntimeService is everything nodelet asks of the runtime service.
type RuntimeService interface {
	SandboxService
	ContainerService
	EventService
	StreamingService
	Version(ctx context.Context, in *runtimeapi.VersionRequest, opts ...grpc.CallOption) (*runtimeapi.VersionResponse, error)
	Status(ctx context.Context, in *runtimeapi.StatusRequest, opts ...grpc.CallOption) (*runtimeapi.StatusResponse, error)
}

// StreamingService hands out sessions on the runtime's streaming server,
// which the kubelet API proxies for kubectl exec, attach and port-forward.
type StreamingService interface {
	Exec(ctx context.Context, in *runtimeapi.ExecRequest, opts ...grpc.CallOption) (*runtimeapi.ExecResponse, error)
	Attach(ctx context.Context, in *runtimeapi.AttachRequest, opts ...grpc.CallOption) (*runtimeapi.AttachResponse, error)
	PortForward(ctx context.Context, in *runtimeapi.PortForwardRequest, opts ...grpc.CallOption) (*runtimeapi.PortForwardResponse, error)
}

// ErrRuntimeUnreachable classifies failures to reach the runtime at all, as
// opposed to the runtime refusing a request.
var ErrRuntimeUnreachable = errors.New("container runtime is unreachable")

// Dial connects to a CRI endpoint (unix:///path or a bare path) and checks
// that a runtime answers there, so a wrong endpoint fails at start-up with
// a message naming it rather than on the first pod.
// Extra options (a metrics interceptor, say) are added to the defaults.
func Dial(ctx context.Context, endpoint string, timeout time.Duration, extra ...grpc.DialOption) (*grpc.ClientConn, *runtimeapi.VersionResponse, error) {
	conn, err := dialSocket(endpoint, "container runtime", extra)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err := runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true))
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("%w: container runtime endpoint %q did not answer: %v", ErrRuntimeUnreachable, endpoint, err)
	}
	return conn, v, nil
}

// DialImages connects to a separate image service endpoint
// (imageServiceEndpoint) and checks that an image service answers there,
// as upstream's kubelet does, with ImageFsInfo.
func DialImages(ctx context.Context, endpoint string, timeout time.Duration, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	conn, err := dialSocket(endpoint, "image service", extra)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := runtimeapi.NewImageServiceClient(conn).ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{}, grpc.WaitForReady(true)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("%w: image service endpoint %q did not answer: %v", ErrRuntimeUnreachable, endpoint, err)
	}
	return conn, nil
}

// dialSocket checks that the endpoint is a unix socket and makes a client
// of it (which connects on first use).
func dialSocket(endpoint, what string, extra []grpc.DialOption) (*grpc.ClientConn, error) {
	path := strings.TrimPrefix(endpoint, "unix://")
	if strings.Contains(path, "://") {
		return nil, fmt.Errorf("%s endpoint %q: only unix sockets are supported", what, endpoint)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s endpoint %q: %v", ErrRuntimeUnreachable, what, endpoint, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return nil, fmt.Errorf("%w: %s endpoint %q is not a socket", ErrRuntimeUnreachable, what, endpoint)
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16*1024*1024), answers),
	}, extra...)
	conn, err := grpc.NewClient("unix://"+path, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %s endpoint %q: %v", ErrRuntimeUnreachable, what, endpoint, err)
	}
	return conn, nil
}

// ImageVolumeSupport says why the runtime cannot mount image volumes (an
// OCI image as a read-only volume, CRI Mount.image), or nil when it can:
// containerd can from 2.1, CRI-O from 1.31. The CRI has no feature flag
// for it, and a runtime without it would start the container with an
// empty mount, so the version decides.
func ImageVolumeSupport(v *runtimeapi.VersionResponse) error {
	minimum := map[string][2]int{"containerd": {2, 1}, "cri-o": {1, 31}}[v.GetRuntimeName()]
	major, minor, ok := majorMinor(v.GetRuntimeVersion())
	if minimum == [2]int{} || !ok || major < minimum[0] || (major == minimum[0] && minor < minimum[1]) {
		return fmt.Errorf("the container runtime (%s %s) cannot mount image volumes (containerd 2.1 and CRI-O 1.31 can)", v.GetRuntimeName(), v.GetRuntimeVersion())
	}
	return nil
}

// majorMinor reads "v2.4.2" or "1.6.20~ds1".
func majorMinor(version string) (major, minor int, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return major, minor, err1 == nil && err2 == nil
}
