package logs

import (
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/fakecri"
)

type fixture struct {
	rt    *fakecri.Runtime
	clock *clocktesting.FakeClock
	r     *Rotator
	dir   string
	path  string
	id    string
}

func newFixture(t *testing.T, maxFiles int) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{clock: clocktesting.NewFakeClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)), dir: t.TempDir()}
	f.rt = fakecri.New(f.clock, "busybox")
	sb, err := f.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "default", Uid: "u"}, LogDirectory: f.dir,
	}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, Image: &runtimeapi.ImageSpec{Image: "busybox"}, LogPath: "app/0.log",
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
		t.Fatal(err)
	}
	f.id, f.path = c.ContainerId, filepath.Join(f.dir, "app", "0.log")
	if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
		t.Fatal(err)
	}
	f.r = NewRotator(f.rt, Policy{MaxSize: 100, MaxFiles: maxFiles, Workers: 2, Interval: time.Second}, f.clock, time.Second)
	return f
}

// write appends n bytes to the current log, as the runtime would.
func (f *fixture) write(t *testing.T, n int, b byte) {
	t.Helper()
	fh, err := os.OpenFile(f.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.Write([]byte(strings.Repeat(string(b), n))); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) files(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Dir(f.path))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

func gunzip(t *testing.T, path string) string {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	zr, err := gzip.NewReader(fh)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRotateKeepsMaxFiles(t *testing.T) {
	f := newFixture(t, 3)
	ctx := context.Background()

	f.write(t, 50, 'a')
	if err := f.r.RotateAll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.files(t); len(got) != 1 {
		t.Fatalf("a small log was rotated: %v", got)
	}

	// Four rounds over the limit, a second apart, each with its own byte.
	for _, b := range []byte("bcde") {
		f.write(t, 100, b)
		f.clock.Step(time.Second)
		if err := f.r.RotateAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := f.files(t)
	want := []string{"0.log", "0.log.20261122-100003.gz", "0.log.20261122-100004"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("files %v, want %v", got, want)
	}
	// The reopened log is empty; the newest rotation is plain, the one
	// before it compressed, the oldest gone.
	if fi, _ := os.Stat(f.path); fi.Size() != 0 {
		t.Errorf("current log has %d bytes after reopening", fi.Size())
	}
	if b, _ := os.ReadFile(filepath.Join(filepath.Dir(f.path), want[2])); string(b) != strings.Repeat("e", 100) {
		t.Errorf("newest rotated log %q", b)
	}
	if s := gunzip(t, filepath.Join(filepath.Dir(f.path), want[1])); s != strings.Repeat("d", 100) {
		t.Errorf("compressed rotated log %q", s)
	}
}

func TestRotateRenamesBackWhenReopenFails(t *testing.T) {
	f := newFixture(t, 5)
	f.write(t, 200, 'x')
	f.rt.FailNext("ReopenContainerLog", errors.New("runtime busy"))
	if err := f.r.RotateAll(context.Background()); err == nil || !strings.Contains(err.Error(), "runtime busy") {
		t.Fatalf("error %v", err)
	}
	if got := f.files(t); len(got) != 1 || got[0] != "0.log" {
		t.Fatalf("files %v: the log must keep its name when the runtime cannot reopen it", got)
	}
}

func TestRotateSkipsExitedContainersAndCleansTemporaries(t *testing.T) {
	f := newFixture(t, 5)
	f.write(t, 200, 'x')
	if err := os.WriteFile(f.path+".20261122-090000.gz.tmp", []byte("half"), 0o640); err != nil {
		t.Fatal(err)
	}
	f.rt.Exit(f.id, 0)
	if err := f.r.RotateAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.files(t); len(got) != 2 {
		t.Fatalf("an exited container's log was touched: %v", got)
	}
	if err := RemoveRotated(f.path); err != nil {
		t.Fatal(err)
	}
	if got := f.files(t); len(got) != 1 || got[0] != "0.log" {
		t.Fatalf("RemoveRotated left %v", got)
	}
}

// TestRotateAsksForALogPathOnce: a running container's log path is asked
// of the runtime once, not every round; the rounds after still rotate
// it, and a container gone from the running list is forgotten.
func TestRotateAsksForALogPathOnce(t *testing.T) {
	f := newFixture(t, 5)
	ctx := context.Background()
	statusCalls := func() int {
		n := 0
		for _, c := range f.rt.Calls() {
			if strings.HasPrefix(c, "ContainerStatus ") {
				n++
			}
		}
		return n
	}
	f.rt.ResetCalls()
	for round := range 3 {
		f.write(t, 200, 'a'+byte(round))
		if err := f.r.RotateAll(ctx); err != nil {
			t.Fatal(err)
		}
		f.clock.Step(time.Second)
	}
	if n := statusCalls(); n != 1 {
		t.Fatalf("%d ContainerStatus calls over 3 rounds, want 1", n)
	}
	if got := f.files(t); len(got) != 4 {
		t.Fatalf("files after 3 rotations: %v, want the current log and 3 rotated", got)
	}
	f.rt.Exit(f.id, 0)
	if err := f.r.RotateAll(ctx); err != nil {
		t.Fatal(err)
	}
	if len(f.r.paths) != 0 {
		t.Fatalf("the exited container's path is still kept: %v", f.r.paths)
	}
}
