package csi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/pods/poddirs"
)

// TearDown unpublishes every CSI volume of a pod by UID, from what was
// recorded on disk (so it works for a pod nodelet forgot in a restart),
// and unstages each one no other pod on the node still uses. A volume
// whose driver is not registered stays, and the error says so: the pod's
// directory must not go while the driver may still have it mounted.
func (m *Mounter) TearDown(ctx context.Context, uid types.UID) error {
	dirs, err := filepath.Glob(filepath.Join(poddirs.Root(m.o.RootDir).Volumes(uid), "kubernetes.io~csi", "*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, dir := range dirs {
		if err := m.unpublish(ctx, dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func readVolData(dir string) (volData, error) {
	var d volData
	b, err := os.ReadFile(filepath.Join(dir, volDataFile))
	if err != nil {
		return d, err
	}
	return d, json.Unmarshal(b, &d)
}

// unpublish undoes one publish, then the staging if nobody else uses it.
func (m *Mounter) unpublish(ctx context.Context, dir string) error {
	data, err := readVolData(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil // nothing was published there
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", filepath.Join(dir, volDataFile), err)
	}
	d, err := m.o.Drivers.Driver(data.DriverName)
	if err != nil {
		return fmt.Errorf("unpublishing CSI volume %q: %w", data.VolumeHandle, err)
	}
	ctx, cancel := context.WithTimeout(ctx, m.o.Timeout)
	defer cancel()
	if _, err := d.Node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{
		VolumeId: data.VolumeHandle, TargetPath: filepath.Join(dir, "mount"),
	}); err != nil {
		return fmt.Errorf("NodeUnpublishVolume of %q (driver %s): %w", data.VolumeHandle, data.DriverName, err)
	}
	if err := os.Remove(filepath.Join(dir, volDataFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	klog.V(2).InfoS("CSI volume unpublished", "dir", dir, "driver", data.DriverName, "handle", data.VolumeHandle)
	if data.StagingPath == "" || m.inUse(data, dir) {
		return nil
	}
	if _, err := d.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{
		VolumeId: data.VolumeHandle, StagingTargetPath: data.StagingPath,
	}); err != nil {
		return fmt.Errorf("NodeUnstageVolume of %q (driver %s): %w", data.VolumeHandle, data.DriverName, err)
	}
	// os.Remove, not RemoveAll: a staging path still mounted must fail
	// here rather than lose the volume's data.
	for _, p := range []string{data.StagingPath, filepath.Dir(data.StagingPath)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			klog.ErrorS(err, "Removing a CSI staging directory", "path", p)
		}
	}
	klog.V(2).InfoS("CSI volume unstaged", "driver", data.DriverName, "handle", data.VolumeHandle)
	return nil
}

// inUse reports whether another pod on the node has the volume published.
func (m *Mounter) inUse(v volData, except string) bool {
	files, _ := filepath.Glob(filepath.Join(m.o.RootDir, "pods", "*", "volumes", "kubernetes.io~csi", "*", volDataFile))
	for _, f := range files {
		dir := filepath.Dir(f)
		if dir == except {
			continue
		}
		if d, err := readVolData(dir); err == nil && d.DriverName == v.DriverName && d.VolumeHandle == v.VolumeHandle {
			return true
		}
	}
	return false
}

// VolumesInUse lists the attachable CSI volumes published on the node,
// under upstream's unique names (kubernetes.io/csi/<driver>^<handle>), for
// node.status.volumesInUse: the attach/detach controller does not detach
// them. Inline ephemeral volumes are never attached, so are not listed.
func (m *Mounter) VolumesInUse() []v1.UniqueVolumeName {
	files, _ := filepath.Glob(filepath.Join(m.o.RootDir, "pods", "*", "volumes", "kubernetes.io~csi", "*", volDataFile))
	seen := map[v1.UniqueVolumeName]bool{}
	var out []v1.UniqueVolumeName
	for _, f := range files {
		d, err := readVolData(filepath.Dir(f))
		if err != nil || d.LifecycleMode == string(storagev1.VolumeLifecycleEphemeral) {
			continue
		}
		name := UniqueName(d.DriverName, d.VolumeHandle)
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out
}
