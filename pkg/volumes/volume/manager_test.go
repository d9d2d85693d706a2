package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/internal/volumetest"
	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

type fixture struct {
	m      *Manager
	api    *volumetest.Objects
	clock  *testingclock.FakeClock
	events *record.FakeRecorder
	root   string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{clock: testingclock.NewFakeClock(time.Unix(1000, 0)), events: record.NewFakeRecorder(100), root: t.TempDir()}
	f.api = volumetest.New(f.clock)
	f.m = NewManager(Options{
		RootDir: f.root, NodeName: "n1", HostIPs: []string{"10.0.0.1"}, Objects: f.api, Tokens: f.api, Recorder: f.events, Clock: f.clock,
		Allocatable: func() v1.ResourceList { return v1.ResourceList{v1.ResourceMemory: resource.MustParse("4Gi")} },
	})
	return f
}

func testPod(volumes ...v1.Volume) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", Labels: map[string]string{"app": "web"}},
		Spec: v1.PodSpec{ServiceAccountName: "sa", Volumes: volumes, Containers: []v1.Container{{Name: "main", Resources: v1.ResourceRequirements{
			Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")},
		}}}},
	}
}

// mountUp sets the pod's volumes up and tears them down when the test ends.
func (f *fixture) mountUp(t *testing.T, pod *v1.Pod) error {
	t.Helper()
	t.Cleanup(func() {
		if err := f.m.WaitForUnmount(context.Background(), pod); err != nil {
			t.Error(err)
		}
	})
	return f.m.WaitForAttachAndMount(context.Background(), pod)
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A missing configMap fails the volume with a FailedMount event naming
// it; once it exists the volume is set up. A configMap deleted later
// leaves the running pod its last content.
func TestMissingConfigMap(t *testing.T) {
	f := newFixture(t)
	pod := testPod(v1.Volume{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "late"},
	}}})
	err := f.mountUp(t, pod)
	if err == nil || !strings.Contains(err.Error(), `unmounted volumes=[cfg]`) || !strings.Contains(err.Error(), `"late" not found`) {
		t.Fatalf("error %v", err)
	}
	if e := <-f.events.Events; !strings.Contains(e, "FailedMount") || !strings.Contains(e, `volume "cfg"`) || !strings.Contains(e, "late") {
		t.Errorf("event %q", e)
	}
	if _, ok := f.m.HostPath(pod.UID, "cfg"); ok {
		t.Error("a failed volume resolves for mounts")
	}
	f.api.SetConfigMap("late", map[string]string{"k": "v"})
	if err := f.m.WaitForAttachAndMount(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	f.api.ConfigMaps = map[string]*v1.ConfigMap{}
	if err := f.m.WaitForAttachAndMount(context.Background(), pod); err != nil {
		t.Fatalf("a refresh failure failed a volume that was set up: %v", err)
	}
	dir, _ := f.m.HostPath(pod.UID, "cfg")
	if got := read(t, filepath.Join(dir, "k")); got != "v" {
		t.Errorf("k = %q", got)
	}
}

func TestHostPathTypes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	typ := func(t v1.HostPathType) *v1.HostPathType { return &t }
	for _, tc := range []struct {
		path    string
		typ     *v1.HostPathType
		wantErr string
	}{
		{filepath.Join(dir, "nothing"), nil, ""},
		{dir, typ(v1.HostPathDirectory), ""},
		{file, typ(v1.HostPathDirectory), "is not a directory"},
		{filepath.Join(dir, "absent"), typ(v1.HostPathDirectory), "does not exist"},
		{filepath.Join(dir, "made/deep"), typ(v1.HostPathDirectoryOrCreate), ""},
		{file, typ(v1.HostPathFile), ""},
		{dir, typ(v1.HostPathFile), "is not a file"},
		{filepath.Join(dir, "new-file"), typ(v1.HostPathFileOrCreate), ""},
		{file, typ(v1.HostPathSocket), "is not a socket"},
		{"/dev/null", typ(v1.HostPathCharDev), ""},
		{"/dev/null", typ(v1.HostPathBlockDev), "is not a block device"},
		// The API server lets a relative path through; nodelet's working
		// directory is not the host's root: refused, and nothing created.
		{"made-here", typ(v1.HostPathDirectoryOrCreate), "is not an absolute path"},
	} {
		err := checkHostPath(&v1.HostPathVolumeSource{Path: tc.path, Type: tc.typ})
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s %v: error %v, want %q", tc.path, tc.typ, err, tc.wantErr)
		}
	}
	if _, err := os.Stat("made-here"); !os.IsNotExist(err) {
		t.Errorf("a relative DirectoryOrCreate made something in the working directory: %v", err)
	}
	if st, err := os.Stat(filepath.Join(dir, "made/deep")); err != nil || !st.IsDir() {
		t.Error("DirectoryOrCreate made no directory")
	}
	if st, err := os.Stat(filepath.Join(dir, "new-file")); err != nil || !st.Mode().IsRegular() {
		t.Error("FileOrCreate made no file")
	}
}

func TestStaticPodsMayNotReferToAPIObjects(t *testing.T) {
	f := newFixture(t)
	f.api.SetConfigMap("cfg", map[string]string{"a": "1"})
	pod := testPod(v1.Volume{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "cfg"},
	}}})
	pod.Annotations = map[string]string{podutil.ConfigSourceAnnotationKey: podutil.FileSource}
	err := f.mountUp(t, pod)
	if !errors.Is(err, ErrStaticPodAPIObject) || !strings.Contains(err.Error(), `configMap "cfg"`) {
		t.Fatalf("error %v", err)
	}
}

func TestWithoutAnAPIServer(t *testing.T) {
	m := NewManager(Options{RootDir: t.TempDir()})
	pod := testPod(v1.Volume{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "cfg"},
	}}})
	if err := m.WaitForAttachAndMount(context.Background(), pod); err == nil || !strings.Contains(err.Error(), "needs an API server") {
		t.Fatalf("error %v", err)
	}
}

// statfs is a filesystem's size.
type statfs struct{ syscall.Statfs_t }

func (s *statfs) size() int64 { return int64(s.Blocks) * s.Bsize }

func statFs(path string, s *statfs) error { return syscall.Statfs(path, &s.Statfs_t) }

// TestImageVolumes: on a runtime that cannot mount images the volume
// fails with a FailedMount event naming why; on one that can there is
// nothing on the host to set up.
func TestImageVolumes(t *testing.T) {
	pod := testPod(v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "data:1"}}})
	rec := record.NewFakeRecorder(10)
	cannot := NewManager(Options{RootDir: t.TempDir(), Recorder: rec,
		ImageVolumes: func() error {
			return errors.New("the container runtime (containerd 1.6.20) cannot mount image volumes")
		}})
	err := cannot.WaitForAttachAndMount(context.Background(), pod)
	if err == nil || !strings.Contains(err.Error(), "cannot mount image volumes") {
		t.Fatalf("image volume on a runtime without them: %v", err)
	}
	if e := <-rec.Events; !strings.Contains(e, "FailedMount") || !strings.Contains(e, "containerd 1.6.20") {
		t.Fatalf("event %q", e)
	}
	can := NewManager(Options{RootDir: t.TempDir(), ImageVolumes: func() error { return nil }})
	testutil.Must(t, can.WaitForAttachAndMount(context.Background(), pod))
	if host, ok := can.HostPath(pod.UID, "data"); !ok || host != "" {
		t.Fatalf("image volume host path %q %v, want none", host, ok)
	}
}

type stepLog []string

func (l *stepLog) Begin(_ *v1.Pod, kind instrument.Kind, name string) func(error, string) {
	return func(err error, _ string) { *l = append(*l, fmt.Sprintf("%s %s %v", kind, name, err)) }
}

// Each volume's first set-up, and each failure, is a step of the pod's
// timeline; a refresh that works is not.
func TestVolumeStepsForTheTimeline(t *testing.T) {
	f := newFixture(t)
	steps := &stepLog{}
	f.m.o.Steps = steps
	pod := testPod(v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		v1.Volume{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "late"}}}})
	if err := f.mountUp(t, pod); err == nil {
		t.Fatal("the missing configMap did not fail")
	}
	f.api.SetConfigMap("late", map[string]string{"k": "v"})
	testutil.Must(t, f.m.WaitForAttachAndMount(context.Background(), pod))
	testutil.Must(t, f.m.WaitForAttachAndMount(context.Background(), pod))
	got := strings.Join(*steps, "; ")
	want := `volume scratch <nil>; volume cfg configmaps "late" not found; volume cfg <nil>`
	if got != want {
		t.Fatalf("steps %q\nwant  %q", got, want)
	}
}

// TestHugePageSize: the page size of a HugePages emptyDir is the one the
// pod asks huge pages of, or the one the medium names.
func TestHugePageSize(t *testing.T) {
	pod := func(sizes ...string) *v1.Pod {
		p := &v1.Pod{}
		for _, s := range sizes {
			r := v1.ResourceList{v1.ResourceName("hugepages-" + s): resource.MustParse("2Gi")}
			p.Spec.Containers = append(p.Spec.Containers, v1.Container{Resources: v1.ResourceRequirements{Requests: r, Limits: r}})
		}
		return p
	}
	for _, tc := range []struct {
		medium v1.StorageMedium
		pod    *v1.Pod
		want   string
	}{
		{v1.StorageMediumHugePages, pod("2Mi"), "2Mi"},
		{v1.StorageMediumHugePages, pod("2Mi", "1Gi"), "error: medium: HugePages can't be used if container requests multiple huge page sizes"},
		{"HugePages-1Gi", pod("2Mi", "1Gi"), "1Gi"},
		{"HugePages-1Gi", pod("2Mi"), "error: medium HugePages-1Gi: hugePages storage requested, but there is no resource request for huge pages"},
		{v1.StorageMediumHugePages, pod(), "error: medium HugePages: hugePages storage requested, but there is no resource request for huge pages"},
	} {
		got, err := hugePageSize(tc.medium, tc.pod)
		if err != nil {
			got = "error: " + err.Error()
		}
		if got != tc.want {
			t.Errorf("%s: %s, want %s", tc.medium, got, tc.want)
		}
	}
}
