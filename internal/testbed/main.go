package testbed

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/pkg/resources/cm"
)

// Main runs a test package against a private containerd: it builds
// nodelet, starts containerd, stores it in *cd, runs the tests, and stops
// containerd again. A test bed that cannot start fails the run. Each
// extra set-up (a control plane, say) runs after containerd started and
// returns its own clean-up.
func Main(m *testing.M, cd **Containerd, extra ...func(ctx context.Context) (cleanup func(), err error)) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	sweepStaleCgroups()
	var err error
	if _, err = NodeletBinary(); err == nil {
		*cd, err = StartContainerd(ctx)
	}
	var cleanups []func()
	for _, setup := range extra {
		if err != nil {
			break
		}
		var c func()
		if c, err = setup(ctx); c != nil {
			cleanups = append(cleanups, c)
		}
	}
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration test bed:", err)
		for _, c := range cleanups {
			c()
		}
		if *cd != nil {
			if err := (*cd).Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "integration test bed: stopping containerd:", err)
			}
		}
		os.Exit(1)
	}
	code := m.Run()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	removeCgroupRoot(CgroupRoot())
	if err := (*cd).Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping test bed:", err)
		if code == 0 {
			code = 1
		}
	}
	removeBinaries()
	os.Exit(code)
}

// sweepStaleCgroups removes the cgroup roots of test processes that are
// gone: a run killed before its teardown leaves its root in every
// hierarchy, with a cgroup for each pod its floors started (1,300 after
// one density run), and later runs would work among them.
func sweepStaleCgroups() {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/nodelet-test-*")
	unified, _ := filepath.Glob("/sys/fs/cgroup/nodelet-test-*")
	seen := map[string]bool{}
	for _, dir := range append(roots, unified...) {
		name := filepath.Base(dir)
		pid, err := strconv.Atoi(strings.TrimPrefix(name, "nodelet-test-"))
		if err != nil || seen[name] {
			continue
		}
		seen[name] = true
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue // that test run is still going
		}
		removeCgroupRoot("/" + name)
	}
}

// RemoveCgroupRoot removes a cgroup root nodelet or a kubelet made and
// what is below it, in every hierarchy, once nothing runs there.
func RemoveCgroupRoot(root string) { removeCgroupRoot(root) }

// removeCgroupRoot removes a test cgroup root and what is below it, in
// every hierarchy; a failure is reported, not fatal.
func removeCgroupRoot(root string) {
	if cg, err := cm.New(cm.Options{CgroupRoot: root}); err == nil {
		if err := cg.RemoveRoot(); err != nil {
			fmt.Fprintln(os.Stderr, "removing test cgroups:", err)
		}
	}
}

// RemoveBuilt removes the binaries built for the tests (for a TestMain
// that does not use Main).
func RemoveBuilt() { removeBinaries() }

// RemoveDir removes a test directory at teardown, where nothing can fail
// any more: a directory left behind is reported, not ignored.
func RemoveDir(dir string) {
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintf(os.Stderr, "test bed: removing %s: %v\n", dir, err)
	}
}
