//go:build integration

// Package systemd tests what talks to systemd, against a real systemd
// booted as PID 1 of its own namespaces (testbed.Systemd): the systemd
// cgroup driver with a containerd that places containers through systemd
// (SystemdCgroup), and graceful node shutdown announced by logind.
package systemd

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testbed"
)

var (
	bed       *testbed.Systemd
	cd        *testbed.Containerd
	tmpMarker string
)

func TestMain(m *testing.M) {
	// The bed shares /tmp: a file there must outlive its boot.
	marker, err := os.CreateTemp("", "nodelet-systemd-marker-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	marker.Close()
	tmpMarker = marker.Name()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	bed, err = testbed.StartSystemd(ctx)
	if err == nil {
		if _, err = testbed.NodeletBinary(); err == nil {
			cd, err = testbed.StartContainerdWith(ctx, 0, testbed.ContainerdOptions{Systemd: bed})
		}
	}
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "systemd test bed:", err)
		if bed != nil {
			_ = bed.Stop() // reported above
		}
		os.Exit(1)
	}
	code := m.Run()
	os.Remove(tmpMarker)
	if err := cd.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping containerd:", err)
		code = max(code, 1)
	}
	if err := bed.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the systemd test bed:", err)
		if code == 0 {
			code = 1
		}
	}
	testbed.RemoveBuilt()
	os.Exit(code)
}
