package podsync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/nodelet/nodelet/pkg/pods/podworkers"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// hookLog is the hooks' calls; the preparers run beside the sandbox's
// creation, so beside the pre-runners too.
type hookLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *hookLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, s)
}

// stage lists, in order, the calls of one stage.
func (l *hookLog) stage(stage string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, c := range l.calls {
		if strings.Contains(c, " "+stage+" ") {
			out = append(out, c)
		}
	}
	return strings.Join(out, "; ")
}

// recordingHook takes part in every stage and logs each call.
type recordingHook struct {
	name string
	log  *hookLog
}

func (h recordingHook) Name() string { return h.name }
func (h recordingHook) note(stage string, pod *v1.Pod) {
	h.log.add(fmt.Sprintf("%s %s %s", h.name, stage, pod.Name))
}
func (h recordingHook) Register(pod *v1.Pod) { h.note("register", pod) }
func (h recordingHook) Prepare(_ context.Context, pod *v1.Pod) error {
	h.note("prepare", pod)
	return nil
}
func (h recordingHook) PreRun(_ context.Context, pod *v1.Pod, _ bool) error {
	h.note("prerun", pod)
	return nil
}
func (h recordingHook) PostStop(_ context.Context, pod *v1.Pod) error {
	h.note("poststop", pod)
	return nil
}
func (h recordingHook) Cleanup(_ context.Context, pod *v1.Pod) error {
	h.note("cleanup", pod)
	return nil
}

// registerOnly takes part in one stage only.
type registerOnly struct {
	name string
	log  *hookLog
}

func (h registerOnly) Name() string         { return h.name }
func (h registerOnly) Register(pod *v1.Pod) { h.log.add(h.name + " register " + pod.Name) }

// A pod's life runs each hook at the stages it takes part in, in the
// root's order; a hook is never called at a stage it does not implement.
func TestHooksRunAtTheirStagesInOrder(t *testing.T) {
	s, _, rt := newSyncer(t, nil)
	log := &hookLog{}
	s.hooks = splitHooks([]Hook{recordingHook{"first", log}, recordingHook{"second", log}, registerOnly{"watches", log}})
	pod := apiPod("a", "a", now)
	if _, err := s.SyncPod(context.Background(), podworkers.UpdateCreate, pod, nil, &container.PodStatus{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if n, c := rt.Counts(); n != 1 || c != 1 {
		t.Fatalf("sandboxes %d containers %d, want 1 and 1", n, c)
	}
	rs, err := s.runtime.GetPodStatus(context.Background(), pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SyncTerminatingPod(context.Background(), pod, rs, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.SyncTerminatedPod(context.Background(), pod, rs); err != nil {
		t.Fatal(err)
	}
	for stage, want := range map[string]string{
		"register": "first register a; second register a; watches register a",
		"prepare":  "first prepare a; second prepare a",
		"prerun":   "first prerun a; second prerun a",
		"poststop": "first poststop a; second poststop a",
		"cleanup":  "first cleanup a; second cleanup a",
	} {
		if got := log.stage(stage); got != want {
			t.Errorf("%s: %q, want %q", stage, got, want)
		}
	}
	// Registration comes first; the stop's stages come last, in order.
	if got := strings.Join(log.calls[:3], "; "); got != log.stage("register") {
		t.Errorf("the first calls %q, want the registrations", got)
	}
	if got, want := strings.Join(log.calls[len(log.calls)-4:], "; "), log.stage("poststop")+"; "+log.stage("cleanup"); got != want {
		t.Errorf("the last calls %q, want %q", got, want)
	}
}

type failingClaims struct{}

func (failingClaims) Prepare(context.Context, *v1.Pod, bool) error { return errors.New("driver gone") }
func (failingClaims) Unprepare(context.Context, *v1.Pod) error     { return nil }

// A hook's failure carries upstream's event: the claims that cannot be
// prepared fail the sync with FailedPrepareDynamicResources, and the
// runtime is never asked to start the pod.
func TestHookFailureIsThePodsEvent(t *testing.T) {
	s, _, rt := newSyncer(t, nil)
	rec := record.NewFakeRecorder(10)
	s.recorder = rec
	s.hooks = splitHooks([]Hook{ClaimsHook(failingClaims{})})
	_, err := s.SyncPod(context.Background(), podworkers.UpdateCreate, apiPod("a", "a", now), nil, &container.PodStatus{ID: "a"})
	if err == nil || !strings.Contains(err.Error(), "failed to prepare dynamic resources: driver gone") {
		t.Fatalf("sync error %v", err)
	}
	if e := receive(t, "the event", rec.Events); e != "Warning FailedPrepareDynamicResources Failed to prepare dynamic resources: driver gone" {
		t.Fatalf("event %q", e)
	}
	if n, c := rt.Counts(); n != 0 || c != 0 {
		t.Fatalf("sandboxes %d containers %d started despite the failure", n, c)
	}
}
