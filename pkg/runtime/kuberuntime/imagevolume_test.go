package kuberuntime

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/fakecri"
	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/images"
)

// imageMountHelper mounts the image volume "data" at /data, as
// containeropts does: the volume's reference, for the manager to resolve.
type imageMountHelper struct{ testHelper }

func (imageMountHelper) RunContainerOptions(context.Context, *v1.Pod, *v1.Container, []string) (*RunContainerOptions, error) {
	return &RunContainerOptions{Mounts: []*runtimeapi.Mount{{ContainerPath: "/data", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "data:1"}}}}, nil
}

func imageVolumePod(policy v1.PullPolicy) *v1.Pod {
	pod := newPod(v1.RestartPolicyAlways, "a").pod
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "data:1", PullPolicy: policy}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	return pod
}

// TestImageVolumeIsPulledAndMounted: the volume's image is pulled with
// its own pull policy, and the container's mount names the pulled image.
func TestImageVolumeIsPulledAndMounted(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	rt := fakecri.New(clk, "img")
	rec := record.NewFakeRecorder(100)
	m := New(Options{Runtime: rt, Images: images.NewPuller(images.PullerOptions{Images: rt, Recorder: rec, Clock: clk}), Helper: imageMountHelper{testHelper{t.TempDir()}}, Recorder: rec, Clock: clk, PodLogsDir: t.TempDir()})
	f := &fixture{m: m, rt: rt, clock: clk, recorder: rec}

	// Never, and absent: the container waits as for its own image.
	pod := imageVolumePod(v1.PullNever)
	result := f.sync(t, pod)
	if err := result.Error(); !errors.Is(err, container.ErrImageNeverPull) {
		t.Fatalf("absent image volume with pull policy Never: %v", err)
	}
	if n := len(calls(rt, "CreateContainer")); n != 0 {
		t.Fatalf("%d containers created without their image volume", n)
	}

	pod = imageVolumePod(v1.PullIfNotPresent)
	testutil.Must(t, f.sync(t, pod).Error())
	var pulls int
	for _, c := range calls(rt, "PullImage") {
		if c == "PullImage data:1" {
			pulls++
		}
	}
	if pulls != 1 {
		t.Fatalf("%d pulls of the volume's image, want one: %v", pulls, calls(rt, "PullImage"))
	}
	st := f.status(t, pod)
	var running *container.Status
	for _, s := range st.ContainerStatuses {
		if s.State == container.StateRunning {
			running = s
		}
	}
	if running == nil {
		t.Fatal("no running container")
	}
	mounts := rt.ContainerConfig(running.ID.ID).GetMounts()
	if len(mounts) != 1 || mounts[0].GetImage().GetImage() == "" || mounts[0].GetImage().GetImage() == "data:1" || !mounts[0].Readonly {
		t.Fatalf("mounts %+v, want the pulled image's reference, read-only", mounts)
	}
}

func TestImageVolumeSupport(t *testing.T) {
	for _, tc := range []struct {
		name, version string
		ok            bool
	}{
		{"containerd", "1.6.20~ds1", false}, {"containerd", "v2.0.5", false}, {"containerd", "v2.1.0", true},
		{"containerd", "v2.4.2", true}, {"cri-o", "1.31.0", true}, {"cri-o", "1.30.4", false}, {"other", "9.9", false},
	} {
		err := ImageVolumeSupport(&runtimeapi.VersionResponse{RuntimeName: tc.name, RuntimeVersion: tc.version})
		if (err == nil) != tc.ok {
			t.Errorf("%s %s: %v", tc.name, tc.version, err)
		}
		if err != nil && !strings.Contains(err.Error(), tc.version) {
			t.Errorf("%s %s: the error does not name the runtime: %v", tc.name, tc.version, err)
		}
	}
}
