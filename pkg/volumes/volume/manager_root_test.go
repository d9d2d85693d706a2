//go:build integration

// These tests need root (mounts, chown) or a cgroup v1 host: they run
// with the integration suites (make test), and go test ./... stays the
// unit suite that runs anywhere, unprivileged.

package volume

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/nodelet/nodelet/internal/testutil"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

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
	// A tmpfs's root is sticky, as upstream mounts it (1777); a disk
	// emptyDir is 0777.
	if st, _ := os.Stat(scratch); st.Mode() != os.ModeDir|os.ModeSticky|0o777 {
		t.Errorf("memory emptyDir mode %v, want dtrwxrwxrwx", st.Mode())
	}
	if st, _ := os.Stat(disk); st.Mode() != os.ModeDir|0o777 {
		t.Errorf("disk emptyDir mode %v, want drwxrwxrwx", st.Mode())
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
		v1.Volume{Name: "ram", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
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
	// Upstream's "EmptyDir volumes when FSGroup is specified nonexistent
	// volume subPath should have the correct mode and owner using
	// FSGroup" reads dgtrwxrwxrwx from a subPath created there.
	ram, _ := f.m.HostPath(pod.UID, "ram")
	check(ram, os.ModeDir|os.ModeSetgid|os.ModeSticky|0o777, 0, 2000)

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

// TestHugePagesEmptyDir: an emptyDir of medium HugePages is a hugetlbfs
// of the page size the pod asks for, torn down with the pod.
func TestHugePagesEmptyDir(t *testing.T) {
	f := newFixture(t)
	pod := testPod(v1.Volume{Name: "huge", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumHugePages}}})
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{"hugepages-2Mi": resource.MustParse("4Mi"), v1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   v1.ResourceList{"hugepages-2Mi": resource.MustParse("4Mi"), v1.ResourceMemory: resource.MustParse("64Mi")},
	}
	testutil.Must(t, f.m.WaitForAttachAndMount(context.Background(), pod))
	dir, _ := f.m.HostPath(pod.UID, "huge")
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(dir))
	testutil.Must(t, err)
	if len(mounts) != 1 || mounts[0].FSType != "hugetlbfs" || !strings.Contains(mounts[0].VFSOptions, "pagesize=2M") {
		t.Fatalf("mounts at %s: %+v", dir, mounts)
	}
	testutil.Must(t, f.m.WaitForUnmount(context.Background(), pod))
	if mounted, _ := mountinfo.Mounted(dir); mounted {
		t.Fatal("the hugetlbfs is still mounted")
	}
}
