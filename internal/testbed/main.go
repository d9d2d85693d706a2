package testbed

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nodelet/nodelet/pkg/cm"
)

// Main runs a test package against a private containerd: it builds
// nodelet, starts containerd, stores it in *cd, runs the tests, and stops
// containerd again. A test bed that cannot start fails the run.
func Main(m *testing.M, cd **Containerd) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	var err error
	if _, err = NodeletBinary(); err == nil {
		*cd, err = StartContainerd(ctx)
	}
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration test bed:", err)
		os.Exit(1)
	}
	code := m.Run()
	if cg, err := cm.New(CgroupRoot(), 0); err == nil {
		if err := cg.RemoveRoot(); err != nil {
			fmt.Fprintln(os.Stderr, "removing test cgroups:", err)
		}
	}
	if err := (*cd).Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping test bed:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
