// Package runtime tests the CRI runtime manager against a real containerd:
// sandboxes, containers, restarts, hooks and teardown as the runtime
// actually carries them out.
package runtime

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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	var err error
	cd, err = testbed.StartContainerd(ctx)
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
