//go:build integration

package stats

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A real process in a real cgroup of this host: Details reads its
// cgroup's settings and its process as cAdvisor would, finding the
// cgroup from the process the runtime names (asked once).
func TestDetailsOfARealCgroup(t *testing.T) {
	name := fmt.Sprintf("/nodelet-detail-test-%d", os.Getpid())
	limit := int64(80_000_000)
	m, err := manager.New(&cgroups.Cgroup{Path: name, Resources: &cgroups.Resources{SkipDevices: true, CpuShares: 2, CpuPeriod: 100000, Memory: limit}})
	if err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sleeper.Process.Kill()
		_ = sleeper.Wait()
		_ = m.Destroy()
	})
	if err := m.Apply(sleeper.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := m.Set(&cgroups.Resources{SkipDevices: true, CpuShares: 2, CpuPeriod: 100000, Memory: limit}); err != nil {
		t.Fatal(err)
	}
	rt := &pidRuntime{pid: sleeper.Process.Pid}
	d := NewDetails(rt)
	for range 2 {
		got, err := d.Read(context.Background(), "c1")
		if err != nil {
			t.Fatal(err)
		}
		// The kernel rounds the limit down to whole pages.
		if got.Processes != 1 || got.Threads != 1 || got.FileDescriptors < 3 || got.NoFileSoft == 0 ||
			got.CPUShares != 2 || got.CPUPeriod != 100000 || got.MemoryLimit != uint64(limit)&^4095 || got.MemoryReservation != 0 {
			t.Errorf("detail %+v", got)
		}
	}
	if rt.calls != 1 {
		t.Errorf("the runtime was asked %d times for the process, want once", rt.calls)
	}
	// A container gone from the runtime: forgotten, and asked again.
	d.Forget(map[string]bool{})
	if _, err := d.Read(context.Background(), "c1"); err != nil || rt.calls != 2 {
		t.Errorf("after Forget: %v, %d calls", err, rt.calls)
	}
}

// pidRuntime answers a container's verbose status as containerd does.
type pidRuntime struct {
	pid   int
	calls int
}

func (r *pidRuntime) ContainerStatus(_ context.Context, in *runtimeapi.ContainerStatusRequest, _ ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error) {
	r.calls++
	return &runtimeapi.ContainerStatusResponse{Info: map[string]string{"info": fmt.Sprintf(`{"pid": %d, "sandboxID": "s1"}`, r.pid)}}, nil
}
