package kuberuntime

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/fakecri"
)

// A started container's log is linked as <pod>_<namespace>_<container>-
// <id>.log, upstream's name (node e2e: "ContainerLogPath should print log
// to correct log path"); a name too long for a file is cut.
func TestLegacyLogLinkNames(t *testing.T) {
	d := legacyLogs("/var/log/containers")
	if got := d.path("log-pod-1", "ns", "log-container", "abc123"); got != "/var/log/containers/log-pod-1_ns_log-container-abc123.log" {
		t.Errorf("link %s", got)
	}
	long := d.path(strings.Repeat("p", 253), "ns", "c", "abc")
	if n := len(filepath.Base(long)); n != 255 || !strings.HasSuffix(long, ".log") {
		t.Errorf("long name %d characters: %s", n, filepath.Base(long))
	}
}

// Links are made only to logs that exist, removed with their container,
// and swept when they dangle, unless the container still runs (its log
// is being rotated).
func TestLegacyLogLinksLifecycle(t *testing.T) {
	dir, logs := t.TempDir(), t.TempDir()
	d := legacyLogs(dir)
	target := filepath.Join(logs, "0.log")
	if err := os.WriteFile(target, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.link(target, "p", "ns", "c", "id1")
	if b, err := os.ReadFile(d.path("p", "ns", "c", "id1")); err != nil || string(b) != "hello\n" {
		t.Fatalf("reading through the link: %q %v", b, err)
	}
	d.link(filepath.Join(logs, "missing.log"), "p", "ns", "c", "id2")
	if _, err := os.Lstat(d.path("p", "ns", "c", "id2")); !os.IsNotExist(err) {
		t.Fatalf("a link made to a log that does not exist (%v)", err)
	}
	st := &runtimeapi.ContainerStatus{Id: "id1", Labels: map[string]string{labelPodName: "p", labelPodNamespace: "ns", LabelContainerName: "c"}}
	if err := d.unlink(st); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(d.path("p", "ns", "c", "id1")); !os.IsNotExist(err) {
		t.Fatalf("link left after its container's removal (%v)", err)
	}

	// The sweep: a dangling link of a running container stays, one of
	// an exited or unknown container goes, a live link stays.
	rt := fakecri.New(testingclock.NewFakeClock(time.Unix(1000, 0)), "img")
	ctx := context.Background()
	sb, _ := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u"}}})
	var ids []string
	for _, name := range []string{"running", "exited"} {
		c, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId,
			Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: name}, Image: &runtimeapi.ImageSpec{Image: "img"}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ContainerId)
	}
	rt.Exit(ids[1], 0)
	gone := filepath.Join(logs, "gone.log")
	for _, l := range []struct{ target, name string }{{gone, ids[0]}, {gone, ids[1]}, {gone, "unknown"}, {target, "live"}} {
		if err := os.Symlink(l.target, d.path("p", "ns", "c", l.name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.sweep(ctx, rt); err != nil {
		t.Fatal(err)
	}
	for name, kept := range map[string]bool{ids[0]: true, ids[1]: false, "unknown": false, "live": true} {
		_, err := os.Lstat(d.path("p", "ns", "c", name))
		if kept != (err == nil) {
			t.Errorf("link of %s: kept=%v, want %v", name, err == nil, kept)
		}
	}
}
