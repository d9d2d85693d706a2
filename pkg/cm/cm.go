// Package cm is the container manager: the cgroup hierarchy pods run in.
// Under cgroupRoot it keeps /kubepods (Guaranteed pods), /kubepods/burstable
// and /kubepods/besteffort, and one cgroup per pod in its QoS class, with
// the pod's CPU shares and quota, memory limit and PIDs limit. Sandboxes
// and containers are created under the pod's cgroup (their CRI cgroup
// parent), so a pod as a whole cannot take more than it asked for. Only
// cgroup v1 with the cgroupfs driver is supported.
package cm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"

	"github.com/moby/sys/mountinfo"

	"github.com/nodelet/nodelet/pkg/podutil"
)

// The controllers whose files nodelet writes. Other controllers (cpuset,
// devices, freezer, blkio, ...) get the pod's directories from runc, which
// creates a container's cgroup path in every mounted hierarchy.
var managed = []string{"cpu", "cpuacct", "memory", "pids"}

const (
	kubepods   = "kubepods"
	burstable  = "burstable"
	besteffort = "besteffort"
	podPrefix  = "pod"

	cpuPeriod = 100000
	minShares = 2
)

// Manager manages the QoS and pod cgroups.
type Manager struct {
	root string // cgroupRoot, e.g. "/"
	// mounts maps each mounted controller to its hierarchy's mount point.
	mounts    map[string]string
	pidsLimit int64
}

// New finds the cgroup v1 hierarchies. cgroupRoot is where /kubepods goes.
func New(cgroupRoot string, podPidsLimit int64) (*Manager, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	for _, c := range []string{"cpu", "memory"} {
		if _, ok := mounts[c]; !ok {
			return nil, fmt.Errorf("cgroup v1 controller %q is not mounted (cgroup v2 is not supported)", c)
		}
	}
	if cgroupRoot == "" {
		cgroupRoot = "/"
	}
	return &Manager{root: filepath.Clean("/" + cgroupRoot), mounts: mounts, pidsLimit: podPidsLimit}, nil
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

// QoSCgroup is the cgroup (relative to the hierarchy roots) pods of a QoS
// class go under.
func (m *Manager) QoSCgroup(qos v1.PodQOSClass) string {
	switch qos {
	case v1.PodQOSBurstable:
		return filepath.Join(m.root, kubepods, burstable)
	case v1.PodQOSBestEffort:
		return filepath.Join(m.root, kubepods, besteffort)
	default:
		return filepath.Join(m.root, kubepods)
	}
}

// PodCgroup is a pod's cgroup: the CRI cgroup parent of its sandbox and
// containers.
func (m *Manager) PodCgroup(pod *v1.Pod) string {
	return filepath.Join(m.QoSCgroup(podutil.QOSClass(pod)), podPrefix+string(pod.UID))
}

func (m *Manager) path(controller, cgroup string) string {
	return filepath.Join(m.mounts[controller], cgroup)
}

// Setup creates the QoS cgroups and limits /kubepods to what pods may use.
func (m *Manager) Setup(allocatable v1.ResourceList) error {
	top := filepath.Join(m.root, kubepods)
	for _, cg := range []string{top, m.QoSCgroup(v1.PodQOSBurstable), m.QoSCgroup(v1.PodQOSBestEffort)} {
		if err := m.create(cg); err != nil {
			return err
		}
	}
	cpu := allocatable[v1.ResourceCPU]
	var errs []error
	errs = append(errs, m.write("cpu", top, "cpu.shares", strconv.FormatInt(milliToShares(cpu.MilliValue()), 10)))
	if mem, ok := allocatable[v1.ResourceMemory]; ok && mem.Value() > 0 {
		errs = append(errs, m.write("memory", top, "memory.limit_in_bytes", strconv.FormatInt(mem.Value(), 10)))
	}
	// Best-effort pods get what is left over, and no more than that.
	errs = append(errs, m.write("cpu", m.QoSCgroup(v1.PodQOSBestEffort), "cpu.shares", strconv.Itoa(minShares)))
	return errors.Join(errs...)
}

// UpdateQoS sets the burstable class's CPU shares to the sum of its
// pods' requests, so it competes fairly with Guaranteed pods.
func (m *Manager) UpdateQoS(active []*v1.Pod) error {
	var milli int64
	for _, p := range active {
		if podutil.QOSClass(p) == v1.PodQOSBurstable {
			req := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
			q := req[v1.ResourceCPU]
			milli += q.MilliValue()
		}
	}
	return m.write("cpu", m.QoSCgroup(v1.PodQOSBurstable), "cpu.shares", strconv.FormatInt(milliToShares(milli), 10))
}

// Exists reports whether the pod's cgroup exists.
func (m *Manager) Exists(pod *v1.Pod) bool {
	_, err := os.Stat(m.path("memory", m.PodCgroup(pod)))
	return err == nil
}

// EnsureExists creates the pod's cgroup and applies its limits: CPU shares
// from its requests, CPU quota and memory limit when every container has
// a limit, and the node's PIDs limit.
func (m *Manager) EnsureExists(pod *v1.Pod) error {
	cg := m.PodCgroup(pod)
	if err := m.create(cg); err != nil {
		return err
	}
	req := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	lim := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	cpuReq := req[v1.ResourceCPU]
	var errs []error
	errs = append(errs, m.write("cpu", cg, "cpu.shares", strconv.FormatInt(milliToShares(cpuReq.MilliValue()), 10)))
	if allLimited(pod, v1.ResourceCPU) {
		cpuLim := lim[v1.ResourceCPU]
		errs = append(errs,
			m.write("cpu", cg, "cpu.cfs_period_us", strconv.Itoa(cpuPeriod)),
			m.write("cpu", cg, "cpu.cfs_quota_us", strconv.FormatInt(max(cpuLim.MilliValue()*cpuPeriod/1000, 1000), 10)))
	}
	if allLimited(pod, v1.ResourceMemory) {
		memLim := lim[v1.ResourceMemory]
		errs = append(errs, m.write("memory", cg, "memory.limit_in_bytes", strconv.FormatInt(memLim.Value(), 10)))
	}
	if m.pidsLimit > 0 {
		if _, ok := m.mounts["pids"]; ok {
			errs = append(errs, m.write("pids", cg, "pids.max", strconv.FormatInt(m.pidsLimit, 10)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("applying the limits of pod %s: %w", podutil.Ref(pod), err)
	}
	return nil
}

// allLimited reports whether every app container limits the resource: only
// then does the pod as a whole have a limit.
func allLimited(pod *v1.Pod, r v1.ResourceName) bool {
	for i := range pod.Spec.Containers {
		if _, ok := pod.Spec.Containers[i].Resources.Limits[r]; !ok {
			return false
		}
	}
	return len(pod.Spec.Containers) > 0
}

// PodCgroups lists the pod cgroups that exist, by pod UID.
func (m *Manager) PodCgroups() (map[types.UID]string, error) {
	out := map[types.UID]string{}
	for _, qos := range []v1.PodQOSClass{v1.PodQOSGuaranteed, v1.PodQOSBurstable, v1.PodQOSBestEffort} {
		dir := m.QoSCgroup(qos)
		entries, err := os.ReadDir(m.path("memory", dir))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if e.IsDir() && strings.HasPrefix(e.Name(), podPrefix) {
				out[types.UID(strings.TrimPrefix(e.Name(), podPrefix))] = filepath.Join(dir, e.Name())
			}
		}
	}
	return out, nil
}

// Destroy removes a pod cgroup from every hierarchy, killing anything
// still running in it first (its containers are stopped by then; what is
// left is strays).
func (m *Manager) Destroy(cgroup string) error {
	var errs []error
	for i := 0; i < 5; i++ {
		errs = errs[:0]
		m.killProcesses(cgroup)
		for controller, mount := range m.uniqueMounts() {
			if err := removeTree(filepath.Join(mount, cgroup)); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", controller, err))
			}
		}
		if len(errs) == 0 {
			return nil
		}
		time.Sleep(20 * time.Millisecond) // let killed processes exit
	}
	return fmt.Errorf("removing cgroup %s: %w", cgroup, errors.Join(errs...))
}

// controllers are the cgroup v1 controllers (superblock options of a
// cgroup mount that are not controllers are flags like rw).
var controllers = map[string]bool{
	"cpu": true, "cpuacct": true, "cpuset": true, "memory": true, "devices": true, "freezer": true, "blkio": true,
	"pids": true, "net_cls": true, "net_prio": true, "hugetlb": true, "perf_event": true, "rdma": true, "misc": true,
}

// uniqueMounts lists each hierarchy once (co-mounted controllers share one).
func (m *Manager) uniqueMounts() map[string]string {
	seen := map[string]bool{}
	out := map[string]string{}
	for c, mount := range m.mounts {
		if seen[mount] {
			continue
		}
		seen[mount] = true
		out[c] = mount
	}
	return out
}

func (m *Manager) killProcesses(cgroup string) {
	procs, err := os.ReadFile(filepath.Join(m.path("memory", cgroup), "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(procs)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			klog.InfoS("Killing a process left in a pod cgroup", "cgroup", cgroup, "pid", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// removeTree removes a cgroup directory and its children, deepest first.
// cgroup directories hold only pseudo-files, so rmdir is the way.
func removeTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
		return err
	}
	return nil
}

// create makes a cgroup in every managed controller.
func (m *Manager) create(cgroup string) error {
	for _, c := range managed {
		mount, ok := m.mounts[c]
		if !ok {
			continue
		}
		if err := os.MkdirAll(filepath.Join(mount, cgroup), 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s (%s): %w", cgroup, c, err)
		}
	}
	return nil
}

func (m *Manager) write(controller, cgroup, file, value string) error {
	if _, ok := m.mounts[controller]; !ok {
		return nil
	}
	if err := os.WriteFile(filepath.Join(m.path(controller, cgroup), file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("writing %s=%s for %s: %w", file, value, cgroup, err)
	}
	return nil
}

func milliToShares(milli int64) int64 {
	if s := milli * 1024 / 1000; s >= minShares {
		return s
	}
	return minShares
}

// RemoveRoot removes everything nodelet created under cgroupRoot; only for
// a cgroupRoot of nodelet's own (tests).
func (m *Manager) RemoveRoot() error {
	var errs []error
	for _, mount := range m.uniqueMounts() {
		errs = append(errs, removeTree(filepath.Join(mount, m.root)))
	}
	return errors.Join(errs...)
}
