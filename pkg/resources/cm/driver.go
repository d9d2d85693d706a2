package cm

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// RuntimeConfigClient is the CRI call that tells the runtime's cgroup
// driver.
type RuntimeConfigClient interface {
	RuntimeConfig(ctx context.Context, in *runtimeapi.RuntimeConfigRequest, opts ...grpc.CallOption) (*runtimeapi.RuntimeConfigResponse, error)
}

// NegotiateDriver is the cgroup driver the runtime reports (CRI
// RuntimeConfig), which wins over the configuration as upstream's does:
// the two must agree, and the runtime cannot change its mind. A runtime
// that does not report one (containerd 1.x) leaves the configuration's.
func NegotiateDriver(rt RuntimeConfigClient, configured string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := rt.RuntimeConfig(ctx, &runtimeapi.RuntimeConfigRequest{})
	if status.Code(err) == codes.Unimplemented {
		klog.InfoS("The runtime does not report its cgroup driver (CRI RuntimeConfig); using cgroupDriver from the configuration", "cgroupDriver", configured)
		return configured, nil
	}
	if err != nil {
		return "", fmt.Errorf("asking the runtime for its cgroup driver: %w", err)
	}
	var reported string
	switch d := resp.GetLinux().GetCgroupDriver(); {
	case resp.GetLinux() == nil:
		return configured, nil
	case d == runtimeapi.CgroupDriver_SYSTEMD:
		reported = "systemd"
	case d == runtimeapi.CgroupDriver_CGROUPFS:
		reported = "cgroupfs"
	default:
		return "", fmt.Errorf("the runtime reports an unknown cgroup driver %d", d)
	}
	if reported != configured {
		klog.InfoS("Using the cgroup driver the runtime reports, not the configuration's", "runtime", reported, "cgroupDriver", configured)
	}
	return reported, nil
}
