package cm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// SystemOptions name the node's system cgroups, as kubeletCgroups,
// systemCgroups and --runtime-cgroups name them ("" for none).
type SystemOptions struct {
	// Kubelet is where nodelet puts itself.
	Kubelet string
	// System is where nodelet puts every other process of the root cgroup
	// (the node's system daemons, on a host without systemd).
	System string
	// Runtime is the container runtime's cgroup. As upstream's kubelet
	// since dockershim, nodelet does not move the runtime: the cgroup only
	// names what the summary API reports as "runtime".
	Runtime string
	Clock   clock.WithTicker
}

// System keeps nodelet and the system's processes in their cgroups, as
// upstream's container manager does: at start and every minute (a
// process started in the root cgroup since is moved too). The cgroups are
// always cgroupfs paths, whatever the driver, as upstream's.
type System struct {
	o SystemOptions
	// self reads the cgroup nodelet runs in (tests replace it).
	self func() (string, error)
}

// ensurePeriod is how often the processes are put back, as upstream's.
const ensurePeriod = time.Minute

// NewSystem checks the names and returns the component; upstream refuses
// the root as the system cgroup (it would move nothing anywhere).
func NewSystem(o SystemOptions) (*System, error) {
	if o.System == "/" {
		return nil, errors.New(`systemCgroups cannot be the root cgroup ("/")`)
	}
	for name, v := range map[string]string{"kubeletCgroups": o.Kubelet, "systemCgroups": o.System, "runtimeCgroups": o.Runtime} {
		if v != "" && !strings.HasPrefix(v, "/") {
			return nil, fmt.Errorf("%s %q: want an absolute cgroupfs path, such as /kubelet", name, v)
		}
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return &System{o: o, self: ownCgroup}, nil
}

// Run places the processes now, then every minute, until ctx ends; a
// failure is logged and tried again.
func (s *System) Run(ctx context.Context) error {
	if s.o.Kubelet == "" && s.o.System == "" {
		<-ctx.Done()
		return nil
	}
	t := s.o.Clock.NewTicker(ensurePeriod)
	defer t.Stop()
	for {
		if err := s.Ensure(); err != nil {
			klog.ErrorS(err, "Failed to keep processes in their system cgroups")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// Ensure puts nodelet in its cgroup and the root cgroup's other processes
// (but init and kernel threads) in the system cgroup.
func (s *System) Ensure() error {
	var errs []error
	if s.o.Kubelet != "" {
		errs = append(errs, place(s.o.Kubelet, os.Getpid()))
	}
	if s.o.System != "" {
		pids, err := rootProcesses()
		if err != nil {
			errs = append(errs, err)
		}
		for _, pid := range pids {
			if pid == 1 || pid == os.Getpid() && s.o.Kubelet != "" || kernelThread(pid) {
				continue
			}
			if err := place(s.o.System, pid); err != nil && processExists(pid) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Containers are the system containers the summary API reports, by
// upstream's names: "kubelet" (nodelet's cgroup, configured or the one it
// runs in), "runtime" and "misc" (the system cgroup) when named.
func (s *System) Containers() map[string]string {
	out := map[string]string{}
	if s.o.Kubelet != "" {
		out["kubelet"] = s.o.Kubelet
	} else if self, err := s.self(); err == nil {
		out["kubelet"] = self
	}
	if s.o.Runtime != "" {
		out["runtime"] = s.o.Runtime
	}
	if s.o.System != "" {
		out["misc"] = s.o.System
	}
	return out
}

// place moves pid into the named cgroup, creating it in every hierarchy.
func place(name string, pid int) error {
	m, err := manager.New(&cgroups.Cgroup{Path: name, Resources: &cgroups.Resources{SkipDevices: true}})
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", name, err)
	}
	if err := m.Apply(pid); err != nil {
		return fmt.Errorf("moving process %d into cgroup %s: %w", pid, name, err)
	}
	return nil
}

// CgroupStats reads a cgroup's CPU and memory statistics from the
// kernel's files: on cgroup v1 from the cpuacct and memory hierarchies it
// is in (a cgroup made by hand may be in only some), on v2 from its one
// directory.
func CgroupStats(name string) (*cgroups.Stats, error) {
	paths := map[string]string{}
	if cgroups.IsCgroup2UnifiedMode() {
		paths[""] = filepath.Join(unifiedMountpoint, name)
	} else {
		for _, sub := range []string{"cpuacct", "memory"} {
			paths[sub] = filepath.Join("/sys/fs/cgroup", sub, name)
		}
	}
	for sub, p := range paths {
		if _, err := os.Stat(p); err != nil {
			if sub == "" || sub == "memory" {
				return nil, fmt.Errorf("cgroup %s: %w", name, err)
			}
			delete(paths, sub)
		}
	}
	m, err := manager.NewWithPaths(&cgroups.Cgroup{Path: name, Resources: &cgroups.Resources{SkipDevices: true}}, paths)
	if err != nil {
		return nil, err
	}
	return m.GetStats()
}

// rootProcesses lists the processes of the root cgroup: the unified
// hierarchy's, or on cgroup v1 the memory hierarchy's (the one upstream's
// system container is sized by).
func rootProcesses() ([]int, error) {
	dir := unifiedMountpoint
	if !cgroups.IsCgroup2UnifiedMode() {
		dir = "/sys/fs/cgroup/memory"
	}
	return cgroups.GetPids(dir)
}

// kernelThread: a kernel thread has no executable.
func kernelThread(pid int) bool {
	_, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return err != nil && os.IsNotExist(err)
}

func processExists(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

// ownCgroup is the cgroup nodelet runs in: the unified hierarchy's, or
// on cgroup v1 the memory controller's.
func ownCgroup() (string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	defer f.Close()
	return cgroupOf(bufio.NewScanner(f), cgroups.IsCgroup2UnifiedMode())
}

// cgroupOf reads a /proc/<pid>/cgroup listing.
func cgroupOf(sc *bufio.Scanner, unified bool) (string, error) {
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if _, err := strconv.Atoi(parts[0]); err != nil {
			continue
		}
		if unified && parts[0] == "0" && parts[1] == "" {
			return parts[2], nil
		}
		for _, c := range strings.Split(parts[1], ",") {
			if !unified && c == "memory" {
				return parts[2], nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New("no cgroup of this process found")
}
