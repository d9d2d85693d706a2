package volume

import (
	"context"
	"errors"
	"fmt"
	"os"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// Claims reads the persistent volume claims pods mount and the volumes
// bound to them.
type Claims interface {
	GetPersistentVolumeClaim(ctx context.Context, namespace, name string) (*v1.PersistentVolumeClaim, error)
	GetPersistentVolume(ctx context.Context, name string) (*v1.PersistentVolume, error)
}

// ErrClaimNotBound says a pod's claim has no volume yet: the pod waits,
// and its sync is retried.
var ErrClaimNotBound = errors.New("is not bound to a volume yet")

// ErrUnsupportedVolume says nodelet cannot mount a volume of this kind.
var ErrUnsupportedVolume = errors.New("unsupported volume type")

// claimName is the claim a pod volume mounts: its persistentVolumeClaim,
// or the claim the ephemeral volume controller makes for a generic
// ephemeral volume (<pod>-<volume>, owned by the pod); "" for neither.
func claimName(pod *v1.Pod, vol *v1.Volume) string {
	switch {
	case vol.PersistentVolumeClaim != nil:
		return vol.PersistentVolumeClaim.ClaimName
	case vol.Ephemeral != nil:
		return pod.Name + "-" + vol.Name
	}
	return ""
}

// claim resolves a pod's claim to the host path of its bound volume. A
// claim's volume never changes while it is bound, so a claim set up
// before is not asked about again.
func (m *Manager) claim(ctx context.Context, pod *v1.Pod, vol *v1.Volume, name string) (string, error) {
	if p, ok := m.HostPath(pod.UID, vol.Name); ok {
		return p, nil
	}
	pvc, err := m.o.Claims.GetPersistentVolumeClaim(ctx, pod.Namespace, name)
	if err != nil {
		return "", fmt.Errorf("persistentvolumeclaim %q: %w", name, err)
	}
	if vol.Ephemeral != nil && !metav1.IsControlledBy(pvc, pod) {
		return "", fmt.Errorf("persistentvolumeclaim %q was not created for this pod (its generic ephemeral volume %q)", name, vol.Name)
	}
	if pvc.DeletionTimestamp != nil {
		return "", fmt.Errorf("persistentvolumeclaim %q is being deleted", name)
	}
	if pvc.Status.Phase != v1.ClaimBound || pvc.Spec.VolumeName == "" {
		return "", fmt.Errorf("persistentvolumeclaim %q %w (phase %s)", name, ErrClaimNotBound, pvc.Status.Phase)
	}
	pv, err := m.o.Claims.GetPersistentVolume(ctx, pvc.Spec.VolumeName)
	if err != nil {
		return "", fmt.Errorf("persistentvolume %q of claim %q: %w", pvc.Spec.VolumeName, name, err)
	}
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID != pvc.UID {
		return "", fmt.Errorf("persistentvolume %q is not bound to claim %q", pv.Name, name)
	}
	return m.boundVolume(ctx, pod, vol, pv)
}

// CSIVolumes publishes pods' CSI volumes (pkg/volumes/csi) and takes them down.
type CSIVolumes interface {
	SetUp(ctx context.Context, pod *v1.Pod, name string, pv *v1.PersistentVolume, readOnly bool) (string, error)
	SetUpInline(ctx context.Context, pod *v1.Pod, vol *v1.Volume) (string, error)
	TearDown(ctx context.Context, uid types.UID) error
}

// noCSI refuses CSI volumes, on a node without an API server.
type noCSI struct{}

func (noCSI) SetUp(context.Context, *v1.Pod, string, *v1.PersistentVolume, bool) (string, error) {
	return "", fmt.Errorf("%w: CSI volumes need an API server", ErrUnsupportedVolume)
}

func (noCSI) SetUpInline(context.Context, *v1.Pod, *v1.Volume) (string, error) {
	return "", fmt.Errorf("%w: CSI volumes need an API server", ErrUnsupportedVolume)
}

func (noCSI) TearDown(context.Context, types.UID) error { return nil }

// boundVolume checks a claim's volume against the node and returns its
// host path.
func (m *Manager) boundVolume(ctx context.Context, pod *v1.Pod, vol *v1.Volume, pv *v1.PersistentVolume) (string, error) {
	if na := pv.Spec.NodeAffinity; na != nil && na.Required != nil {
		node := m.o.Node()
		if node == nil {
			return "", fmt.Errorf("persistentvolume %q has a node affinity, and the node is not known yet", pv.Name)
		}
		if ok, err := nodeaffinity.NewLazyErrorNodeSelector(na.Required).Match(node); err != nil || !ok {
			return "", fmt.Errorf("persistentvolume %q: volume node affinity conflict: the node does not match its node affinity (%v)", pv.Name, err)
		}
	}
	if pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == v1.PersistentVolumeBlock {
		return "", fmt.Errorf("persistentvolume %q: %w: volumeMode Block is not supported yet", pv.Name, ErrUnsupportedVolume)
	}
	switch s := pv.Spec.PersistentVolumeSource; {
	case s.CSI != nil:
		return m.o.CSI.SetUp(ctx, pod, vol.Name, pv, ReadOnly(pod, vol.Name))
	case s.HostPath != nil:
		return s.HostPath.Path, checkHostPath(s.HostPath)
	case s.Local != nil:
		// A local volume is prepared by its administrator: it must exist.
		if _, err := os.Stat(s.Local.Path); err != nil {
			return "", fmt.Errorf("persistentvolume %q: local path: %w", pv.Name, err)
		}
		return s.Local.Path, nil
	}
	return "", fmt.Errorf("persistentvolume %q: %w (CSI, hostPath and local persistent volumes are)", pv.Name, ErrUnsupportedVolume)
}

// MountedReadOnly reports whether a pod volume is mounted read-only in
// every container, whatever its mounts say: a claim mounted readOnly, and
// the volumes nodelet writes the API's data into (configMap, secret,
// downwardAPI, projected), as upstream mounts them since CVE-2017-1002102:
// a container must not forge what the pod's other containers read there,
// nor the writer's state for the next update.
func MountedReadOnly(pod *v1.Pod, name string) bool {
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.Name != name {
			continue
		}
		s := v.VolumeSource
		return s.ConfigMap != nil || s.Secret != nil || s.DownwardAPI != nil || s.Projected != nil ||
			s.PersistentVolumeClaim != nil && s.PersistentVolumeClaim.ReadOnly
	}
	return false
}

// ReadOnly reports whether a claim must be published read-only (a claim
// mounted readOnly).
func ReadOnly(pod *v1.Pod, name string) bool {
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.Name == name && v.PersistentVolumeClaim != nil {
			return v.PersistentVolumeClaim.ReadOnly
		}
	}
	return false
}
