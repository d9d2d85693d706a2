package subpath

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// OpenFile opens the regular file sub beneath the volume directory root
// for reading, as Open resolves a subPath: never through a link out of
// the volume. A pod writes what is there, so anything but a regular file
// is refused without blocking: a FIFO would hold the reader forever, and
// a device is no file of the pod's.
func OpenFile(root, sub string) (*os.File, error) {
	rootFD, err := openRoot(root, sub)
	if err != nil {
		return nil, err
	}
	defer unix.Close(rootFD)
	fd, err := openat2(rootFD, sub, &unix.OpenHow{
		Flags: unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC, Resolve: resolveFlags,
	})
	if err != nil {
		return nil, classify(sub, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%s in the volume is not a regular file", sub)
	}
	return os.NewFile(uintptr(fd), filepath.Join(root, sub)), nil
}
