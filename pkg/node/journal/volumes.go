package journal

import (
	"context"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/nodelet/nodelet/pkg/volumes/csi"
	"github.com/nodelet/nodelet/pkg/volumes/volume"
)

// Claims keeps the claims pods mount and their volumes in the journal, so a pod's claim resolves while the API server cannot be asked
// (after a restart, a container that must start again needs its mounts).
type Claims struct {
	volume.Claims
	J *Journal
}

func (c Claims) GetPersistentVolumeClaim(ctx context.Context, namespace, name string) (*v1.PersistentVolumeClaim, error) {
	pvc, err := c.Claims.GetPersistentVolumeClaim(ctx, namespace, name)
	return ReadThrough(c.J, KindClaim, namespace, name, pvc, err)
}

func (c Claims) GetPersistentVolume(ctx context.Context, name string) (*v1.PersistentVolume, error) {
	pv, err := c.Claims.GetPersistentVolume(ctx, name)
	return ReadThrough(c.J, KindVolume, "", name, pv, err)
}

// CSIAPI keeps the CSIDriver objects, the volumes' attachments
// and the node's attached volumes in the journal, for the same reason.
type CSIAPI struct {
	csi.API
	J *Journal
}

func (a CSIAPI) GetCSIDriver(ctx context.Context, name string) (*storagev1.CSIDriver, error) {
	d, err := a.API.GetCSIDriver(ctx, name)
	return ReadThrough(a.J, KindCSIDriver, "", name, d, err)
}

func (a CSIAPI) GetVolumeAttachment(ctx context.Context, name string) (*storagev1.VolumeAttachment, error) {
	va, err := a.API.GetVolumeAttachment(ctx, name)
	return ReadThrough(a.J, KindAttachment, "", name, va, err)
}

func (a CSIAPI) VolumesAttached(ctx context.Context) ([]v1.AttachedVolume, error) {
	got, err := a.API.VolumesAttached(ctx)
	return ReadAttachedVolumes(a.J, got, err)
}
