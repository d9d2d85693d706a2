package dra

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodelet/nodelet/internal/kubeclienttest"
	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/pkg/resources/pluginwatcher"
)

// sharedPod uses the claim "shared" by name, as pods sharing a claim do.
func sharedPod(uid string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "ns", UID: types.UID(uid)}}
	name := "shared"
	p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &name}}
	p.Spec.Containers = []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}}}
	return p
}

// describe is the manager's claims and their states, one per line, and
// the driver calls since the last step.
func describe(m *Manager, d *fakeDriver, seen *int) string {
	var b strings.Builder
	d.mu.Lock()
	calls := slices.Clone(d.calls[*seen:])
	d.mu.Unlock()
	*seen += len(calls)
	if len(calls) == 0 {
		calls = []string{"-"}
	}
	fmt.Fprintf(&b, "  driver: %s\n", strings.TrimSpace(strings.Join(calls, ", ")))
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, key := range slices.Sorted(func(yield func(string) bool) {
		for k := range m.claims {
			if !yield(k) {
				return
			}
		}
	}) {
		info := m.claims[key]
		fmt.Fprintf(&b, "  claim %s: pods %v prepared=%v unpreparing=%v\n", key, sets.List(info.PodUIDs), info.prepared, info.unpreparing)
	}
	if len(m.claims) == 0 {
		b.WriteString("  no claims\n")
	}
	return b.String()
}

// TestClaimLifecycle is the golden trace of a claim two pods share:
// prepared once, kept while either pod uses it, read back after a
// restart, unprepared once neither is active.
func TestClaimLifecycle(t *testing.T) {
	root := shortRoot(t)
	a, b := sharedPod("a"), sharedPod("b")
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: "ns", UID: "claim-shared"}}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: drv, Pool: "n1", Device: "device-00"}}}}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "a", UID: "a"}, {Resource: "pods", Name: "b", UID: "b"}}
	f := newFixture(t, root, claim)
	d := f.register(t, "v1.DRAPlugin")
	ctx := context.Background()
	var trace strings.Builder
	seen := 0
	step := func(what string, err error) {
		t.Helper()
		testutil.Must(t, err)
		fmt.Fprintf(&trace, "%s\n%s", what, describe(f.m, d, &seen))
	}
	step("driver registered", nil)
	step("prepare pod a", f.m.Prepare(ctx, a, false))
	step("prepare pod b: the claim is prepared already", f.m.Prepare(ctx, b, false))
	step("pod a's containers stopped: b still uses the claim", f.m.Unprepare(ctx, a))

	// A restart: the state file gives the claim back; the driver too
	// restarts and registers again.
	f.stop()
	d.srv.Stop()
	d.reg.Stop()
	g, err := New(Options{RootDir: root, NodeName: "n1", Client: kubeclienttest.Wrap(f.client), Clock: f.clock})
	testutil.Must(t, err)
	f.m = g
	w := pluginwatcher.New(pluginwatcher.Options{RootDir: root, Clock: f.clock, Handlers: map[string]pluginwatcher.Handler{registerapi.DRAPlugin: g}})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go w.Run(wctx)
	d = f.register(t, "v1.DRAPlugin")
	seen = 0
	step("restarted: the claim read back", nil)
	step("pod b synced, its sandbox ready: nothing to prepare", g.Prepare(ctx, b, true))
	g.RetainActive(nil)
	step("housekeeping: pod b no longer active", nil)
	g.unprepareOrphans(ctx)
	step("Run: the orphan unprepared", nil)
	testutil.Golden(t, "testdata/claim_lifecycle.txt", trace.String())
}
