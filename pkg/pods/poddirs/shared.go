package poddirs

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// MakeRShared makes the root directory a shared mount, as upstream's
// kubelet does at start: a volume mounted with Bidirectional propagation
// must sit on a shared mount, or the runtime refuses the container ("is
// mounted on ... but it is not a shared mount"), and the mounts a
// privileged container makes there must reach the node and the pod's
// other containers. When the mount the directory is on is not shared, the
// directory is bind-mounted on itself and made recursively shared; on
// the next start that mount is already shared and nothing is done. A
// directory that is a mount point itself (a disk of its own, or a bind) is
// made shared where it is: a second mount stacked on the same point would
// leave the runtime, which looks the directory's mount up by its mount
// point, to pick either (containerd may take the private one and refuse
// the container).
func MakeRShared(dir string) error {
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	infos, err := mountinfo.GetMounts(nil)
	if err != nil {
		return fmt.Errorf("reading the mount table: %w", err)
	}
	m := mountOf(infos, dir)
	if m != nil && isShared(m) {
		return nil
	}
	klog.InfoS("Making the root directory a shared mount, for volumes with Bidirectional mount propagation", "dir", dir)
	if m == nil || m.Mountpoint != dir {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mounting %s on itself: %w", dir, err)
		}
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("making %s a shared mount: %w", dir, err)
	}
	return nil
}

// mountOf is the mount a path is on: the one with the longest mount point
// that contains it (the last mounted, when several are stacked there).
func mountOf(infos []*mountinfo.Info, path string) *mountinfo.Info {
	var best *mountinfo.Info
	for _, m := range infos {
		if !within(path, m.Mountpoint) {
			continue
		}
		if best == nil || len(m.Mountpoint) >= len(best.Mountpoint) {
			best = m
		}
	}
	return best
}

func within(path, mountpoint string) bool {
	return mountpoint == "/" || path == mountpoint || strings.HasPrefix(path, mountpoint+"/")
}

// isShared reads a mount's propagation from its optional fields.
func isShared(m *mountinfo.Info) bool {
	for _, f := range strings.Fields(m.Optional) {
		if strings.HasPrefix(f, "shared:") {
			return true
		}
	}
	return false
}
