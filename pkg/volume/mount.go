package volume

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/api/resource"
)

// mountTmpfs mounts a tmpfs on dir unless one is there already; size 0
// leaves the kernel's default (half the memory).
func mountTmpfs(dir string, size *resource.Quantity) error {
	if mounted, err := isMountPoint(dir); err != nil || mounted {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
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

func isMountPoint(dir string) (bool, error) {
	mounts, err := MountPoints()
	if err != nil {
		return false, err
	}
	for _, m := range mounts {
		if m == dir {
			return true, nil
		}
	}
	return false, nil
}

// unmountUnder unmounts every mount point at or below dir, deepest first.
func unmountUnder(dir string) error {
	mounts, err := MountPoints()
	if err != nil {
		return err
	}
	var under []string
	for _, m := range mounts {
		if m == dir || strings.HasPrefix(m, dir+"/") {
			under = append(under, m)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(under)))
	for _, m := range under {
		if err := syscall.Unmount(m, 0); err != nil && err != syscall.EINVAL && err != syscall.ENOENT {
			return fmt.Errorf("unmounting %s: %w", m, err)
		}
	}
	return nil
}

// MountPoints lists every mount point on the node.
func MountPoints() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 {
			out = append(out, unescapeMountPath(fields[4]))
		}
	}
	return out, sc.Err()
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, ok := octal(s[i+1 : i+4]); ok {
				b.WriteByte(n)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func octal(s string) (byte, bool) {
	var n int
	for _, c := range s {
		if c < '0' || c > '7' {
			return 0, false
		}
		n = n*8 + int(c-'0')
	}
	return byte(n), n < 256
}
