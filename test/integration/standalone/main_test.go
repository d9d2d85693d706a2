// Package standalone tests nodelet end to end as an operator runs it:
// the real binary, static pod manifests, a real containerd, and the
// read-only API.
package standalone

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testbed"
)

var cd *testbed.Containerd

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	var err error
	if _, err = testbed.NodeletBinary(); err == nil {
		cd, err = testbed.StartContainerd(ctx)
	}
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration test bed:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := cd.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping test bed:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
