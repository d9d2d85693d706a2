package images

import (
	"context"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/fakecri"
)

func newGC(t *testing.T, clk *testingclock.FakeClock, policy GCPolicy, images ...string) (*GC, *fakecri.Runtime) {
	t.Helper()
	rt := fakecri.New(clk, images...)
	rt.SetImageFs(t.TempDir())
	return NewGC(GCOptions{Runtime: rt, Policy: policy, Period: time.Minute, Timeout: time.Minute, Clock: clk}), rt
}

// TestGCRemovesOldUnusedImages: above the high threshold, images older
// than MinAge that no container uses and nobody pinned go; the one in use
// and the pinned one stay.
func TestGCRemovesOldUnusedImages(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	policy := GCPolicy{HighThresholdPercent: 0, LowThresholdPercent: 0, MinAge: time.Minute, Pinned: []string{"registry.k8s.io/pause:3.10"}}
	gc, rt := newGC(t, clk, policy, "img", "unused:1", "old:1", "registry.k8s.io/pause:3.10")
	ctx := context.Background()
	sandbox, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sandbox.PodSandboxId,
		Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: "img"}}}); err != nil {
		t.Fatal(err)
	}
	// Too young to go: the error says so.
	if err := gc.Collect(ctx); err == nil || !strings.Contains(err.Error(), "the rest is in use") {
		t.Fatalf("collecting young images: %v", err)
	}
	if got := strings.Join(rt.Images(), ","); got != "img,old:1,registry.k8s.io/pause:3.10,unused:1" {
		t.Fatalf("removed young images: %s", got)
	}
	clk.Step(2 * time.Minute)
	if err := gc.Collect(ctx); err == nil || !strings.Contains(err.Error(), "the rest is in use") {
		t.Fatalf("collecting down to 0%%: %v", err)
	}
	if got := strings.Join(rt.Images(), ","); got != "img,registry.k8s.io/pause:3.10" {
		t.Fatalf("after GC: %s (want the image in use and the pinned one)", got)
	}
}

// TestGCLeavesImagesBelowTheHighThreshold: nothing goes while the image
// filesystem is below the threshold, however old the images are.
func TestGCLeavesImagesBelowTheHighThreshold(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	gc, rt := newGC(t, clk, GCPolicy{HighThresholdPercent: 100, LowThresholdPercent: 90}, "img", "unused:1")
	if err := gc.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rt.Images(), ","); got != "img,unused:1" {
		t.Fatalf("removed images below the threshold: %s", got)
	}
	// The same images do go above the threshold: only it kept them.
	above := NewGC(GCOptions{Runtime: rt, Policy: GCPolicy{}, Period: time.Minute, Timeout: time.Minute, Clock: clk})
	if err := above.Collect(context.Background()); err == nil {
		t.Fatal("collecting down to 0% succeeded")
	}
	if got := strings.Join(rt.Images(), ","); got != "" {
		t.Fatalf("above the threshold, unused images stayed: %s", got)
	}
}

// Under disk pressure eviction removes every unused image old enough,
// whatever the thresholds say.
func TestDeleteUnusedIgnoresTheThresholds(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	gc, rt := newGC(t, clk, GCPolicy{HighThresholdPercent: 100, LowThresholdPercent: 90, MinAge: time.Minute}, "img", "unused:1")
	if err := gc.DeleteUnused(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rt.Images(), ","); got != "img,unused:1" {
		t.Fatalf("removed images younger than the minimum age: %s", got)
	}
	clk.Step(time.Minute)
	if err := gc.DeleteUnused(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rt.Images(), ","); got != "" {
		t.Fatalf("unused images stayed: %s", got)
	}
}
