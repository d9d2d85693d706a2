//go:build integration

package poddirs

import (
	"os"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// A root directory that is a private mount point of its own is made
// shared where it is, with no second mount stacked on it (the runtime
// could pick either); one that is not a mount point is bind-mounted on
// itself and made shared; a second start changes nothing.
func TestMakeRShared(t *testing.T) {
	parent := t.TempDir()
	// Private, whatever the host's propagation: the test's own mount.
	if err := unix.Mount(parent, parent, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(parent, unix.MNT_DETACH|unix.MNT_FORCE) })
	if err := unix.Mount("", parent, "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		t.Fatal(err)
	}
	mountPoint := parent + "/own"
	plain := parent + "/plain"
	for _, d := range []string{mountPoint, plain} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount(mountPoint, mountPoint, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{mountPoint, plain} {
		for range 2 {
			if err := MakeRShared(dir); err != nil {
				t.Fatal(err)
			}
		}
		at, err := mountinfo.GetMounts(func(m *mountinfo.Info) (bool, bool) { return m.Mountpoint != dir, false })
		if err != nil {
			t.Fatal(err)
		}
		if len(at) != 1 || !isShared(at[0]) {
			t.Errorf("%s: %d mounts there (%+v), want one, shared", dir, len(at), at)
		}
	}
}
