// Package subpath mounts the part of a volume a container asked for with
// subPath or subPathExpr, without letting the volume's content choose what
// gets mounted.
//
// A volume's content is the pod's: a container may plant a symlink
// (`ln -s / /vol/escape`) and a later container mount `subPath: escape`.
// Joining the path and handing the string to the runtime would mount the
// host's root (CVE-2017-1002101). So, as upstream does, the path is
// resolved here, beneath the volume's directory, in every component, at
// every container start, and what was resolved is bind-mounted by its
// file descriptor onto a directory of nodelet's own:
//
//	<root>/pods/<uid>/volume-subpaths/<volume>/<container>/<mount index>
//
// which is what the runtime mounts. A link that leaves the volume is
// refused (ErrEscape); a link inside it is followed, as upstream allows.
package subpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrEscape is a subPath that leaves its volume: through "..", an
// absolute path, or a symlink pointing out.
var ErrEscape = errors.New("subPath escapes its volume")

// resolveFlags resolve beneath the volume: ".." above it, absolute
// symlinks and magic links (/proc/<pid>/fd/...) fail rather than leave.
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

// Open resolves sub beneath the volume directory root and returns it
// opened with O_PATH. Missing directories along sub are made with the
// volume's own permissions, as upstream makes them, each beneath the
// volume, so a link planted between two steps cannot redirect a mkdir.
func Open(root, sub string) (*os.File, error) {
	rootFD, err := openRoot(root, sub)
	if err != nil {
		return nil, err
	}
	defer unix.Close(rootFD)
	var st unix.Stat_t
	if err := unix.Fstat(rootFD, &st); err != nil {
		return nil, fmt.Errorf("reading the volume %s: %w", root, err)
	}
	perm := uint32(st.Mode & 0o7777)

	fd, err := openBeneath(rootFD, sub)
	if errors.Is(err, unix.ENOENT) {
		if err := mkdirBeneath(rootFD, sub, perm); err != nil {
			return nil, err
		}
		fd, err = openBeneath(rootFD, sub)
	}
	if err != nil {
		return nil, classify(sub, err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(root, sub)), nil
}

// openRoot checks that sub is relative and opens the volume directory
// root, which the caller closes.
func openRoot(root, sub string) (int, error) {
	if sub == "" || filepath.IsAbs(sub) {
		return -1, fmt.Errorf("%w: %q is not a relative path", ErrEscape, sub)
	}
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("opening the volume %s: %w", root, err)
	}
	return fd, nil
}

func openBeneath(dirFD int, path string) (int, error) {
	return openat2(dirFD, path, &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolveFlags,
	})
}

// openAttempts bounds the lookups of one path that a rename elsewhere
// spoilt.
const openAttempts = 128

// openat2 is unix.Openat2, asked again when the kernel answers EAGAIN: a
// lookup beneath a directory that climbs with ".." fails so when any
// rename or mount ran on the machine meanwhile (the kernel can then not
// prove the ".." stayed beneath it), and a node renames all the time. A
// path still refused after openAttempts lookups keeps the error.
func openat2(dirFD int, path string, how *unix.OpenHow) (int, error) {
	for i := 1; ; i++ {
		fd, err := unix.Openat2(dirFD, path, how)
		if !errors.Is(err, unix.EAGAIN) || i == openAttempts {
			return fd, err
		}
	}
}

// mkdirBeneath makes each missing directory of sub, opening its parent
// beneath the volume first.
func mkdirBeneath(rootFD int, sub string, perm uint32) error {
	parts := strings.Split(filepath.Clean(sub), "/")
	for i := range parts {
		fd, err := openBeneath(rootFD, strings.Join(parts[:i+1], "/"))
		if err == nil {
			unix.Close(fd)
			continue
		}
		if !errors.Is(err, unix.ENOENT) {
			return classify(sub, err)
		}
		if err := mkdirOne(rootFD, parts[:i], parts[i], perm); err != nil {
			return classify(sub, fmt.Errorf("creating a directory of it: %w", err))
		}
	}
	return nil
}

// mkdirOne makes name in the directory parent (a path beneath the volume)
// with perm, whatever the umask.
func mkdirOne(rootFD int, parent []string, name string, perm uint32) error {
	parentFD := rootFD
	if len(parent) > 0 {
		fd, err := openBeneath(rootFD, strings.Join(parent, "/"))
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		parentFD = fd
	}
	// A dangling symlink as the name makes mkdirat fail with EEXIST
	// rather than create the link's target; opening it then fails.
	if err := unix.Mkdirat(parentFD, name, perm); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	dir, err := openat2(parentFD, name, &unix.OpenHow{
		Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolveFlags,
	})
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	return unix.Fchmod(dir, perm)
}

// classify names an escape as such; other errors (a dangling link inside
// the volume, a permission) keep their cause.
func classify(sub string, err error) error {
	switch {
	case errors.Is(err, unix.EXDEV), errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%w: %q resolves outside the volume (%v)", ErrEscape, sub, err)
	case errors.Is(err, unix.ENOSYS):
		return fmt.Errorf("subPath %q: the kernel lacks openat2, which nodelet needs to resolve subPaths safely: %w", sub, err)
	}
	return fmt.Errorf("subPath %q: %w", sub, err)
}
