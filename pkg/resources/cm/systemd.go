package cm

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
)

// systemdHierarchy is the systemd cgroup driver: the kubepods, QoS and
// pod cgroups are transient slice units that systemd creates (through its
// D-Bus API, with opencontainers/cgroups' systemd managers, as the
// kubelet's driver does) and whose limits it sets, so systemd never moves
// or resets what it did not create. Reading goes to the cgroup
// filesystem underneath.
type systemdHierarchy struct {
	fs hierarchy
}

func newSystemdHierarchy(fs hierarchy) systemdHierarchy { return systemdHierarchy{fs: fs} }

func (h systemdHierarchy) version() int { return h.fs.version() }

// unit is the slice unit of a cgroup path and the slice it goes in: the
// last two components, "-.slice" for the root.
func unit(cgroup string) (name, parent string) {
	dir, base := path.Split(path.Clean(cgroup))
	parent = path.Base(dir)
	if parent == "/" || parent == "." {
		parent = "-.slice"
	}
	return base, parent
}

// libcontainer is the unit as opencontainers/cgroups configures it: no
// device rules (pods' devices are their containers'), no freezing when
// limits change.
func libcontainer(cgroup string, r *cgroups.Resources) (cgroups.Manager, *cgroups.Resources, error) {
	if r == nil {
		r = &cgroups.Resources{}
	}
	r.SkipDevices, r.SkipFreezeOnSet = true, true
	name, parent := unit(cgroup)
	m, err := manager.New(&cgroups.Cgroup{Name: name, Parent: parent, Systemd: true, Resources: r})
	if err != nil {
		return nil, nil, fmt.Errorf("cgroup %s (systemd unit %s): %w", cgroup, name, err)
	}
	return m, r, nil
}

// create starts the slice and each slice above it, outermost first.
func (h systemdHierarchy) create(cgroup string) error {
	parts := strings.Split(strings.Trim(path.Clean(cgroup), "/"), "/")
	for i := range parts {
		cg := "/" + path.Join(parts[:i+1]...)
		if h.fs.exists(cg) {
			continue
		}
		m, _, err := libcontainer(cg, nil)
		if err != nil {
			return err
		}
		if err := m.Apply(-1); err != nil {
			return fmt.Errorf("creating slice %s: %w", cg, err)
		}
	}
	return nil
}

// set applies the limits through systemd's unit properties (which write
// the cgroup files too).
func (h systemdHierarchy) set(cgroup string, l limits) error {
	r := &cgroups.Resources{Memory: l.memory}
	if l.cpuShares > 0 {
		if h.fs.version() == 2 {
			r.CpuWeight = sharesToWeight(l.cpuShares)
		} else {
			r.CpuShares = l.cpuShares
		}
	}
	if l.cpuQuota > 0 {
		r.CpuQuota, r.CpuPeriod = l.cpuQuota, cpuPeriod
	}
	if l.pids > 0 {
		r.PidsLimit = &l.pids
	}
	m, r, err := libcontainer(cgroup, r)
	if err != nil {
		return err
	}
	if err := m.Set(r); err != nil {
		return fmt.Errorf("setting the limits of slice %s: %w", cgroup, err)
	}
	return nil
}

func (h systemdHierarchy) exists(cgroup string) bool { return h.fs.exists(cgroup) }

func (h systemdHierarchy) children(cgroup string) ([]string, error) { return h.fs.children(cgroup) }

func (h systemdHierarchy) procs(cgroup string) []int { return h.fs.procs(cgroup) }

// remove stops the slice and every slice in it, deepest first (stopping
// a slice also stops what runs in it); what systemd leaves (directories
// of controllers it does not manage) goes through the filesystem.
func (h systemdHierarchy) remove(cgroup string) error {
	if !h.fs.exists(cgroup) {
		return nil
	}
	children, err := h.fs.children(cgroup)
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range children {
		if strings.HasSuffix(c, sliceSuffix) {
			errs = append(errs, h.remove(path.Join(cgroup, c)))
		}
	}
	if name, _ := unit(cgroup); strings.HasSuffix(name, sliceSuffix) {
		m, _, err := libcontainer(cgroup, nil)
		if err == nil {
			err = m.Destroy()
		}
		errs = append(errs, err)
	}
	errs = append(errs, h.fs.remove(cgroup))
	return errors.Join(errs...)
}
