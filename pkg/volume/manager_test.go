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

	"github.com/moby/sys/mountinfo"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/internal/volumetest"
	"github.com/nodelet/nodelet/pkg/podutil"
	"github.com/nodelet/nodelet/pkg/timeline"
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

func TestProjectedVolume(t *testing.T) {
	f := newFixture(t)
	f.api.SetConfigMap("ca", map[string]string{"ca.crt": "CERT", "other": "x"})
	exp := int64(3600)
	pod := testPod(v1.Volume{Name: "kube-api-access", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		DefaultMode: new(int32(0o640)),
		Sources: []v1.VolumeProjection{
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &exp}},
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "ca"}, Items: []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "absent"}, Optional: new(true)}},
			{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{
				{Path: "namespace", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}},
				{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
				{Path: "cpu_limit", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "main", Resource: "limits.cpu", Divisor: resource.MustParse("1m")}},
				{Path: "mem_limit", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "main", Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}},
			}}},
		},
	}}})
	if err := f.mountUp(t, pod); err != nil {
		t.Fatal(err)
	}
	dir, ok := f.m.HostPath(pod.UID, "kube-api-access")
	if !ok || dir != filepath.Join(f.root, "pods/u1/volumes/kubernetes.io~projected/kube-api-access") {
		t.Fatalf("host path %q %v", dir, ok)
	}
	for file, want := range map[string]string{"token": "token-sa-1", "ca.crt": "CERT", "namespace": "ns", "labels": `app="web"`, "cpu_limit": "250", "mem_limit": "4096"} {
		if got := read(t, filepath.Join(dir, file)); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "token")); err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("token mode %v (%v), want 0640", st.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(dir, "other")); err == nil {
		t.Error("a key not in items was written")
	}
	if mounted, _ := mountinfo.Mounted(dir); !mounted {
		t.Error("a projected volume is not on a tmpfs")
	}

	// The token is reused until 80% of its life passed, then renewed
	// at the next sync, in place.
	f.clock.Step(45 * time.Minute)
	if err := f.m.WaitForAttachAndMount(context.Background(), pod); err != nil || f.api.Tokens() != 1 {
		t.Fatalf("tokens requested: %d (%v), want 1", f.api.Tokens(), err)
	}
	f.clock.Step(5 * time.Minute)
	if err := f.m.WaitForAttachAndMount(context.Background(), pod); err != nil || f.api.Tokens() != 2 {
		t.Fatalf("tokens requested: %d (%v), want 2", f.api.Tokens(), err)
	}
	if got := read(t, filepath.Join(dir, "token")); got != "token-sa-2" {
		t.Errorf("token after renewal %q", got)
	}
}

// A configMap volume follows its configMap through the ..data swap: new
// keys appear, removed ones go, and the old generation is cleaned up.
func TestConfigMapVolumeIsUpdatedAtomically(t *testing.T) {
	f := newFixture(t)
	f.api.SetConfigMap("cfg", map[string]string{"a": "1", "b": "2"})
	pod := testPod(v1.Volume{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "cfg"},
	}}})
	if err := f.mountUp(t, pod); err != nil {
		t.Fatal(err)
	}
	dir, _ := f.m.HostPath(pod.UID, "cfg")
	first, err := os.Readlink(filepath.Join(dir, dataDir))
	if err != nil || read(t, filepath.Join(dir, "a")) != "1" {
		t.Fatalf("..data %q (%v)", first, err)
	}
	if target, _ := os.Readlink(filepath.Join(dir, "a")); target != "..data/a" {
		t.Errorf("a links to %q, want ..data/a", target)
	}
	// Unchanged: nothing rewritten.
	if err := f.m.WaitForAttachAndMount(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.Readlink(filepath.Join(dir, dataDir)); again != first {
		t.Errorf("an unchanged configMap was rewritten: %q -> %q", first, again)
	}

	f.api.SetConfigMap("cfg", map[string]string{"a": "one", "c": "3"})
	if err := f.m.WaitForAttachAndMount(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(dir, "a")); got != "one" {
		t.Errorf("a = %q after the update", got)
	}
	if got := read(t, filepath.Join(dir, "c")); got != "3" {
		t.Errorf("c = %q after the update", got)
	}
	if _, err := os.Lstat(filepath.Join(dir, "b")); !os.IsNotExist(err) {
		t.Errorf("b survived its removal from the configMap: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, first)); !os.IsNotExist(err) {
		t.Errorf("the old generation %s is still there", first)
	}
	if mounted, _ := mountinfo.Mounted(dir); mounted {
		t.Error("a configMap volume is on a tmpfs")
	}
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

func TestSecretAndMemoryEmptyDirAreTmpfsAndTornDown(t *testing.T) {
	f := newFixture(t)
	f.api.SetSecret("creds", map[string][]byte{"password": []byte("hunter2")})
	size := resource.MustParse("8Mi")
	pod := testPod(
		v1.Volume{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "creds", DefaultMode: new(int32(0o400))}}},
		v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: &size}}},
		v1.Volume{Name: "disk", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
	)
	if err := f.m.WaitForAttachAndMount(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	secret, _ := f.m.HostPath(pod.UID, "creds")
	scratch, _ := f.m.HostPath(pod.UID, "scratch")
	disk, _ := f.m.HostPath(pod.UID, "disk")
	for _, d := range []string{secret, scratch} {
		if mounted, _ := mountinfo.Mounted(d); !mounted {
			t.Errorf("%s is not a tmpfs", d)
		}
	}
	if mounted, _ := mountinfo.Mounted(disk); mounted {
		t.Errorf("a disk emptyDir is a mount")
	}
	if st, err := os.Stat(filepath.Join(secret, "..data", "password")); err != nil || st.Mode().Perm() != 0o400 {
		t.Errorf("secret file %v %v", st, err)
	}
	if st, _ := os.Stat(scratch); st.Mode().Perm() != 0o777 {
		t.Errorf("emptyDir mode %v", st.Mode())
	}
	var s statfs
	if err := statFs(scratch, &s); err != nil || s.size() != 8<<20 {
		t.Errorf("memory emptyDir size %d (%v), want its 8Mi sizeLimit", s.size(), err)
	}

	if err := f.m.WaitForUnmount(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{secret, scratch, disk} {
		if mounted, _ := mountinfo.Mounted(d); mounted {
			t.Errorf("%s still mounted", d)
		}
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s still exists", d)
		}
	}
	if _, ok := f.m.HostPath(pod.UID, "disk"); ok {
		t.Error("the torn-down pod's volumes still resolve")
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
	} {
		err := checkHostPath(&v1.HostPathVolumeSource{Path: tc.path, Type: tc.typ})
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s %v: error %v, want %q", tc.path, tc.typ, err, tc.wantErr)
		}
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

// With an fsGroup, volume files are the group's and group-readable (a
// 0400 secret becomes 0440), directories setgid, an emptyDir the group's;
// the token belongs to the user all containers run as, mode 0600 plus the
// group's read.
func TestFSGroupOwnership(t *testing.T) {
	f := newFixture(t)
	f.api.SetSecret("creds", map[string][]byte{"password": []byte("hunter2")})
	pod := testPod(
		v1.Volume{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "creds", DefaultMode: new(int32(0o400)),
			Items: []v1.KeyToPath{{Key: "password", Path: "db/password"}}}}},
		v1.Volume{Name: "token", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}}}}}},
		v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
	)
	pod.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: new(int64(1000)), FSGroup: new(int64(2000))}
	if err := f.mountUp(t, pod); err != nil {
		t.Fatal(err)
	}
	check := func(path string, wantMode os.FileMode, wantUID, wantGID int) {
		t.Helper()
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if uid, gid := owner(st); st.Mode() != wantMode || uid != wantUID || gid != wantGID {
			t.Errorf("%s: %v %d:%d, want %v %d:%d", path, st.Mode(), uid, gid, wantMode, wantUID, wantGID)
		}
	}
	creds, _ := f.m.HostPath(pod.UID, "creds")
	token, _ := f.m.HostPath(pod.UID, "token")
	scratch, _ := f.m.HostPath(pod.UID, "scratch")
	check(filepath.Join(creds, "db", "password"), 0o440, 0, 2000)
	check(filepath.Join(creds, "..data", "db"), os.ModeDir|os.ModeSetgid|0o755, 0, 2000)
	check(filepath.Join(creds, "..data")+"/", os.ModeDir|os.ModeSetgid|0o755, 0, 2000)
	check(filepath.Join(token, "token"), 0o640, 1000, 2000)
	check(scratch, os.ModeDir|os.ModeSetgid|0o777, 0, 2000)

	// Nothing changed: the next sync rewrites nothing.
	data, _ := os.Readlink(filepath.Join(creds, "..data"))
	if err := f.m.WaitForAttachAndMount(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.Readlink(filepath.Join(creds, "..data")); again != data {
		t.Errorf("an unchanged volume was rewritten: %s → %s", data, again)
	}

	// Containers running as different users: the token stays root's.
	other := pod.DeepCopy()
	other.UID = "u2"
	other.Spec.Containers = append(other.Spec.Containers, v1.Container{Name: "side", SecurityContext: &v1.SecurityContext{RunAsUser: new(int64(1001))}})
	if err := f.mountUp(t, other); err != nil {
		t.Fatal(err)
	}
	token, _ = f.m.HostPath(other.UID, "token")
	check(filepath.Join(token, "token"), 0o640, 0, 2000)

	// No fsGroup, no user: modes and owners as given.
	plain := testPod(v1.Volume{Name: "token", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
		{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}}}}}})
	plain.UID = "u3"
	if err := f.mountUp(t, plain); err != nil {
		t.Fatal(err)
	}
	token, _ = f.m.HostPath(plain.UID, "token")
	check(filepath.Join(token, "token"), 0o644, 0, 0)
}

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

func (l *stepLog) Begin(_ *v1.Pod, kind timeline.Kind, name string) func(error, string) {
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

// ApplyFSGroup gives a whole volume to the pod's fsGroup; with
// OnRootMismatch a root already right means nothing below is touched,
// and a wrong root means everything is.
func TestApplyFSGroup(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "sub", "f")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	gidOf := func(p string) int {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		_, gid := owner(st)
		return gid
	}
	pod := testPod()
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: new(int64(3000))}
	if err := ApplyFSGroup(dir, pod); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(file); gidOf(file) != 3000 || st.Mode().Perm() != 0o660 {
		t.Fatalf("file %v gid %d", st.Mode(), gidOf(file))
	}
	if st, _ := os.Stat(dir); st.Mode()&os.ModeSetgid == 0 {
		t.Errorf("the root is not setgid: %v", st.Mode())
	}
	// The root is right: OnRootMismatch leaves a file changed since alone.
	if err := os.Chown(file, 0, 0); err != nil {
		t.Fatal(err)
	}
	pod.Spec.SecurityContext.FSGroupChangePolicy = new(v1.FSGroupChangeOnRootMismatch)
	if err := ApplyFSGroup(dir, pod); err != nil {
		t.Fatal(err)
	}
	if gidOf(file) != 0 {
		t.Error("OnRootMismatch walked a volume whose root was right")
	}
	// The root is wrong: everything is given again.
	if err := os.Chown(dir, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := ApplyFSGroup(dir, pod); err != nil {
		t.Fatal(err)
	}
	if gidOf(file) != 3000 {
		t.Error("OnRootMismatch did not walk a volume whose root was wrong")
	}
}
