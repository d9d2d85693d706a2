package volume

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/moby/sys/mountinfo"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// mountTmpfs mounts a tmpfs of the given root mode on dir unless one is
// there already; size 0 leaves the kernel's default (half the memory).
func mountTmpfs(dir string, mode os.FileMode, size *resource.Quantity) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Mounted answers from the directory itself where the kernel allows
	// (openat2), not by reading every mount on the node: at density that
	// list has a few hundred entries per pod started.
	if mounted, err := mountinfo.Mounted(dir); err != nil || mounted {
		return err
	}
	opts := fmt.Sprintf("mode=%04o", unixMode(mode))
	if size != nil && !size.IsZero() {
		opts += fmt.Sprintf(",size=%d", size.Value())
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mounting a tmpfs on %s: %w", dir, err)
	}
	return nil
}

// unixMode is a mode's permission, setgid and sticky bits as the kernel
// numbers them.
func unixMode(m os.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&os.ModeSetgid != 0 {
		u |= syscall.S_ISGID
	}
	if m&os.ModeSticky != 0 {
		u |= syscall.S_ISVTX
	}
	return u
}

// mountHugetlbfs mounts a hugetlbfs of the page size on dir (an emptyDir
// of medium HugePages), unless one is there already.
func mountHugetlbfs(dir, pageSize string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if mounted, err := mountinfo.Mounted(dir); err != nil || mounted {
		return err
	}
	if err := syscall.Mount("nodev", dir, "hugetlbfs", syscall.MS_NOSUID|syscall.MS_NODEV, "pagesize="+pageSize); err != nil {
		return fmt.Errorf("mounting a hugetlbfs of %s pages on %s: %w", pageSize, dir, err)
	}
	return nil
}

// hugePageSize is the page size of an emptyDir of medium HugePages (the
// one size the pod asks huge pages of) or HugePages-<size> (which the pod
// must ask for), as upstream decides it.
func hugePageSize(medium v1.StorageMedium, pod *v1.Pod) (string, error) {
	want, named := strings.CutPrefix(string(medium), string(v1.StorageMediumHugePagesPrefix))
	var lists []v1.ResourceList
	if pod.Spec.Resources != nil {
		lists = append(lists, pod.Spec.Resources.Requests)
	}
	for _, cs := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range cs {
			lists = append(lists, cs[i].Resources.Requests)
		}
	}
	var found *resource.Quantity
	for _, l := range lists {
		for name := range l {
			size, ok := strings.CutPrefix(string(name), v1.ResourceHugePagesPrefix)
			if !ok {
				continue
			}
			q, err := resource.ParseQuantity(size)
			if err != nil {
				return "", fmt.Errorf("huge page resource %s: %w", name, err)
			}
			if named {
				if w, err := resource.ParseQuantity(want); err == nil && w.Cmp(q) == 0 {
					found = &q
				}
				continue
			}
			if found != nil && found.Cmp(q) != 0 {
				return "", fmt.Errorf("medium: %s can't be used if container requests multiple huge page sizes", medium)
			}
			found = &q
		}
	}
	if found == nil {
		return "", fmt.Errorf("medium %s: hugePages storage requested, but there is no resource request for huge pages", medium)
	}
	return found.String(), nil
}

// unmountUnder unmounts every mount point at or below dir, deepest first.
func unmountUnder(dir string) error {
	if _, err := os.Lstat(dir); os.IsNotExist(err) {
		// Nothing can be mounted below a path that does not exist (most
		// pods have no subPath directory): no need to read the table.
		return nil
	}
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
	mounts, err := table.read()
	if err != nil {
		return nil, err
	}
	under := mountinfo.PrefixFilter(dir)
	var out []string
	for _, m := range mounts {
		if skip, _ := under(m); !skip {
			out = append(out, m.Mountpoint)
		}
	}
	return out, nil
}

// table is this process's mount table. The kernel writes the whole table
// for every read of /proc/self/mountinfo, a few hundred lines at density
// (each pod's overlays, shm, network namespace and volumes): when pods
// terminate together, one read serves them all.
var table = mountTable{readAll: func() ([]*mountinfo.Info, error) { return mountinfo.GetMounts(nil) }}

// mountTable coalesces reads of the mount table: a caller gets a table
// whose read began after it asked, shared with every caller that asked
// while an earlier read ran.
type mountTable struct {
	readAll func() ([]*mountinfo.Info, error)
	mu      sync.Mutex
	reading bool
	next    *tableRead // the read the callers arriving now will get
}

type tableRead struct {
	done chan struct{}
	// waiters counts the callers sharing this read (for tests).
	waiters int
	mounts  []*mountinfo.Info
	err     error
}

func (t *mountTable) read() ([]*mountinfo.Info, error) {
	t.mu.Lock()
	if t.next == nil {
		t.next = &tableRead{done: make(chan struct{})}
	}
	r := t.next
	r.waiters++
	if !t.reading {
		t.reading = true
		go t.serve()
	}
	t.mu.Unlock()
	<-r.done
	return r.mounts, r.err
}

// serve reads the table for the waiting callers until none are left.
func (t *mountTable) serve() {
	for {
		t.mu.Lock()
		r := t.next
		t.next = nil
		if r == nil {
			t.reading = false
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
		r.mounts, r.err = t.readAll()
		close(r.done)
	}
}
