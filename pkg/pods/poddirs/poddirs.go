// Package poddirs is the layout of pod data under nodelet's root
// directory, the same as the upstream kubelet's, so a node moves between
// the two without losing a pod's volumes or /etc/hosts:
//
//	<root>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>
//	<root>/pods/<uid>/containers/<name>
//	<root>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>
//	<root>/pods/<uid>/etc-hosts
package poddirs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Root is nodelet's root directory (--root-dir).
type Root string

// Pods holds one directory per pod UID.
func (r Root) Pods() string { return filepath.Join(string(r), "pods") }

// Pod is a pod's own directory.
func (r Root) Pod(uid types.UID) string { return filepath.Join(r.Pods(), string(uid)) }

// Volumes holds a pod's volumes, one directory per plugin.
func (r Root) Volumes(uid types.UID) string { return filepath.Join(r.Pod(uid), "volumes") }

// Volume is where a volume of a plugin is set up.
func (r Root) Volume(uid types.UID, plugin, name string) string {
	return filepath.Join(r.Volumes(uid), "kubernetes.io~"+plugin, name)
}

// Containers holds a pod's per-container directories.
func (r Root) Containers(uid types.UID) string { return filepath.Join(r.Pod(uid), "containers") }

// Container holds per-container files (termination messages).
func (r Root) Container(uid types.UID, name string) string {
	return filepath.Join(r.Containers(uid), name)
}

// EtcHosts is the pod's /etc/hosts.
func (r Root) EtcHosts(uid types.UID) string { return filepath.Join(r.Pod(uid), "etc-hosts") }

// Sweep calls remove for every subdirectory of dir that belongs to a pod
// (uidOf names it), and joins what fails. A missing dir has nothing to
// sweep. Both the pod directories and the pod log directories are swept
// this way; what may go is remove's to decide.
func Sweep(dir string, uidOf func(name string) (types.UID, bool), remove func(uid types.UID, path string) error) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		uid, ok := uidOf(e.Name())
		if !e.IsDir() || !ok {
			continue
		}
		errs = append(errs, remove(uid, filepath.Join(dir, e.Name())))
	}
	return errors.Join(errs...)
}

// PodUID names the pod of a directory named by its UID.
func PodUID(name string) (types.UID, bool) { return types.UID(name), name != "" }

// LogDirUID names the pod of a log directory,
// <namespace>_<name>_<uid>.
func LogDirUID(name string) (types.UID, bool) {
	i := strings.LastIndex(name, "_")
	if i < 0 {
		return "", false
	}
	return types.UID(name[i+1:]), true
}

// VolumeSubpaths holds the bind mounts of a pod's subPath mounts.
func (r Root) VolumeSubpaths(uid types.UID) string {
	return filepath.Join(r.Pod(uid), "volume-subpaths")
}

// VolumeSubpath is where the subPath of a container's mount (by its index
// in volumeMounts) is bind-mounted, as upstream lays it out.
func (r Root) VolumeSubpath(uid types.UID, volume, container string, index int) string {
	return filepath.Join(r.VolumeSubpaths(uid), volume, container, strconv.Itoa(index))
}

// WriteFileAtomic replaces a file by renaming a complete copy over it, so
// a reader (or nodelet after a crash) never sees half of it; the parent
// directory is made if missing. mode holds whatever the umask says.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	return writeFile(path, data, mode, false)
}

// WriteFileDurable is WriteFileAtomic that also survives a power loss:
// the copy is synced before the rename, and the directory after it. The
// resource managers' state is written so: after a reboot, what a running
// container was given must still be known.
func WriteFileDurable(path string, data []byte, mode os.FileMode) error {
	return writeFile(path, data, mode, true)
}

func writeFile(path string, data []byte, mode os.FileMode, durable bool) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, mode)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil || !durable {
		return err
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}
