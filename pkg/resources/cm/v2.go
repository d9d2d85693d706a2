package cm

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fs2"
)

const unifiedMountpoint = "/sys/fs/cgroup"

// controllersV2 are the controllers nodelet sets limits with; every level
// down to the pod cgroups enables them for its children.
var controllersV2 = []string{"cpu", "memory", "pids", "hugetlb"}

// unified is the cgroup v2 hierarchy: one directory per cgroup.
type unified struct {
	mount string
	dirs  cgroupDirs
}

// cgroupDirs makes and removes cgroup directories: the kernel fills a new
// one with the files of the controllers its parent enables, and removes
// them with it. Tests on a fake root stand in for the kernel.
type cgroupDirs interface {
	mkdir(dir string) error
	rmdir(dir string) error
}

// kernel is the real cgroup filesystem.
type kernel struct{}

func (kernel) mkdir(dir string) error { return os.Mkdir(dir, 0o755) }
func (kernel) rmdir(dir string) error { return syscall.Rmdir(dir) }

func (u unified) version() int { return 2 }

func (u unified) path(cgroup string) string { return filepath.Join(u.mount, cgroup) }

// create makes the cgroup and its parents, each parent enabling the
// controllers for its children: a cgroup only has the files of the
// controllers its parent's cgroup.subtree_control names.
func (u unified) create(cgroup string) error {
	parts := strings.Split(strings.Trim(filepath.Clean(cgroup), "/"), "/")
	dir := u.mount
	for _, p := range parts {
		if err := enableControllers(dir); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", cgroup, err)
		}
		dir = filepath.Join(dir, p)
		if err := u.dirs.mkdir(dir); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("creating cgroup %s: %w", cgroup, err)
		}
	}
	return nil
}

// enableControllers turns on, for dir's children, the controllers dir
// has and has not enabled yet.
func enableControllers(dir string) error {
	available, err := cgroups.ReadFile(dir, "cgroup.controllers")
	if err != nil {
		return err
	}
	enabled, err := cgroups.ReadFile(dir, "cgroup.subtree_control")
	if err != nil {
		return err
	}
	var add []string
	for _, c := range controllersV2 {
		if has(available, c) && !has(enabled, c) {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	return cgroups.WriteFile(dir, "cgroup.subtree_control", strings.Join(add, " "))
}

func has(list, name string) bool {
	for _, f := range strings.Fields(list) {
		if f == name {
			return true
		}
	}
	return false
}

// set writes the limits with fs2: cpu.weight converted from the shares,
// cpu.max as "quota period", memory.max and pids.max.
func (u unified) set(cgroup string, l limits) error {
	r := &cgroups.Resources{}
	if l.cpuShares > 0 {
		r.CpuWeight = sharesToWeight(l.cpuShares)
	}
	if l.cpuQuota > 0 {
		r.CpuQuota, r.CpuPeriod = l.cpuQuota, cpuPeriod
	}
	r.Memory = l.memory
	if l.pids > 0 {
		r.PidsLimit = &l.pids
	}
	for _, size := range slices.Sorted(maps.Keys(l.hugetlb)) {
		r.HugetlbLimit = append(r.HugetlbLimit, &cgroups.HugepageLimit{Pagesize: size, Limit: uint64(l.hugetlb[size])})
	}
	m, err := fs2.NewManager(&cgroups.Cgroup{Resources: r}, u.path(cgroup))
	if err != nil {
		return err
	}
	if err := m.Set(r); err != nil {
		return fmt.Errorf("setting the limits of %s: %w", cgroup, err)
	}
	return nil
}

func (u unified) exists(cgroup string) bool {
	_, err := os.Stat(u.path(cgroup))
	return err == nil
}

func (u unified) children(cgroup string) ([]string, error) { return subdirs(u.path(cgroup)) }

func (u unified) procs(cgroup string) []int { return readProcs(u.path(cgroup)) }

func (u unified) remove(cgroup string) error { return removeTree(u.path(cgroup), u.dirs.rmdir) }

// sharesToWeight maps cgroup v1 shares [2, 262144] linearly onto cgroup
// v2 weights [1, 10000], as the upstream kubelet does for pod and QoS
// cgroups (runc's container-level conversion has been a curve since
// runc 1.3; the pod cgroups keep the kubelet's line, so a node moved
// between the two keeps the same weights).
func sharesToWeight(shares uint64) uint64 {
	if shares >= 262144 {
		return 10000
	}
	return 1 + ((max(shares, 2)-2)*9999)/262142
}
