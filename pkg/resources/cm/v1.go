package cm

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/moby/sys/mountinfo"
	"github.com/opencontainers/cgroups"
)

// managedV1 are the controllers whose files nodelet writes. Other
// controllers (cpuset, devices, freezer, blkio, ...) get the pod's
// directories from runc, which creates a container's cgroup path in every
// mounted hierarchy.
var managedV1 = []string{"cpu", "cpuacct", "memory", "pids", "hugetlb"}

// controllers are the cgroup v1 controllers (superblock options of a
// cgroup mount that are not controllers are flags like rw).
var controllers = map[string]bool{
	"cpu": true, "cpuacct": true, "cpuset": true, "memory": true, "devices": true, "freezer": true, "blkio": true,
	"pids": true, "net_cls": true, "net_prio": true, "hugetlb": true, "perf_event": true, "rdma": true, "misc": true,
}

// v1Hierarchy is cgroup v1: one tree per controller.
type v1Hierarchy struct {
	// mounts maps each mounted controller to its hierarchy's mount point.
	mounts map[string]string
}

func newV1Hierarchy() (v1Hierarchy, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return v1Hierarchy{}, err
	}
	for _, c := range []string{"cpu", "memory"} {
		if _, ok := mounts[c]; !ok {
			return v1Hierarchy{}, fmt.Errorf("cgroup v1 controller %q is not mounted", c)
		}
	}
	return v1Hierarchy{mounts: mounts}, nil
}

// cgroupMounts reads which controller is mounted where.
func cgroupMounts() (map[string]string, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, m := range mounts {
		if m.FSType == "cgroup2" {
			// The hybrid layout's unified hierarchy: runc puts containers
			// there too, so pod cgroups must be removed from it as well.
			out["unified"] = m.Mountpoint
			continue
		}
		for _, opt := range strings.Split(m.VFSOptions, ",") {
			if controllers[opt] || strings.HasPrefix(opt, "name=") {
				out[opt] = m.Mountpoint
			}
		}
	}
	return out, nil
}

func (h v1Hierarchy) version() int { return 1 }

func (h v1Hierarchy) path(controller, cgroup string) string {
	return filepath.Join(h.mounts[controller], cgroup)
}

// create makes a cgroup in every managed controller.
func (h v1Hierarchy) create(cgroup string) error {
	for _, c := range managedV1 {
		mount, ok := h.mounts[c]
		if !ok {
			continue
		}
		if err := os.MkdirAll(filepath.Join(mount, cgroup), 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s (%s): %w", cgroup, c, err)
		}
	}
	return nil
}

func (h v1Hierarchy) set(cgroup string, l limits) error {
	var errs []error
	if l.cpuShares > 0 {
		errs = append(errs, h.write("cpu", cgroup, "cpu.shares", strconv.FormatUint(l.cpuShares, 10)))
	}
	if l.cpuQuota > 0 {
		errs = append(errs,
			h.write("cpu", cgroup, "cpu.cfs_period_us", strconv.Itoa(cpuPeriod)),
			h.write("cpu", cgroup, "cpu.cfs_quota_us", strconv.FormatInt(l.cpuQuota, 10)))
	}
	if l.memory > 0 {
		errs = append(errs, h.write("memory", cgroup, "memory.limit_in_bytes", strconv.FormatInt(l.memory, 10)))
	}
	if l.pids > 0 {
		errs = append(errs, h.write("pids", cgroup, "pids.max", strconv.FormatInt(l.pids, 10)))
	}
	for _, size := range slices.Sorted(maps.Keys(l.hugetlb)) {
		errs = append(errs, h.write("hugetlb", cgroup, "hugetlb."+size+".limit_in_bytes", strconv.FormatInt(l.hugetlb[size], 10)))
	}
	return errors.Join(errs...)
}

// write sets a controller's file; a controller that is not mounted has
// nothing to set.
func (h v1Hierarchy) write(controller, cgroup, file, value string) error {
	if _, ok := h.mounts[controller]; !ok {
		return nil
	}
	if err := os.WriteFile(filepath.Join(h.path(controller, cgroup), file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("writing %s=%s for %s: %w", file, value, cgroup, err)
	}
	return nil
}

func (h v1Hierarchy) exists(cgroup string) bool {
	_, err := os.Stat(h.path("memory", cgroup))
	return err == nil
}

func (h v1Hierarchy) children(cgroup string) ([]string, error) {
	return subdirs(h.path("memory", cgroup))
}

func (h v1Hierarchy) procs(cgroup string) []int {
	return readProcs(h.path("memory", cgroup))
}

// remove removes a cgroup from every hierarchy (co-mounted controllers
// share one).
func (h v1Hierarchy) remove(cgroup string) error {
	seen := map[string]bool{}
	var errs []error
	for controller, mount := range h.mounts {
		if seen[mount] {
			continue
		}
		seen[mount] = true
		if err := removeTree(filepath.Join(mount, cgroup), syscall.Rmdir); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", controller, err))
		}
	}
	return errors.Join(errs...)
}

// subdirs lists the directories in dir; a missing dir has none.
func subdirs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// readProcs lists the processes in a cgroup directory and the cgroups
// below it (a container's, where a runtime that failed to clean up after
// a cancelled start leaves its runc init); a cgroup that is gone has
// none.
func readProcs(dir string) []int {
	pids, err := cgroups.GetAllPids(dir)
	if err != nil {
		return nil
	}
	return pids
}

// removeTree removes a cgroup directory and its children, deepest first.
// cgroup directories hold only pseudo-files, so rmdir is the way.
func removeTree(dir string, rmdir func(string) error) error {
	names, err := subdirs(dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := removeTree(filepath.Join(dir, n), rmdir); err != nil {
			return err
		}
	}
	if err := rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
		return err
	}
	return nil
}
