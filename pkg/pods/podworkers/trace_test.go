package podworkers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// TestTraces runs the scripts in testdata/: each drives the pod workers
// with a fake clock, a hand-stepped executor and a recording syncer, and
// compares the trace of syncer calls and states with the expected one.
// Run with -rewrite to update the expectations after a deliberate change.
func TestTraces(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := newHarness()
		datadriven.RunTest(t, path, h.handle)
	})
}

// harness is one scripted pod-workers world.
type harness struct {
	clock    *testingclock.FakeClock
	queue    []func()
	pw       *PodWorkers
	wq       *WorkQueue
	trace    []string
	pods     map[string]*v1.Pod
	fail     map[string]error  // "method uid" -> error for the next call
	during   map[string]string // "method uid" -> command to run inside the call
	terminal map[types.UID]bool
	cache    map[types.UID]*container.PodStatus
	waiters  []waiter
}

func newHarness() *harness {
	h := &harness{
		clock: testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		pods:  map[string]*v1.Pod{}, fail: map[string]error{}, during: map[string]string{},
		terminal: map[types.UID]bool{}, cache: map[types.UID]*container.PodStatus{},
	}
	h.wq = NewWorkQueue(h.clock)
	h.pw = New(Options{
		Syncer: h, Status: h, WorkQueue: h.wq, Clock: h.clock,
		ResyncInterval: time.Minute, BackOffPeriod: 10 * time.Second,
		Executor: func(f func()) { h.queue = append(h.queue, f) },
		// No randomness: traces must be exact.
		Jitter:   func(d time.Duration, _ float64) time.Duration { return d },
		Recorder: h,
	})
	return h
}

func (h *harness) handle(t *testing.T, d *datadriven.TestData) string {
	if d.Cmd == "during" {
		// The command to run inside the syncer call is the input block.
		a := argMap(d.CmdArgs)
		h.during[a["method"]+" "+a["uid"]] = strings.TrimSpace(d.Input)
		return ""
	}
	out, err := h.exec(d.Cmd, d.CmdArgs)
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	return out
}

func (h *harness) exec(cmd string, args []datadriven.CmdArg) (string, error) {
	a := argMap(args)
	switch cmd {
	case "pod":
		return "", h.definePod(a)
	case "update":
		return h.update(a)
	case "runtime-pod":
		// An update for a pod known only from the runtime.
		uid := types.UID(a["uid"])
		ut := UpdateKill
		if a["type"] == "sync" {
			ut = UpdateSync
		}
		h.pw.UpdatePod(UpdatePodOptions{UpdateType: ut, RunningPod: &container.Pod{ID: uid, Name: a["uid"], Namespace: "ns"}})
		return h.flush(), nil
	case "run":
		return h.run(), nil
	case "fail":
		err := errors.New(a["error"])
		switch {
		case a["error"] == "network":
			err = fmt.Errorf("%w: cni not initialized", ErrNetworkNotReady)
		case strings.HasPrefix(a["error"], "retry-after-"):
			d, perr := time.ParseDuration(strings.TrimPrefix(a["error"], "retry-after-"))
			if perr != nil {
				return "", perr
			}
			err = &RetryAfterError{Delay: d, Reason: "back-off"}
		}
		h.fail[a["method"]+" "+a["uid"]] = err
		return "", nil
	case "terminal":
		// SyncPod of this pod reports it reached a terminal phase.
		h.terminal[types.UID(a["uid"])] = true
		return "", nil
	case "runtime-terminal":
		// The status cache shows nothing of the pod running.
		h.cache[types.UID(a["uid"])] = &container.PodStatus{ID: types.UID(a["uid"])}
		return "", nil
	case "advance":
		d, err := time.ParseDuration(a["by"])
		if err != nil {
			return "", err
		}
		h.clock.Step(d)
		return "", nil
	case "due":
		uids := h.wq.GetWork()
		sort.Slice(uids, func(i, j int) bool { return uids[i] < uids[j] })
		return fmt.Sprintf("due: %v\n", uids), nil
	case "sync-known":
		return h.syncKnown(a), nil
	case "state":
		return h.state(a["uids"]), nil
	case "mirror-terminating":
		return fmt.Sprintf("%s: %t\n", a["fullname"], h.pw.IsPodForMirrorPodTerminatingByFullName(a["fullname"])), nil
	}
	return "", fmt.Errorf("unknown command %q", cmd)
}

func argMap(args []datadriven.CmdArg) map[string]string {
	m := map[string]string{}
	for _, a := range args {
		m[a.Key] = strings.Join(a.Vals, ",")
		if len(a.Vals) == 0 {
			m[a.Key] = "true"
		}
	}
	return m
}

// definePod declares a pod: pod uid=a [name=web] [static] [grace=30].
func (h *harness) definePod(a map[string]string) error {
	uid := a["uid"]
	p := &v1.Pod{}
	p.UID, p.Namespace, p.Name = types.UID(uid), "ns", uid
	if n, ok := a["name"]; ok {
		p.Name = n
	}
	if _, ok := a["static"]; ok {
		p.Annotations = map[string]string{podutil.ConfigSourceAnnotationKey: podutil.FileSource}
	}
	if g, ok := a["grace"]; ok {
		n, err := strconv.ParseInt(g, 10, 64)
		if err != nil {
			return err
		}
		p.Spec.TerminationGracePeriodSeconds = &n
	}
	h.pods[uid] = p
	return nil
}

// update sends an update: update uid=a type=create [deleted=grace]
// [phase=Succeeded] [kill-grace=5] [evict] [wait].
func (h *harness) update(a map[string]string) (string, error) {
	p, ok := h.pods[a["uid"]]
	if !ok {
		return "", fmt.Errorf("no pod %q", a["uid"])
	}
	p = p.DeepCopy()
	if g, ok := a["deleted"]; ok {
		n, _ := strconv.ParseInt(g, 10, 64)
		now := metav1.NewTime(h.clock.Now())
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, &n
	}
	if ph, ok := a["phase"]; ok {
		p.Status.Phase = v1.PodPhase(ph)
	}
	opts := UpdatePodOptions{Pod: p}
	switch a["type"] {
	case "create":
		opts.UpdateType = UpdateCreate
	case "update":
		opts.UpdateType = UpdateUpdate
	case "sync", "":
		opts.UpdateType = UpdateSync
	case "kill":
		opts.UpdateType = UpdateKill
	default:
		return "", fmt.Errorf("unknown type %q", a["type"])
	}
	var done chan struct{}
	if g, ok := a["kill-grace"]; ok || a["evict"] != "" || a["wait"] != "" || a["status-fn"] != "" {
		opts.KillPodOptions = &KillPodOptions{Evict: a["evict"] == "true"}
		if a["status-fn"] != "" {
			opts.KillPodOptions.PodStatusFunc = func(s *v1.PodStatus) { s.Reason = "Evicted" }
		}
		if ok {
			n, _ := strconv.ParseInt(g, 10, 64)
			opts.KillPodOptions.PodTerminationGracePeriodSecondsOverride = &n
		}
		if a["wait"] != "" {
			done = make(chan struct{})
			opts.KillPodOptions.CompletedCh = done
			h.waiters = append(h.waiters, waiter{uid: a["uid"], ch: done})
		}
	}
	h.pw.UpdatePod(opts)
	return h.flush(), nil
}

type waiter struct {
	uid string
	ch  chan struct{}
}

// run steps the workers until none is scheduled and returns the trace.
func (h *harness) run() string {
	for len(h.queue) > 0 {
		f := h.queue[0]
		h.queue = h.queue[1:]
		f()
	}
	h.checkWaiters()
	return h.flush()
}

func (h *harness) checkWaiters() {
	var left []waiter
	for _, w := range h.waiters {
		select {
		case <-w.ch:
			h.trace = append(h.trace, "kill completed: "+w.uid)
		default:
			left = append(left, w)
		}
	}
	h.waiters = left
}

func (h *harness) flush() string {
	if len(h.trace) == 0 {
		return "ok\n"
	}
	out := strings.Join(h.trace, "\n") + "\n"
	h.trace = nil
	return out
}

func (h *harness) syncKnown(a map[string]string) string {
	var desired []*v1.Pod
	if a["pods"] != "" {
		for _, uid := range strings.Split(a["pods"], ",") {
			desired = append(desired, h.pods[uid])
		}
	}
	known := h.pw.SyncKnownPods(desired)
	uids := make([]string, 0, len(known))
	for uid := range known {
		uids = append(uids, string(uid))
	}
	sort.Strings(uids)
	var b strings.Builder
	for _, uid := range uids {
		k := known[types.UID(uid)]
		fmt.Fprintf(&b, "%s: %s orphan=%t config=%t static=%t\n", uid, k.State, k.Orphan, k.HasConfig, k.Static)
	}
	if len(uids) == 0 {
		b.WriteString("none\n")
	}
	if t := h.flush(); t != "ok\n" {
		b.WriteString(t)
	}
	return b.String()
}

// state prints the queries other components ask, per pod.
func (h *harness) state(uids string) string {
	var b strings.Builder
	for _, u := range strings.Split(uids, ",") {
		uid := types.UID(u)
		state := "unknown"
		h.pw.mu.Lock()
		if s, ok := h.pw.statuses[uid]; ok {
			state = s.WorkType().String()
			if s.IsFinished() {
				state = "finished"
			}
		}
		h.pw.mu.Unlock()
		fmt.Fprintf(&b, "%s: %s knownTerminated=%t couldRun=%t finished=%t terminationRequested=%t containersTerminating=%t runtimeRemovable=%t contentRemovable=%t\n",
			u, state, h.pw.IsPodKnownTerminated(uid), h.pw.CouldHaveRunningContainers(uid), h.pw.ShouldPodBeFinished(uid),
			h.pw.IsPodTerminationRequested(uid), h.pw.ShouldPodContainersBeTerminating(uid),
			h.pw.ShouldPodRuntimeBeRemoved(uid), h.pw.ShouldPodContentBeRemoved(uid))
	}
	return b.String()
}

// The harness is the syncer: it records each call and returns the
// scripted outcome.

func (h *harness) enter(method string, uid types.UID, ctx context.Context) error {
	key := method + " " + string(uid)
	if cmd, ok := h.during[key]; ok {
		delete(h.during, key)
		fields := strings.Fields(cmd)
		var args []datadriven.CmdArg
		for _, f := range fields[1:] {
			k, v, _ := strings.Cut(f, "=")
			arg := datadriven.CmdArg{Key: k}
			if v != "" {
				arg.Vals = []string{v}
			}
			args = append(args, arg)
		}
		saved := append(h.trace, fmt.Sprintf("  (during %s %s: %s)", method, uid, cmd))
		h.trace = nil
		out, err := h.exec(fields[0], args)
		h.trace = saved
		if err != nil {
			return err
		}
		if out = strings.TrimSpace(out); out != "ok" && out != "" {
			h.trace = append(h.trace, out)
		}
		if ctx.Err() != nil {
			h.trace = append(h.trace, fmt.Sprintf("  %s %s cancelled", method, uid))
			return ctx.Err()
		}
	}
	if err, ok := h.fail[key]; ok {
		delete(h.fail, key)
		h.trace = append(h.trace, fmt.Sprintf("  %s %s failed: %v", method, uid, err))
		return err
	}
	return nil
}

func (h *harness) SyncPod(ctx context.Context, ut UpdateType, pod, mirror *v1.Pod, s *container.PodStatus) (bool, error) {
	h.trace = append(h.trace, fmt.Sprintf("SyncPod %s %s", pod.UID, ut))
	if err := h.enter("SyncPod", pod.UID, ctx); err != nil {
		return false, err
	}
	return h.terminal[pod.UID], nil
}

func (h *harness) SyncTerminatingPod(ctx context.Context, pod *v1.Pod, s *container.PodStatus, grace *int64, fn PodStatusFunc) error {
	g := "nil"
	if grace != nil {
		g = strconv.FormatInt(*grace, 10)
	}
	h.trace = append(h.trace, fmt.Sprintf("SyncTerminatingPod %s grace=%s statusFn=%t", pod.UID, g, fn != nil))
	return h.enter("SyncTerminatingPod", pod.UID, ctx)
}

func (h *harness) SyncTerminatingRuntimePod(ctx context.Context, running *container.Pod) error {
	h.trace = append(h.trace, fmt.Sprintf("SyncTerminatingRuntimePod %s", running.ID))
	return h.enter("SyncTerminatingRuntimePod", running.ID, ctx)
}

func (h *harness) SyncTerminatedPod(ctx context.Context, pod *v1.Pod, s *container.PodStatus) error {
	h.trace = append(h.trace, fmt.Sprintf("SyncTerminatedPod %s", pod.UID))
	return h.enter("SyncTerminatedPod", pod.UID, ctx)
}

// The harness is also the status source: statuses are always fresh.

func (h *harness) GetNewerThan(ctx context.Context, uid types.UID, name, ns string, min time.Time) (*container.PodStatus, error) {
	if err, ok := h.fail["GetNewerThan "+string(uid)]; ok {
		delete(h.fail, "GetNewerThan "+string(uid))
		h.trace = append(h.trace, fmt.Sprintf("  GetNewerThan %s failed: %v", uid, err))
		return nil, err
	}
	return h.Get(uid)
}

// Eventf records an event in the trace.
func (h *harness) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...interface{}) {
	h.trace = append(h.trace, fmt.Sprintf("  event %s %s: %s", eventtype, reason, fmt.Sprintf(messageFmt, args...)))
}
func (h *harness) Event(obj runtime.Object, eventtype, reason, message string) {
	h.Eventf(obj, eventtype, reason, "%s", message)
}
func (h *harness) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventtype, reason, messageFmt string, args ...interface{}) {
	h.Eventf(obj, eventtype, reason, messageFmt, args...)
}

func (h *harness) Get(uid types.UID) (*container.PodStatus, error) {
	if s, ok := h.cache[uid]; ok {
		return s, nil
	}
	// Unknown pods look like they still run a container.
	return &container.PodStatus{ID: uid, ContainerStatuses: []*container.Status{{Name: "c", State: container.StateRunning}}}, nil
}
