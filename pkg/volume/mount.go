package volume

import (
	"fmt"
	"os"
	"sort"
	"syscall"

	"github.com/moby/sys/mountinfo"
	"k8s.io/apimachinery/pkg/api/resource"
)

// mountTmpfs mounts a tmpfs on dir unless one is there already; size 0
// leaves the kernel's default (half the memory).
func mountTmpfs(dir string, size *resource.Quantity) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Mounted answers from the directory itself where the kernel allows
	// (openat2), not by reading every mount on the node: at density that
	// list has a few hundred entries per pod started.
	if mounted, err := mountinfo.Mounted(dir); err != nil || mounted {
		return err
	}
	opts := "mode=0755"
	if size != nil && !size.IsZero() {
		opts += fmt.Sprintf(",size=%d", size.Value())
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mounting a tmpfs on %s: %w", dir, err)
	}
	return nil
}

// unmountUnder unmounts every mount point at or below dir, deepest first.
func unmountUnder(dir string) error {
	under, err := MountPointsUnder(dir)
	if err != nil {
		return err
	}
	sort.Sort(sort.Reverse(sort.StringSlice(under)))
	for _, m := range under {
		if err := syscall.Unmount(m, 0); err != nil && err != syscall.EINVAL && err != syscall.ENOENT {
			return fmt.Errorf("unmounting %s: %w", m, err)
		}
	}
	return nil
}

// MountPointsUnder lists the mount points at or below dir.
func MountPointsUnder(dir string) ([]string, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(mounts))
	for _, m := range mounts {
		out = append(out, m.Mountpoint)
	}
	return out, nil
}
