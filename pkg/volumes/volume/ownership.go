package volume

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	v1 "k8s.io/api/core/v1"
)

// Ownership, as upstream applies it for securityContext.fsGroup: a
// volume's files belong to the fsGroup and are readable by it (writable
// too for emptyDir, which containers write), and directories are
// setgid so files the containers create inherit the group. Without
// this a pod running as a non-root user could not read a secret whose
// mode is 0400.
const (
	groupRead      = 0o440
	groupReadWrite = 0o660
	groupExec      = 0o110
)

// fsGroup is the pod's fsGroup, nil for none.
func fsGroup(pod *v1.Pod) *int64 {
	if sc := pod.Spec.SecurityContext; sc != nil {
		return sc.FSGroup
	}
	return nil
}

// fsUser is the user every container of the pod runs as, when they all
// set the same one; projected tokens then belong to it (upstream's
// FsUserFrom), so a non-root pod can read its token at mode 0600.
func fsUser(pod *v1.Pod) *int64 {
	var uid *int64
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			u := runAsUser(pod, &list[i])
			if u == nil || (uid != nil && *u != *uid) {
				return nil
			}
			uid = u
		}
	}
	return uid
}

func runAsUser(pod *v1.Pod, c *v1.Container) *int64 {
	if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
		return c.SecurityContext.RunAsUser
	}
	if pod.Spec.SecurityContext != nil {
		return pod.Spec.SecurityContext.RunAsUser
	}
	return nil
}

// ownedBy sets path's owner (uid, gid; -1 leaves one alone) and adds
// mask to its permissions, with setgid for directories when a group is
// given.
func ownedBy(path string, uid, gid int, mask os.FileMode) error {
	if uid < 0 && gid < 0 {
		return nil
	}
	if err := os.Lchown(path, uid, gid); err != nil {
		return fmt.Errorf("setting the volume's ownership: %w", err)
	}
	info, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if info.Mode()&os.ModeSymlink != 0 {
		// A symlink's mode means nothing; chmod would change its target.
		return nil
	}
	mode := info.Mode() | mask
	if info.IsDir() && gid >= 0 {
		mode |= groupExec | os.ModeSetgid
	}
	if err := os.Chmod(path, mode); err != nil {
		return fmt.Errorf("setting the volume's permissions: %w", err)
	}
	return nil
}

// owner returns the uid and gid of path.
func owner(info os.FileInfo) (uid, gid int) {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), int(st.Gid)
	}
	return -1, -1
}

// id turns an optional id into chown's form.
func id(v *int64) int {
	if v == nil {
		return -1
	}
	return int(*v)
}

// ApplyFSGroup gives every file of a volume to the pod's fsGroup, group
// readable and writable, directories setgid (upstream's
// SetVolumeOwnership, for volumes such as CSI ones whose driver does not
// take the group itself). With fsGroupChangePolicy OnRootMismatch a root
// that is already right means nothing is walked.
func ApplyFSGroup(dir string, pod *v1.Pod) error {
	g := fsGroup(pod)
	if g == nil {
		return nil
	}
	if sc := pod.Spec.SecurityContext; sc.FSGroupChangePolicy != nil && *sc.FSGroupChangePolicy == v1.FSGroupChangeOnRootMismatch {
		if info, err := os.Lstat(dir); err == nil {
			if _, gid := owner(info); gid == int(*g) && info.Mode()&os.ModeSetgid != 0 && info.Mode()&groupReadWrite == groupReadWrite {
				return nil
			}
		}
	}
	return filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return ownedBy(path, -1, int(*g), groupReadWrite)
	})
}
