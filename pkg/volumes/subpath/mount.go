package subpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// Mount resolves sub beneath the volume directory root (see Open) and
// bind-mounts what it opened onto target, replacing what an earlier start
// of the container mounted there: the volume's content may have changed
// since, so nothing resolved before is trusted. The bind goes through the
// descriptor, never the path string, so a link swapped in after Open
// changes nothing.
func Mount(root, sub, target string) error {
	f, err := Open(root, sub)
	if err != nil {
		return err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("subPath %q: %w", sub, err)
	}
	if err := unmountAll(target); err != nil {
		return err
	}
	if err := makeTarget(target, st.Mode&unix.S_IFMT == unix.S_IFDIR); err != nil {
		return fmt.Errorf("preparing the subPath mount point %s: %w", target, err)
	}
	src := fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting subPath %q onto %s: %w", sub, target, err)
	}
	return nil
}

// unmountAll takes off every mount stacked on target (a nodelet killed
// between two steps may have left more than one).
func unmountAll(target string) error {
	for i := 0; i < 16; i++ {
		mounted, err := mountinfo.Mounted(target)
		if errors.Is(err, os.ErrNotExist) || (err == nil && !mounted) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("checking the subPath mount point %s: %w", target, err)
		}
		// Detached: the container that used it is gone, but a process of
		// the node may still hold it open.
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmounting the old subPath mount %s: %w", target, err)
		}
	}
	return fmt.Errorf("subPath mount point %s: still mounted after 16 unmounts", target)
}

// makeTarget makes the mount point: a directory for a directory, an
// empty file for anything else, as a bind mount needs. One of the other
// kind, left by an earlier start, is replaced.
func makeTarget(target string, dir bool) error {
	if fi, err := os.Lstat(target); err == nil {
		if fi.IsDir() == dir && (dir || fi.Mode().IsRegular()) {
			return nil
		}
		if err := os.Remove(target); err != nil {
			return err
		}
	}
	if dir {
		return os.MkdirAll(target, 0o750)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return err
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|unix.O_NOFOLLOW, 0o640)
	if err != nil {
		return err
	}
	return f.Close()
}
