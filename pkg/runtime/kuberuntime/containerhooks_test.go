package kuberuntime

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// deviceHook is a resource manager as the runtime sees it: it gives the
// container an env var, a device and a CDI device at creation, and
// records (or fails) the step between creation and start.
type deviceHook struct {
	preStartErr error
	started     []string
}

func (h *deviceHook) PreCreateContainer(_ context.Context, _ *v1.Pod, c *v1.Container, cfg *runtimeapi.ContainerConfig) error {
	cfg.Envs = append(cfg.Envs, &runtimeapi.KeyValue{Key: "DEVICE", Value: []byte("gpu0")})
	cfg.Devices = append(cfg.Devices, &runtimeapi.Device{HostPath: "/dev/gpu0", ContainerPath: "/dev/gpu0", Permissions: "rw"})
	cfg.CDIDevices = append(cfg.CDIDevices, &runtimeapi.CDIDevice{Name: "vendor.com/gpu=0"})
	cfg.Linux.Resources.CpusetCpus = "1"
	return nil
}

func (h *deviceHook) PreStartContainer(_ context.Context, _ *v1.Pod, c *v1.Container, id string) error {
	h.started = append(h.started, c.Name+" "+id)
	return h.preStartErr
}

// TestContainerHooks: what the hooks add reaches CreateContainer, the
// command is expanded with the env they leave, and PreStartContainer
// runs between creation and start with the container's ID.
func TestContainerHooks(t *testing.T) {
	f := newFixture(t)
	h := &deviceHook{}
	f.m.containerHooks = []ContainerHook{h}
	pod := newPod(v1.RestartPolicyAlways, "app").pod
	pod.Spec.Containers[0].Command = []string{"run", "$(DEVICE)"}
	if err := f.sync(t, pod).Error(); err != nil {
		t.Fatal(err)
	}
	id := f.rt.ContainerIDs("app", nil)[0]
	cfg := f.rt.ContainerConfig(id)
	if got := strings.Join(cfg.Command, " "); got != "run gpu0" {
		t.Errorf("command %q, want it expanded with the hook's env", got)
	}
	if len(cfg.Devices) != 1 || len(cfg.CDIDevices) != 1 || cfg.CDIDevices[0].Name != "vendor.com/gpu=0" || cfg.Linux.Resources.CpusetCpus != "1" {
		t.Errorf("created with devices %v, CDI devices %v, cpuset %q", cfg.Devices, cfg.CDIDevices, cfg.Linux.Resources.CpusetCpus)
	}
	if want := []string{"app " + id}; !slices.Equal(h.started, want) {
		t.Errorf("PreStartContainer calls %q, want %q", h.started, want)
	}
	order := calls(f.rt, "CreateContainer", "StartContainer")
	if len(order) != 2 || !strings.HasPrefix(order[0], "CreateContainer") {
		t.Errorf("runtime calls %q", order)
	}
}

// TestFailedPreStartHook: the container is created but never started;
// the failure is PreStartHookError with upstream's event.
func TestFailedPreStartHook(t *testing.T) {
	f := newFixture(t)
	f.m.containerHooks = []ContainerHook{&deviceHook{preStartErr: errors.New("plugin gone")}}
	pod := newPod(v1.RestartPolicyAlways, "app").pod
	result := f.sync(t, pod)
	if !errors.Is(result.Error(), container.ErrPreStartHook) {
		t.Fatalf("sync error %v, want PreStartHookError", result.Error())
	}
	if got := calls(f.rt, "StartContainer"); len(got) != 0 {
		t.Errorf("the container was started: %q", got)
	}
	if got := calls(f.rt, "CreateContainer"); len(got) != 1 {
		t.Errorf("CreateContainer calls %q, want one (the hook ran after it)", got)
	}
	if ev := drain(f.recorder); !strings.Contains(ev, "Warning Failed Error: Internal PreStartContainer hook failed: plugin gone") {
		t.Errorf("events %q", ev)
	}
}
