package devicemanager

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// endpoint is the connection to one registered plugin.
type endpoint struct {
	resource string
	socket   string
	conn     *grpc.ClientConn
	api      pluginapi.DevicePluginClient
	options  *pluginapi.DevicePluginOptions
	// cancel ends its ListAndWatch.
	cancel context.CancelFunc
}

// rpcTimeout bounds the plugin calls made while a pod is admitted or a
// container created (upstream bounds PreStartContainer the same way).
const rpcTimeout = 30 * time.Second

// connect dials a plugin that registered and reads its options; the
// plugin must answer within dialTimeout, as upstream's dial.
func connect(ctx context.Context, resource, socket string) (*endpoint, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("localhost"))
	if err != nil {
		return nil, fmt.Errorf("failed to dial device plugin: %w", err)
	}
	e := &endpoint{resource: resource, socket: socket, conn: conn, api: pluginapi.NewDevicePluginClient(conn)}
	cctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	e.options, err = e.api.GetDevicePluginOptions(cctx, &pluginapi.Empty{}, grpc.WaitForReady(true))
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("failed to get device plugin options: %w", err)
	}
	return e, nil
}

const dialTimeout = 10 * time.Second

func (e *endpoint) close() {
	if e.cancel != nil {
		e.cancel()
	}
	e.conn.Close()
}

func (e *endpoint) allocate(ctx context.Context, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	resp, err := e.api.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		return nil, err
	}
	if len(resp.ContainerResponses) == 0 {
		return nil, fmt.Errorf("no containers return in allocation response %v", resp)
	}
	return resp.ContainerResponses[0], nil
}

func (e *endpoint) preferred(ctx context.Context, available, mustInclude []string, size int) ([]string, error) {
	if e.options == nil || !e.options.GetPreferredAllocationAvailable {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	resp, err := e.api.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
		AvailableDeviceIDs: available, MustIncludeDeviceIDs: mustInclude, AllocationSize: int32(size),
	}}})
	if err != nil {
		return nil, fmt.Errorf("device plugin GetPreferredAllocation rpc failed with err: %w", err)
	}
	if len(resp.ContainerResponses) == 0 {
		return nil, nil
	}
	return resp.ContainerResponses[0].DeviceIDs, nil
}

func (e *endpoint) preStart(ctx context.Context, ids []string) error {
	if e.options == nil || !e.options.PreStartRequired {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, pluginapi.KubeletPreStartContainerRPCTimeoutInSecs*time.Second)
	defer cancel()
	if _, err := e.api.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: ids}); err != nil {
		return fmt.Errorf("device plugin PreStartContainer rpc failed with err: %w", err)
	}
	return nil
}
