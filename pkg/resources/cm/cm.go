// Package cm is the container manager: the cgroup hierarchy pods run in.
// Under cgroupRoot it keeps /kubepods (Guaranteed pods), /kubepods/burstable
// and /kubepods/besteffort, and one cgroup per pod in its QoS class, with
// the pod's CPU shares and quota, memory limit and PIDs limit. Sandboxes
// and containers are created under the pod's cgroup (their CRI cgroup
// parent), so a pod as a whole cannot take more than it asked for.
//
// Both cgroup versions are supported with the cgroupfs driver, behind one
// Manager over a hierarchy: on cgroup v1 each controller has its own tree
// (cpu.shares, cpu.cfs_quota_us, memory.limit_in_bytes, pids.max); on the
// unified cgroup v2 hierarchy one directory per cgroup holds cpu.weight,
// cpu.max, memory.max and pids.max, written by opencontainers/cgroups'
// fs2, and each level enables the cpu, memory and pids controllers for
// the next.
package cm

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/systemd"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

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
	// root is cgroupRoot as a cgroup name's leading components.
	root  []string
	names naming
	h     hierarchy
	o     Options
}

// Options configure a Manager.
type Options struct {
	// CgroupRoot is where /kubepods goes ("" is "/").
	CgroupRoot string
	// PodPidsLimit is each pod's pids.max; 0 or less leaves it unset.
	PodPidsLimit int64
	// NoCPUQuota (cpuCFSQuota: false) leaves CPU limits unenforced: pod
	// cgroups get no CFS quota.
	NoCPUQuota bool
	// Systemd (cgroupDriver: systemd) makes the cgroups systemd slices,
	// named and created as the kubelet's systemd driver does.
	Systemd bool
	// HugePageSizes are the node's huge page sizes, in bytes: pod
	// cgroups are limited to what their pods ask of each.
	HugePageSizes []int64
}

// hierarchy is one cgroup version's files. Cgroups are named relative to
// the hierarchy root ("/kubepods/burstable/pod<uid>").
type hierarchy interface {
	// version is 1 or 2.
	version() int
	// create makes a cgroup and its parents.
	create(cgroup string) error
	// set applies the limits that are set (non-zero).
	set(cgroup string, l limits) error
	exists(cgroup string) bool
	// children lists a cgroup's child cgroups by name.
	children(cgroup string) ([]string, error)
	// procs lists the processes in a cgroup.
	procs(cgroup string) []int
	// remove removes a cgroup and its children, deepest first.
	remove(cgroup string) error
}

// limits are what nodelet sets on a cgroup; zero leaves a value alone.
type limits struct {
	cpuShares uint64 // cgroup v1 shares; cgroup v2 converts them to a weight
	cpuQuota  int64  // microseconds per cpuPeriod
	memory    int64  // bytes
	pids      int64
	// hugetlb is the huge pages limit per page size name ("2MB"); every
	// size of the node is set, 0 for none.
	hugetlb map[string]int64
}

// CheckVersion refuses a cgroup v1 host when failV1 is set, as the
// upstream kubelet does by default (failCgroupV1), whether or not nodelet
// manages cgroups; and, as upstream, singleProcessOOMKill explicitly false
// there, where no container can be killed whole.
func CheckVersion(failV1 bool, singleProcessOOMKill *bool) error {
	v1 := !cgroups.IsCgroup2UnifiedMode()
	if failV1 && v1 {
		return errors.New("the host uses cgroup v1, which failCgroupV1 refuses (true by default, as upstream's): move the host to cgroup v2, or set failCgroupV1: false (--fail-cgroupv1=false)")
	}
	if v1 && singleProcessOOMKill != nil && !*singleProcessOOMKill {
		return errors.New("singleProcessOOMKill must not be explicitly set to false when using cgroup v1 (memory.oom.group is cgroup v2's)")
	}
	return nil
}

// New finds the cgroup hierarchy: cgroup v2 when /sys/fs/cgroup is the
// unified hierarchy, cgroup v1 otherwise; with the systemd driver, its
// cgroups are slices systemd creates.
func New(o Options) (*Manager, error) {
	var h hierarchy
	if cgroups.IsCgroup2UnifiedMode() {
		h = unified{mount: unifiedMountpoint, dirs: kernel{}}
	} else {
		v1h, err := newV1Hierarchy()
		if err != nil {
			return nil, err
		}
		h = v1h
	}
	if o.Systemd {
		if !systemd.IsRunningSystemd() {
			return nil, errors.New("cgroupDriver is systemd, but systemd is not running (no /run/systemd/system)")
		}
		h = newSystemdHierarchy(h)
	}
	return newManager(h, o)
}

func newManager(h hierarchy, o Options) (*Manager, error) {
	m := &Manager{h: h, o: o, names: cgroupfsNames{}}
	if o.Systemd {
		m.names = systemdNames{}
	}
	root, err := m.names.parseRoot(o.CgroupRoot)
	if err != nil {
		return nil, err
	}
	m.root = root
	return m, nil
}

// Version is the cgroup version in use, 1 or 2.
func (m *Manager) Version() int { return m.h.version() }

// cgroup is the path (relative to the hierarchy root) of the cgroup named
// by cgroupRoot and parts.
func (m *Manager) cgroup(parts ...string) string {
	return m.names.path(append(append([]string{}, m.root...), parts...))
}

// QoSCgroup is the cgroup (relative to the hierarchy root) pods of a QoS
// class go under.
func (m *Manager) QoSCgroup(qos v1.PodQOSClass) string { return m.cgroup(qosParts(qos)...) }

func qosParts(qos v1.PodQOSClass) []string {
	switch qos {
	case v1.PodQOSBurstable:
		return []string{kubepods, burstable}
	case v1.PodQOSBestEffort:
		return []string{kubepods, besteffort}
	default:
		return []string{kubepods}
	}
}

// PodCgroup is a pod's cgroup: the CRI cgroup parent of its sandbox and
// containers.
func (m *Manager) PodCgroup(pod *v1.Pod) string {
	return m.cgroup(append(qosParts(podutil.QOSClass(pod)), podPrefix+string(pod.UID))...)
}

// PIDs is the node's process IDs as a resource of node allocatable (not
// one of the API's): /kubepods' pids.max, as upstream's "pid".
const PIDs v1.ResourceName = "pid"

// PIDCapacity is how many processes the node can run, as upstream counts
// it: the lower of kernel.pid_max and kernel.threads-max (procDir is
// /proc).
func PIDCapacity(procDir string) (int64, bool) {
	limit := int64(-1)
	for _, f := range []string{"pid_max", "threads-max"} {
		b, err := os.ReadFile(filepath.Join(procDir, "sys", "kernel", f))
		if err != nil {
			continue
		}
		if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && (limit < 0 || v < limit) {
			limit = v
		}
	}
	return limit, limit >= 0
}

// Setup creates the QoS cgroups and limits /kubepods to what pods may use:
// CPU, memory, huge pages, and processes (PIDs, when allocatable has it).
func (m *Manager) Setup(allocatable v1.ResourceList) error {
	top := m.cgroup(kubepods)
	for _, cg := range []string{top, m.QoSCgroup(v1.PodQOSBurstable), m.QoSCgroup(v1.PodQOSBestEffort)} {
		if err := m.h.create(cg); err != nil {
			return err
		}
	}
	cpu := allocatable[v1.ResourceCPU]
	mem := allocatable[v1.ResourceMemory]
	pids := allocatable[PIDs]
	return errors.Join(
		m.h.set(top, limits{cpuShares: milliToShares(cpu.MilliValue()), memory: mem.Value(), pids: pids.Value(), hugetlb: hugePageLimits(m.o.HugePageSizes, allocatable)}),
		// Best-effort pods get what is left over, and no more than that.
		m.h.set(m.QoSCgroup(v1.PodQOSBestEffort), limits{cpuShares: minShares}),
	)
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
	return m.h.set(m.QoSCgroup(v1.PodQOSBurstable), limits{cpuShares: milliToShares(milli)})
}

// Exists reports whether the pod's cgroup exists.
func (m *Manager) Exists(pod *v1.Pod) bool { return m.h.exists(m.PodCgroup(pod)) }

// EnsureExists creates the pod's cgroup and applies its limits: CPU shares
// from its requests, CPU quota and memory limit when every container has
// a limit (and cpuCFSQuota is on), and the node's PIDs limit.
func (m *Manager) EnsureExists(pod *v1.Pod) error {
	cg := m.PodCgroup(pod)
	if err := m.h.create(cg); err != nil {
		return err
	}
	req := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	lim := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	cpuReq := req[v1.ResourceCPU]
	l := limits{cpuShares: milliToShares(cpuReq.MilliValue())}
	if allLimited(pod, v1.ResourceCPU) && !m.o.NoCPUQuota {
		cpuLim := lim[v1.ResourceCPU]
		l.cpuQuota = max(cpuLim.MilliValue()*cpuPeriod/1000, 1000)
	}
	if allLimited(pod, v1.ResourceMemory) {
		memLim := lim[v1.ResourceMemory]
		l.memory = memLim.Value()
	}
	if m.o.PodPidsLimit > 0 {
		l.pids = m.o.PodPidsLimit
	}
	l.hugetlb = hugePageLimits(m.o.HugePageSizes, req)
	if err := m.h.set(cg, l); err != nil {
		return fmt.Errorf("applying the limits of pod %s: %w", podutil.Ref(pod), err)
	}
	return nil
}

// allLimited reports whether the pod has a limit of the resource: a
// pod-level one, or one on every app container.
func allLimited(pod *v1.Pod, r v1.ResourceName) bool {
	if pod.Spec.Resources != nil {
		// A pod-level limit limits the pod whatever its containers say.
		if q, ok := pod.Spec.Resources.Limits[r]; ok && !q.IsZero() {
			return true
		}
	}
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
		names, err := m.h.children(dir)
		if err != nil {
			return nil, err
		}
		for _, name := range names {
			if uid, ok := m.names.podUID(name); ok {
				out[uid] = path.Join(dir, name)
			}
		}
	}
	return out, nil
}

// Destroy removes a pod cgroup, killing anything still running in it
// first (its containers are stopped by then; what is left is strays).
func (m *Manager) Destroy(cgroup string) error {
	var err error
	for i := 0; i < 5; i++ {
		for _, pid := range m.h.procs(cgroup) {
			klog.InfoS("Killing a process left in a pod cgroup", "cgroup", cgroup, "pid", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL) // fails only when it has exited
		}
		if err = m.h.remove(cgroup); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond) // let killed processes exit
	}
	return fmt.Errorf("removing cgroup %s: %w", cgroup, err)
}

// RemoveRoot removes everything nodelet created under cgroupRoot; only for
// a cgroupRoot of nodelet's own (tests).
func (m *Manager) RemoveRoot() error { return m.h.remove(m.names.path(m.root)) }

func milliToShares(milli int64) uint64 {
	if s := milli * 1024 / 1000; s >= minShares {
		return uint64(s)
	}
	return minShares
}
