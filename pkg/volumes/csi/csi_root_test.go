//go:build integration

// These tests need root (mounts, chown) or a cgroup v1 host: they run
// with the integration suites (make test), and go test ./... stays the
// unit suite that runs anywhere, unprivileged.

package csi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodelet/nodelet/internal/csitest"
	"github.com/nodelet/nodelet/pkg/resources/pluginwatcher"
	"github.com/nodelet/nodelet/pkg/volumes/volume"
)

// A volume shared by two pods is staged once, published to each, and
// unstaged only when the last pod lets it go; teardown needs nothing but
// what is on disk (a new Mounter, as after a restart); the data stays.
func TestStagePublishAndTearDown(t *testing.T) {
	root := shortDir(t)
	r, d := registered(t, root, csitest.Options{Name: "hostpath.test", Stage: true, Stats: true})
	api := &fakeAPI{drivers: map[string]*storagev1.CSIDriver{"hostpath.test": {Spec: storagev1.CSIDriverSpec{
		AttachRequired: new(false), PodInfoOnMount: new(true)}}},
		secrets: map[string]*v1.Secret{"ns/creds": {Data: map[string][]byte{"password": []byte("s3cret")}}}}
	m := NewMounter(MounterOptions{RootDir: root, NodeName: "n1", Drivers: r, API: api})
	ctx := context.Background()
	p1, p2 := csiPod("u1"), csiPod("u2")
	target1, err := m.SetUp(ctx, p1, "data", csiPV("vol1"), false)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target1, "hello"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	target2, err := m.SetUp(ctx, p2, "data", csiPV("vol1"), true)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(target2, "hello")); err != nil || string(b) != "kept" {
		t.Fatalf("second pod reads %q (%v)", b, err)
	}
	if err := os.WriteFile(filepath.Join(target2, "x"), nil, 0o644); err == nil {
		t.Error("a readOnly publish is writable")
	}
	pub := d.LastRequest("NodePublishVolume").(*csipb.NodePublishVolumeRequest)
	if pub.Secrets["password"] != "s3cret" || pub.VolumeContext["k"] != "v" || pub.VolumeContext["csi.storage.k8s.io/pod.name"] != "p-u2" ||
		pub.VolumeCapability.GetMount().FsType != "ext4" || pub.VolumeCapability.GetMount().MountFlags[0] != "noatime" || !pub.Readonly ||
		pub.StagingTargetPath != m.StagingPath("hostpath.test", "vol1") {
		t.Errorf("publish request %+v", pub)
	}

	stats := m.VolumeStats(ctx, "u1")
	if len(stats) != 1 || stats[0].Name != "data" || stats[0].CapacityBytes == nil || *stats[0].CapacityBytes == 0 ||
		stats[0].PVCRef == nil || stats[0].PVCRef.Name != "claim" || stats[0].InodesUsed == nil {
		t.Errorf("volume stats %+v", stats)
	}
	if inUse := m.VolumesInUse(); len(inUse) != 1 || inUse[0] != "kubernetes.io/csi/hostpath.test^vol1" {
		t.Errorf("volumes in use: %v", inUse)
	}
	restarted := NewMounter(MounterOptions{RootDir: root, NodeName: "n1", Drivers: r, API: api})
	if err := restarted.TearDown(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	want := "NodeStageVolume vol1,NodePublishVolume vol1,NodeStageVolume vol1,NodePublishVolume vol1,NodeUnpublishVolume vol1"
	if got := strings.Join(d.Calls(), ","); got != want {
		t.Errorf("calls %s\nwant  %s", got, want)
	}
	if err := restarted.TearDown(ctx, "u2"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(d.Calls()[5:], ","); got != "NodeUnpublishVolume vol1,NodeUnstageVolume vol1" {
		t.Errorf("last pod's teardown: %s", got)
	}
	if inUse := m.VolumesInUse(); len(inUse) != 0 {
		t.Errorf("volumes in use after both pods: %v", inUse)
	}
	if _, err := os.Stat(m.StagingPath("hostpath.test", "vol1")); !os.IsNotExist(err) {
		t.Errorf("the staging directory stays: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(d.Backing, "vol1", "hello")); err != nil || string(b) != "kept" {
		t.Errorf("the volume's data: %q (%v)", b, err)
	}
}

// A driver that needs attaching waits for the attach/detach controller's
// VolumeAttachment, and passes its metadata on; a teardown whose driver
// is gone fails (and is retried) rather than leave a mount behind.
func TestAttachRequiredAndDriverGone(t *testing.T) {
	root := shortDir(t)
	r, d := registered(t, root, csitest.Options{Name: "hostpath.test"})
	api := &fakeAPI{drivers: map[string]*storagev1.CSIDriver{}, attachments: map[string]*storagev1.VolumeAttachment{},
		secrets: map[string]*v1.Secret{"ns/creds": {}}}
	m := NewMounter(MounterOptions{RootDir: root, NodeName: "n1", Drivers: r, API: api})
	ctx := context.Background()
	pod := csiPod("u1")
	if _, err := m.SetUp(ctx, pod, "data", csiPV("vol1"), false); !errors.Is(err, ErrNotAttached) {
		t.Fatalf("before the attachment: %v", err)
	}
	name := AttachmentName("vol1", "hostpath.test", "n1")
	api.attachments[name] = &storagev1.VolumeAttachment{Status: storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: map[string]string{"dev": "sdb"}}}
	if _, err := m.SetUp(ctx, pod, "data", csiPV("vol1"), false); !errors.Is(err, ErrNotAttached) || !strings.Contains(err.Error(), "volumesAttached") {
		t.Fatalf("attached, but not yet in the node's status: %v", err)
	}
	api.attached = []v1.AttachedVolume{{Name: "kubernetes.io/csi/hostpath.test^vol1"}}
	if _, err := m.SetUp(ctx, pod, "data", csiPV("vol1"), false); err != nil {
		t.Fatal(err)
	}
	if pub := d.LastRequest("NodePublishVolume").(*csipb.NodePublishVolumeRequest); pub.PublishContext["dev"] != "sdb" || pub.StagingTargetPath != "" {
		t.Errorf("publish request %+v", pub)
	}
	d.Stop()
	r.Deregister(ctx, pluginwatcher.Plugin{Type: registerapi.CSIPlugin, Name: "hostpath.test", Socket: d.RegSock})
	if err := m.TearDown(ctx, "u1"); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("teardown without its driver: %v", err)
	}
	if _, err := os.Stat(filepath.Join(m.volumeDir("u1", "data"), volDataFile)); err != nil {
		t.Errorf("the record of a volume still published went: %v", err)
	}
}

// An inline ephemeral volume is published with the pod's identity, if
// the driver allows inline volumes; otherwise it is refused, by name.
func TestInlineVolumes(t *testing.T) {
	root := shortDir(t)
	r, d := registered(t, root, csitest.Options{Name: "hostpath.test"})
	api := &fakeAPI{drivers: map[string]*storagev1.CSIDriver{"hostpath.test": {Spec: storagev1.CSIDriverSpec{AttachRequired: new(false)}}}}
	m := NewMounter(MounterOptions{RootDir: root, NodeName: "n1", Drivers: r, API: api})
	pod := csiPod("u1")
	vol := &v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "hostpath.test", VolumeAttributes: map[string]string{"size": "1Mi"}}}}
	if _, err := m.SetUpInline(context.Background(), pod, vol); err == nil || !strings.Contains(err.Error(), "does not support ephemeral inline volumes") {
		t.Fatalf("not allowed: %v", err)
	}
	api.drivers["hostpath.test"].Spec.VolumeLifecycleModes = []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecycleEphemeral}
	api.drivers["hostpath.test"].Spec.PodInfoOnMount = new(true)
	target, err := m.SetUpInline(context.Background(), pod, vol)
	if err != nil {
		t.Fatal(err)
	}
	pub := d.LastRequest("NodePublishVolume").(*csipb.NodePublishVolumeRequest)
	if pub.VolumeContext["csi.storage.k8s.io/ephemeral"] != "true" || pub.VolumeContext["size"] != "1Mi" || pub.TargetPath != target ||
		!strings.HasPrefix(pub.VolumeId, "csi-") {
		t.Errorf("publish request %+v", pub)
	}
	if err := m.TearDown(context.Background(), "u1"); err != nil {
		t.Fatal(err)
	}
}

// Through the volume manager: a claim bound to a CSI volume is published
// and its teardown goes through the driver before the directory goes.
func TestVolumeManagerUsesCSI(t *testing.T) {
	root := shortDir(t)
	r, d := registered(t, root, csitest.Options{Name: "hostpath.test", Stage: true})
	api := &fakeAPI{drivers: map[string]*storagev1.CSIDriver{"hostpath.test": {Spec: storagev1.CSIDriverSpec{AttachRequired: new(false)}}},
		secrets: map[string]*v1.Secret{"ns/creds": {}}}
	pv := csiPV("vol1")
	pv.Spec.ClaimRef = &v1.ObjectReference{UID: "c1"}
	vm := volume.NewManager(volume.Options{RootDir: root, CSI: NewMounter(MounterOptions{RootDir: root, NodeName: "n1", Drivers: r, API: api}),
		Claims: oneClaim{pv}})
	pod := csiPod("u1")
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}}
	if err := vm.WaitForAttachAndMount(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if p, _ := vm.HostPath("u1", "data"); !strings.HasSuffix(p, "kubernetes.io~csi/data/mount") {
		t.Errorf("host path %q", p)
	}
	if err := vm.WaitForUnmount(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(d.Calls(), ","); got != "NodeStageVolume vol1,NodePublishVolume vol1,NodeUnpublishVolume vol1,NodeUnstageVolume vol1" {
		t.Errorf("calls %s", got)
	}
}

// The pod's fsGroup is applied as the CSIDriver's fsGroupPolicy says
// (File always; the default only with an fsType and ReadWriteOnce; None
// never), or handed to a driver that applies it itself.
func TestFSGroupPolicy(t *testing.T) {
	for _, tc := range []struct {
		name      string
		policy    *storagev1.FSGroupPolicy
		fsType    string
		mountGrp  bool
		wantGroup bool
		wantGiven string
	}{
		{"default with fsType", nil, "ext4", false, true, ""},
		{"default without fsType", nil, "", false, false, ""},
		{"File", new(storagev1.FileFSGroupPolicy), "", false, true, ""},
		{"None", new(storagev1.NoneFSGroupPolicy), "ext4", false, false, ""},
		{"delegated to the driver", new(storagev1.FileFSGroupPolicy), "", true, false, "4242"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := shortDir(t)
			r, d := registered(t, root, csitest.Options{Name: "hostpath.test", MountGroup: tc.mountGrp})
			api := &fakeAPI{drivers: map[string]*storagev1.CSIDriver{"hostpath.test": {Spec: storagev1.CSIDriverSpec{
				AttachRequired: new(false), FSGroupPolicy: tc.policy}}}, secrets: map[string]*v1.Secret{"ns/creds": {}}}
			m := NewMounter(MounterOptions{RootDir: root, NodeName: "n1", Drivers: r, API: api})
			pod := csiPod("u1")
			pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: new(int64(4242))}
			pv := csiPV("vol1")
			pv.Spec.CSI.FSType = tc.fsType
			target, err := m.SetUp(context.Background(), pod, "data", pv, false)
			if err != nil {
				t.Fatal(err)
			}
			defer m.TearDown(context.Background(), "u1")
			info, err := os.Stat(target)
			if err != nil {
				t.Fatal(err)
			}
			gid := info.Sys().(*syscall.Stat_t).Gid
			if (gid == 4242) != tc.wantGroup {
				t.Errorf("volume root group %d, want fsGroup applied: %v", gid, tc.wantGroup)
			}
			pub := d.LastRequest("NodePublishVolume").(*csipb.NodePublishVolumeRequest)
			if got := pub.VolumeCapability.GetMount().VolumeMountGroup; got != tc.wantGiven {
				t.Errorf("volume mount group given to the driver %q, want %q", got, tc.wantGiven)
			}
		})
	}
}
