package kuberuntime

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/fakecri"
	"github.com/nodelet/nodelet/pkg/runtime/images"
	"github.com/nodelet/nodelet/pkg/runtime/runtimeclass"
)

// A pod's sandbox runs with the handler its RuntimeClass names, which
// need not be the class's name; a class the node does not know fails
// the sandbox with upstream's error and event, and nothing is run with
// the default handler instead.
func TestSandboxRunsWithTheClassesHandler(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	rt := fakecri.New(clk, "img")
	rec := record.NewFakeRecorder(100)
	classes := runtimeclass.Static([]*nodev1.RuntimeClass{{ObjectMeta: metav1.ObjectMeta{Name: "fast"}, Handler: "crun"}})
	m := New(Options{Runtime: rt, Images: images.NewPuller(images.PullerOptions{Images: rt, Recorder: rec, Clock: clk}),
		Helper: testHelper{t.TempDir()}, Recorder: rec, Clock: clk, RuntimeName: "fake", PodLogsDir: t.TempDir(), RuntimeClasses: classes})
	f := &fixture{m: m, rt: rt, clock: clk, recorder: rec}

	fast := newPod(v1.RestartPolicyAlways, "app").pod
	fast.Spec.RuntimeClassName = ptr.To("fast")
	if err := f.sync(t, fast).Error(); err != nil {
		t.Fatal(err)
	}
	if got := rt.SandboxHandlers("p"); len(got) != 1 || got[0] != "crun" {
		t.Fatalf("sandbox handlers %v, want [crun]", got)
	}

	unknown := newPod(v1.RestartPolicyAlways, "app").pod
	unknown.Name, unknown.UID = "q", "uid-q"
	unknown.Spec.RuntimeClassName = ptr.To("nope")
	rt.ResetCalls()
	res := f.sync(t, unknown)
	want := `runtimeclass.node.k8s.io "nope" not found`
	if err := res.Error(); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("sync error %v, want %q", err, want)
	}
	if got := calls(rt, "RunPodSandbox", "CreateContainer"); len(got) != 0 {
		t.Fatalf("a pod of an unknown class made %v", got)
	}
	ev := drain(rec)
	if !strings.Contains(ev, "FailedCreatePodSandBox Failed to create pod sandbox: "+want) {
		t.Fatalf("events %q, want FailedCreatePodSandBox naming the class", ev)
	}
	// No class at all: the runtime's default handler.
	plain := newPod(v1.RestartPolicyAlways, "app").pod
	plain.Name, plain.UID = "r", "uid-r"
	if err := f.sync(t, plain).Error(); err != nil {
		t.Fatal(err)
	}
	if got := rt.SandboxHandlers("r"); len(got) != 1 || got[0] != "" {
		t.Fatalf("sandbox handlers %v, want the default", got)
	}
}
