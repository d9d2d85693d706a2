//go:build integration

package systemd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBedIsSystemdAndLeavesTheHostAlone: logind answers on the bed's
// system bus, systemd is PID 1 in its namespace, and a file in the shared
// /tmp outlived its boot (nothing cleaned /tmp).
func TestBedIsSystemdAndLeavesTheHostAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := bed.Command(ctx, "busctl", "get-property", "org.freedesktop.login1", "/org/freedesktop/login1",
		"org.freedesktop.login1.Manager", "InhibitDelayMaxUSec").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "t ") {
		t.Fatalf("logind: %v %s", err, out)
	}
	comm, err := bed.Command(ctx, "cat", "/proc/1/comm").Output()
	if err != nil || strings.TrimSpace(string(comm)) != "systemd" {
		t.Fatalf("PID 1 in the bed is %q (%v)", comm, err)
	}
	units, err := bed.Systemctl(ctx, "list-units", "--no-legend", "--state=active")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"tmpfiles", "sysctl", "getty", "remount"} {
		if strings.Contains(units, bad) {
			t.Errorf("the bed ran a %s unit:\n%s", bad, units)
		}
	}
	if _, err := os.Stat(tmpMarker); err != nil {
		t.Fatalf("a file in the shared /tmp did not outlive the boot: %v", err)
	}
	if private, _ := filepath.Glob("/tmp/systemd-private-*"); len(private) > 0 {
		t.Errorf("the bed's units use PrivateTmp in the shared /tmp: %v", private)
	}
}
