package csi

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/pods/poddirs"
	"github.com/nodelet/nodelet/pkg/volumes/volume"
)

// API is what publishing reads from the API server.
type API interface {
	GetCSIDriver(ctx context.Context, name string) (*storagev1.CSIDriver, error)
	GetVolumeAttachment(ctx context.Context, name string) (*storagev1.VolumeAttachment, error)
	GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
	VolumesAttached(ctx context.Context) ([]v1.AttachedVolume, error)
}

// Drivers finds a registered driver.
type Drivers interface {
	Driver(name string) (*Driver, error)
}

// MounterOptions configure a Mounter.
type MounterOptions struct {
	RootDir  string
	NodeName string
	Drivers  Drivers
	API      API
	// Timeout bounds each call to a driver; 0 is two minutes.
	Timeout time.Duration
	Clock   clock.PassiveClock
}

// Mounter stages, publishes, unpublishes and unstages pods' CSI volumes.
type Mounter struct{ o MounterOptions }

// NewMounter returns a Mounter.
func NewMounter(o MounterOptions) *Mounter {
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return &Mounter{o: o}
}

// ErrNotAttached says a volume the driver needs attached is not yet: the
// pod waits for the attach/detach controller.
var ErrNotAttached = errors.New("volume not attached to the node yet")

// volData is what nodelet records beside a published volume, so it can
// be unpublished (and unstaged) after a restart, knowing nothing else;
// the keys are upstream's.
type volData struct {
	SpecVolID     string `json:"specVolID"`
	VolumeHandle  string `json:"volumeHandle"`
	DriverName    string `json:"driverName"`
	NodeName      string `json:"nodeName"`
	AttachmentID  string `json:"attachmentID,omitempty"`
	LifecycleMode string `json:"volumeLifecycleMode"`
	StagingPath   string `json:"stagingPath,omitempty"`
	// ClaimName and ClaimNamespace name the claim, for the volume's stats.
	ClaimName      string `json:"claimName,omitempty"`
	ClaimNamespace string `json:"claimNamespace,omitempty"`
}

const volDataFile = "vol_data.json"

// driverSettings are a CSIDriver object's, with upstream's defaults when
// there is none.
type driverSettings struct {
	attachRequired, podInfoOnMount, ephemeral bool
	fsGroupPolicy                             storagev1.FSGroupPolicy
}

// driver returns a registered driver and its CSIDriver's settings.
func (m *Mounter) driver(ctx context.Context, name string) (*Driver, driverSettings, error) {
	d, err := m.o.Drivers.Driver(name)
	if err != nil {
		return nil, driverSettings{}, err
	}
	s, err := m.settings(ctx, name)
	return d, s, err
}

func (m *Mounter) settings(ctx context.Context, name string) (driverSettings, error) {
	d, err := m.o.API.GetCSIDriver(ctx, name)
	if apierrors.IsNotFound(err) {
		return driverSettings{attachRequired: true, fsGroupPolicy: storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy}, nil
	}
	if err != nil {
		return driverSettings{}, fmt.Errorf("reading CSIDriver %q: %w", name, err)
	}
	s := driverSettings{attachRequired: d.Spec.AttachRequired == nil || *d.Spec.AttachRequired,
		podInfoOnMount: d.Spec.PodInfoOnMount != nil && *d.Spec.PodInfoOnMount, fsGroupPolicy: storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy}
	if d.Spec.FSGroupPolicy != nil {
		s.fsGroupPolicy = *d.Spec.FSGroupPolicy
	}
	for _, mode := range d.Spec.VolumeLifecycleModes {
		s.ephemeral = s.ephemeral || mode == storagev1.VolumeLifecycleEphemeral
	}
	return s, nil
}

// AttachmentName is the VolumeAttachment the attach/detach controller
// makes for a volume on a node (upstream's name).
func AttachmentName(handle, driver, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+driver+node)))
}

// UniqueName is a CSI volume's name in node.status.volumesAttached and
// volumesInUse (upstream's).
func UniqueName(driver, handle string) v1.UniqueVolumeName {
	return v1.UniqueVolumeName("kubernetes.io/csi/" + driver + "^" + handle)
}

// StagingPath is where a driver stages a volume for every pod on the node.
func (m *Mounter) StagingPath(driver, handle string) string {
	return filepath.Join(m.o.RootDir, "plugins", "kubernetes.io", "csi", driver, fmt.Sprintf("%x", sha256.Sum256([]byte(handle))), "globalmount")
}

func (m *Mounter) volumeDir(uid types.UID, name string) string {
	return poddirs.Root(m.o.RootDir).Volume(uid, "csi", name)
}

// SetUp publishes a claim's CSI volume to the pod, staging it first for
// a driver that stages, and returns the path to mount in containers.
func (m *Mounter) SetUp(ctx context.Context, pod *v1.Pod, name string, pv *v1.PersistentVolume, readOnly bool) (string, error) {
	src := pv.Spec.CSI
	ctx, cancel := context.WithTimeout(ctx, m.o.Timeout)
	defer cancel()
	d, s, err := m.driver(ctx, src.Driver)
	if err != nil {
		return "", err
	}
	publishContext, attachment, err := m.attached(ctx, s, src)
	if err != nil {
		return "", err
	}
	capability := volumeCapability(src.FSType, pv.Spec.MountOptions, pv.Spec.AccessModes)
	delegated := delegateFSGroup(d, pod, capability)
	data := volData{SpecVolID: name, VolumeHandle: src.VolumeHandle, DriverName: src.Driver, NodeName: m.o.NodeName,
		AttachmentID: attachment, LifecycleMode: string(storagev1.VolumeLifecyclePersistent)}
	if ref := pv.Spec.ClaimRef; ref != nil {
		data.ClaimName, data.ClaimNamespace = ref.Name, ref.Namespace
	}
	if d.Stages {
		data.StagingPath = m.StagingPath(src.Driver, src.VolumeHandle)
		secrets, err := m.secrets(ctx, src.NodeStageSecretRef)
		if err != nil {
			return "", err
		}
		if err := os.MkdirAll(data.StagingPath, 0o750); err != nil {
			return "", err
		}
		if _, err := d.Node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
			VolumeId: src.VolumeHandle, PublishContext: publishContext, StagingTargetPath: data.StagingPath,
			VolumeCapability: capability, Secrets: secrets, VolumeContext: src.VolumeAttributes,
		}); err != nil {
			return "", fmt.Errorf("NodeStageVolume of %q (driver %s): %w", src.VolumeHandle, src.Driver, err)
		}
	}
	secrets, err := m.secrets(ctx, src.NodePublishSecretRef)
	if err != nil {
		return "", err
	}
	readOnly = readOnly || src.ReadOnly
	target, err := m.publish(ctx, d, pod, data, &csipb.NodePublishVolumeRequest{
		VolumeId: src.VolumeHandle, PublishContext: publishContext, StagingTargetPath: data.StagingPath,
		VolumeCapability: capability, Readonly: readOnly, Secrets: secrets,
		VolumeContext: withPodInfo(src.VolumeAttributes, pod, s.podInfoOnMount, false),
	})
	if err != nil || delegated || readOnly || !ownershipApplies(s.fsGroupPolicy, src.FSType, pv.Spec.AccessModes) {
		return target, err
	}
	return target, volume.ApplyFSGroup(target, pod)
}

// delegateFSGroup hands the pod's fsGroup to a driver that applies it
// itself (VOLUME_MOUNT_GROUP), and reports whether it did.
func delegateFSGroup(d *Driver, pod *v1.Pod, c *csipb.VolumeCapability) bool {
	sc := pod.Spec.SecurityContext
	if !d.MountGroup || sc == nil || sc.FSGroup == nil {
		return false
	}
	c.GetMount().VolumeMountGroup = fmt.Sprint(*sc.FSGroup)
	return true
}

// ownershipApplies is the CSIDriver's fsGroupPolicy: File always gives
// the volume to the pod's fsGroup, None never, and
// ReadWriteOnceWithFSType (the default) for a volume with a filesystem
// type that one node writes.
func ownershipApplies(policy storagev1.FSGroupPolicy, fsType string, modes []v1.PersistentVolumeAccessMode) bool {
	switch policy {
	case storagev1.FileFSGroupPolicy:
		return true
	case storagev1.NoneFSGroupPolicy:
		return false
	}
	return fsType != "" && (slices.Contains(modes, v1.ReadWriteOnce) || slices.Contains(modes, v1.ReadWriteOncePod))
}

// SetUpInline publishes a CSI ephemeral inline volume (csi: in the pod
// spec): the driver makes it for the pod, unstaged.
func (m *Mounter) SetUpInline(ctx context.Context, pod *v1.Pod, vol *v1.Volume) (string, error) {
	src := vol.CSI
	ctx, cancel := context.WithTimeout(ctx, m.o.Timeout)
	defer cancel()
	d, s, err := m.driver(ctx, src.Driver)
	if err != nil {
		return "", err
	}
	if !s.ephemeral {
		return "", fmt.Errorf("CSI driver %q does not support ephemeral inline volumes (its CSIDriver's volumeLifecycleModes lack Ephemeral)", src.Driver)
	}
	var secrets map[string]string
	if ref := src.NodePublishSecretRef; ref != nil {
		if secrets, err = m.secrets(ctx, &v1.SecretReference{Namespace: pod.Namespace, Name: ref.Name}); err != nil {
			return "", err
		}
	}
	fsType := ""
	if src.FSType != nil {
		fsType = *src.FSType
	}
	handle := fmt.Sprintf("csi-%x", sha256.Sum256([]byte(string(pod.UID)+vol.Name)))
	data := volData{SpecVolID: vol.Name, VolumeHandle: handle, DriverName: src.Driver, NodeName: m.o.NodeName,
		LifecycleMode: string(storagev1.VolumeLifecycleEphemeral)}
	capability := volumeCapability(fsType, nil, []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce})
	delegated := delegateFSGroup(d, pod, capability)
	readOnly := src.ReadOnly != nil && *src.ReadOnly
	target, err := m.publish(ctx, d, pod, data, &csipb.NodePublishVolumeRequest{
		VolumeId: handle, VolumeCapability: capability, Readonly: readOnly, Secrets: secrets,
		VolumeContext: withPodInfo(src.VolumeAttributes, pod, s.podInfoOnMount, true),
	})
	// An inline volume is mounted ReadWriteOnce, as upstream's is.
	if err != nil || delegated || readOnly || !ownershipApplies(s.fsGroupPolicy, fsType, []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}) {
		return target, err
	}
	return target, volume.ApplyFSGroup(target, pod)
}

// publish records the volume, then asks the driver to publish it.
func (m *Mounter) publish(ctx context.Context, d *Driver, pod *v1.Pod, data volData, req *csipb.NodePublishVolumeRequest) (string, error) {
	dir := m.volumeDir(pod.UID, data.SpecVolID)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", err
	}
	// Recorded first: a publish that half-happened is undone too.
	b, _ := json.Marshal(data)
	if err := os.WriteFile(filepath.Join(dir, volDataFile), b, 0o600); err != nil {
		return "", err
	}
	req.TargetPath = filepath.Join(dir, "mount")
	if _, err := d.Node.NodePublishVolume(ctx, req); err != nil {
		return "", fmt.Errorf("NodePublishVolume of %q (driver %s): %w", data.VolumeHandle, data.DriverName, err)
	}
	klog.V(2).InfoS("CSI volume published", "pod", klog.KObj(pod), "podUID", pod.UID, "volume", data.SpecVolID, "driver", data.DriverName, "handle", data.VolumeHandle)
	return req.TargetPath, nil
}

// attached waits (by failing, for the sync to retry) until a volume whose
// driver needs attaching is attached, and returns its publish context.
func (m *Mounter) attached(ctx context.Context, s driverSettings, src *v1.CSIPersistentVolumeSource) (map[string]string, string, error) {
	if !s.attachRequired {
		return nil, "", nil
	}
	name := AttachmentName(src.VolumeHandle, src.Driver, m.o.NodeName)
	va, err := m.o.API.GetVolumeAttachment(ctx, name)
	if apierrors.IsNotFound(err) || (err == nil && !va.Status.Attached) {
		return nil, "", fmt.Errorf("%w: VolumeAttachment %s (driver %s needs attaching)", ErrNotAttached, name, src.Driver)
	}
	if err != nil {
		return nil, "", fmt.Errorf("reading VolumeAttachment %s: %w", name, err)
	}
	// As upstream's volume manager, the controller's word too: the volume
	// is in node.status.volumesAttached.
	attached, err := m.o.API.VolumesAttached(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("reading the node's attached volumes: %w", err)
	}
	unique := UniqueName(src.Driver, src.VolumeHandle)
	if !slices.ContainsFunc(attached, func(a v1.AttachedVolume) bool { return a.Name == unique }) {
		return nil, "", fmt.Errorf("%w: %s is not in node.status.volumesAttached", ErrNotAttached, unique)
	}
	return va.Status.AttachmentMetadata, name, nil
}

func (m *Mounter) secrets(ctx context.Context, ref *v1.SecretReference) (map[string]string, error) {
	if ref == nil {
		return nil, nil
	}
	s, err := m.o.API.GetSecret(ctx, ref.Namespace, ref.Name)
	if err != nil {
		return nil, fmt.Errorf("reading secret %s/%s for the CSI driver: %w", ref.Namespace, ref.Name, err)
	}
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out, nil
}

// withPodInfo adds the pod's identity to a volume's context, for drivers
// whose CSIDriver asks for it (podInfoOnMount), under upstream's keys.
func withPodInfo(attrs map[string]string, pod *v1.Pod, podInfo, ephemeral bool) map[string]string {
	out := map[string]string{}
	for k, v := range attrs {
		out[k] = v
	}
	if podInfo {
		out["csi.storage.k8s.io/pod.name"] = pod.Name
		out["csi.storage.k8s.io/pod.namespace"] = pod.Namespace
		out["csi.storage.k8s.io/pod.uid"] = string(pod.UID)
		out["csi.storage.k8s.io/serviceAccount.name"] = pod.Spec.ServiceAccountName
		out["csi.storage.k8s.io/ephemeral"] = fmt.Sprint(ephemeral)
	}
	return out
}

// volumeCapability is a mounted volume's capability: its filesystem,
// mount options and access mode.
func volumeCapability(fsType string, mountFlags []string, modes []v1.PersistentVolumeAccessMode) *csipb.VolumeCapability {
	mode := csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	for _, m := range modes {
		switch m {
		case v1.ReadWriteOncePod:
			mode = csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
		case v1.ReadOnlyMany:
			mode = csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
		case v1.ReadWriteMany:
			mode = csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
		}
	}
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: fsType, MountFlags: mountFlags}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
	}
}
