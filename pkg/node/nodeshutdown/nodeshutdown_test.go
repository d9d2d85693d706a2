package nodeshutdown

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/pkg/pods/admission"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

func TestGroups(t *testing.T) {
	d := func(s string) metav1.Duration { v, _ := time.ParseDuration(s); return metav1.Duration{Duration: v} }
	for _, tc := range []struct {
		name string
		c    kubeletv1beta1.KubeletConfiguration
		want string
	}{
		{"off", kubeletv1beta1.KubeletConfiguration{}, "[]"},
		{"total only", kubeletv1beta1.KubeletConfiguration{ShutdownGracePeriod: d("30s")}, "[{0 30s} {2000000000 0s}]"},
		{"two phases", kubeletv1beta1.KubeletConfiguration{ShutdownGracePeriod: d("30s"), ShutdownGracePeriodCriticalPods: d("10s")}, "[{0 20s} {2000000000 10s}]"},
		{"critical above total", kubeletv1beta1.KubeletConfiguration{ShutdownGracePeriod: d("5s"), ShutdownGracePeriodCriticalPods: d("10s")}, "[]"},
		{"by priority, sorted", kubeletv1beta1.KubeletConfiguration{ShutdownGracePeriodByPodPriority: []kubeletv1beta1.ShutdownGracePeriodByPodPriority{
			{Priority: 100000, ShutdownGracePeriodSeconds: 5}, {Priority: 0, ShutdownGracePeriodSeconds: 20}, {Priority: 2000000000, ShutdownGracePeriodSeconds: 3},
		}}, "[{0 20s} {100000 5s} {2000000000 3s}]"},
	} {
		if got := fmt.Sprint(Groups(&tc.c)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func pod(name string, priority int32, grace int64) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name), Generation: 3}}
	p.Spec.Priority = &priority
	p.Spec.TerminationGracePeriodSeconds = &grace
	return p
}

// A pod goes to the group of the highest priority not above its own; one
// below every group goes to the lowest.
func TestGroupPods(t *testing.T) {
	groups := []Group{{Priority: 10, Period: time.Second}, {Priority: 100, Period: time.Second}, {Priority: 1000, Period: time.Second}}
	pods := []*v1.Pod{pod("below", 5, 30), pod("at10", 10, 30), pod("mid", 99, 30), pod("at100", 100, 30), pod("top", 5000, 30)}
	noPriority := pod("none", 0, 30)
	noPriority.Spec.Priority = nil
	var got []string
	for _, g := range groupPods(groups, append(pods, noPriority)) {
		var names []string
		for _, p := range g.pods {
			names = append(names, p.Name)
		}
		got = append(got, fmt.Sprintf("%d:%s", g.Priority, strings.Join(names, ",")))
	}
	if s := strings.Join(got, " "); s != "10:below,at10,mid,none 100:at100 1000:top" {
		t.Fatalf("groups %s", s)
	}
}

// fakeKiller records kills; the test closes their channels.
type fakeKiller struct {
	mu     sync.Mutex
	kills  []string
	done   map[string]chan struct{}
	status map[string]func(*v1.PodStatus)
}

func (k *fakeKiller) KillPod(p *v1.Pod, grace int64, status func(*v1.PodStatus)) <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.kills = append(k.kills, fmt.Sprintf("%s/%d", p.Name, grace))
	ch := make(chan struct{})
	k.done[p.Name], k.status[p.Name] = ch, status
	return ch
}

func (k *fakeKiller) killed() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := slices.Clone(k.kills)
	slices.Sort(out)
	return out
}

func (k *fakeKiller) stopped(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	close(k.done[name])
}

type pods []*v1.Pod

func (p pods) ActivePods() []*v1.Pod { return p }

// fakeLogind hands out sessions the test drives; Connect fails while
// down is set.
type fakeLogind struct {
	mu       sync.Mutex
	down     bool
	delay    time.Duration
	sessions chan *fakeSession
}

func (l *fakeLogind) Connect(context.Context) (Session, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return nil, errors.New("no such file or directory")
	}
	s := &fakeSession{logind: l, shutdowns: make(chan bool, 2)}
	l.sessions <- s
	return s, nil
}

// fakeSession counts the locks held and the delays asked for.
type fakeSession struct {
	logind    *fakeLogind
	locks     atomic.Int32
	raised    atomic.Int64
	shutdowns chan bool
}

func (s *fakeSession) InhibitDelayMax() (time.Duration, error) {
	s.logind.mu.Lock()
	defer s.logind.mu.Unlock()
	return s.logind.delay, nil
}

func (s *fakeSession) RaiseInhibitDelayMax(d time.Duration) error {
	s.logind.mu.Lock()
	defer s.logind.mu.Unlock()
	s.raised.Store(int64(d))
	s.logind.delay = d
	return nil
}

func (s *fakeSession) Inhibit() (func() error, error) {
	s.locks.Add(1)
	var once sync.Once
	return func() error { once.Do(func() { s.locks.Add(-1) }); return nil }, nil
}

func (s *fakeSession) Shutdowns() <-chan bool { return s.shutdowns }
func (s *fakeSession) Close() error           { return nil }

type fixture struct {
	m        *Manager
	state    *State
	killer   *fakeKiller
	clock    *testingclock.FakeClock
	recorder *record.FakeRecorder
	logind   *fakeLogind
	session  *fakeSession
	hooks    chan string
	result   chan struct{}
	cancel   context.CancelFunc
}

// start runs a manager whose logind waits 5 s for a lock, and waits until
// it holds its lock.
func start(t *testing.T, groups []Group, active pods) *fixture {
	f := &fixture{
		killer: &fakeKiller{done: map[string]chan struct{}{}, status: map[string]func(*v1.PodStatus){}},
		clock:  testingclock.NewFakeClock(time.Unix(1000, 0)), recorder: record.NewFakeRecorder(10),
		logind: &fakeLogind{delay: 5 * time.Second, sessions: make(chan *fakeSession, 4)},
		hooks:  make(chan string, 4), result: make(chan struct{}), state: &State{},
	}
	f.m = New(Options{
		Groups: groups, State: f.state, Logind: f.logind, Pods: active, Killer: f.killer, NodeName: "node1", Recorder: f.recorder, Clock: f.clock,
		OnStart: []func(context.Context){func(context.Context) { f.hooks <- "start" }},
		OnDone: []func(context.Context){func(ctx context.Context) {
			dl, _ := ctx.Deadline()
			f.hooks <- fmt.Sprintf("done, %v left", time.Until(dl).Round(time.Second)) // contexts keep real time
		}},
	})
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	t.Cleanup(cancel)
	go func() { f.m.Run(ctx); close(f.result) }()
	f.session = <-f.logind.sessions
	testutil.WaitFor(t, "the delay lock", func() bool { return f.session.locks.Load() == 1 })
	return f
}

// The shutdown: NotReady and refusing pods at once, then each group
// stopped in turn, lowest priority first, every pod with the shorter of
// its grace period and its group's; a group waits for its pods or its
// period, whichever ends first.
func TestShutdownStopsGroupsInOrder(t *testing.T) {
	groups := []Group{{Priority: 0, Period: 20 * time.Second}, {Priority: podutil.SystemCriticalPriority, Period: 10 * time.Second}}
	f := start(t, groups, pods{pod("web", 0, 30), pod("batch", 100, 5), pod("dns", podutil.SystemCriticalPriority, 30)})
	if f.state.Err() != nil {
		t.Fatal("shutting down before the signal")
	}
	if v := f.state.Admit(admission.Attributes{Pod: pod("new", 0, 1)}); !v.Admitted() {
		t.Fatal("refused a pod before the signal")
	}
	f.session.shutdowns <- true
	if h := <-f.hooks; h != "start" {
		t.Fatalf("hook %q", h)
	}
	if f.state.Err() != ErrShuttingDown {
		t.Fatalf("Err %v", f.state.Err())
	}
	if v := f.state.Admit(admission.Attributes{Pod: pod("new", 0, 1)}); v != admission.Reject(NotAdmittedReason, NotAdmittedMessage) {
		t.Fatalf("admitted during shutdown: %+v", v)
	}
	if e := <-f.recorder.Events; e != "Normal NodeShutdown Shutdown manager detected shutdown event" {
		t.Fatalf("event %q", e)
	}
	// The regular group, each pod with the shorter grace period.
	testutil.WaitFor(t, "regular pods killed", func() bool { return len(f.killer.killed()) == 2 })
	if got := strings.Join(f.killer.killed(), " "); got != "batch/5 web/20" {
		t.Fatalf("killed %s", got)
	}
	// The critical group waits for the regular pods, which stop early.
	f.killer.stopped("web")
	f.killer.stopped("batch")
	testutil.WaitFor(t, "critical pod killed", func() bool { return len(f.killer.killed()) == 3 })
	f.clock.Step(4 * time.Second)
	// The critical pod does not stop: its group's period ends the wait.
	testutil.WaitFor(t, "the critical group's timer", f.clock.HasWaiters)
	f.clock.Step(10 * time.Second)
	if h := <-f.hooks; h != "done, 16s left" {
		t.Fatalf("hook %q", h)
	}
	testutil.WaitFor(t, "the lock released", func() bool { return f.session.locks.Load() == 0 })
	if got := strings.Join(f.killer.killed(), " "); got != "batch/5 dns/10 web/20" {
		t.Fatalf("killed %s", got)
	}
	// nodelet goes on, NotReady, until the system stops it.
	if f.state.Err() != ErrShuttingDown {
		t.Fatal("ready again after the shutdown")
	}
	f.cancel()
	<-f.result
}

// A regular group whose pods do not stop is waited for its whole period
// only; the status of a pod stopped says why, in upstream's words.
func TestShutdownStatus(t *testing.T) {
	f := start(t, []Group{{Priority: 0, Period: 3 * time.Second}}, pods{pod("web", 0, 30)})
	f.session.shutdowns <- true
	<-f.hooks
	testutil.WaitFor(t, "the group's timer", f.clock.HasWaiters)
	f.clock.Step(3 * time.Second)
	if h := <-f.hooks; h != "done, 2s left" {
		t.Fatalf("hook %q: OnDone gets at least minDoneTime", h)
	}
	s := v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionFalse}}}
	f.killer.status["web"](&s)
	want := v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, ObservedGeneration: 3, Reason: v1.PodReasonTerminationByKubelet, Message: Message}
	if s.Phase != v1.PodFailed || s.Reason != Reason || s.Message != Message || len(s.Conditions) != 2 || s.Conditions[1] != want {
		t.Fatalf("status %+v", s)
	}
	// A pod that had succeeded stays Succeeded; the condition is not doubled.
	s.Phase = v1.PodSucceeded
	f.killer.status["web"](&s)
	if s.Phase != v1.PodSucceeded || len(s.Conditions) != 2 {
		t.Fatalf("status %+v", s)
	}
}

// Ending before an announcement stops nothing, and gives the lock back.
func TestNoAnnouncementNoShutdown(t *testing.T) {
	f := start(t, []Group{{Period: time.Second}}, pods{pod("web", 0, 30)})
	f.cancel()
	<-f.result
	if f.state.Err() != nil || len(f.killer.killed()) != 0 || f.session.locks.Load() != 0 {
		t.Fatalf("Err %v, killed %v, locks %d", f.state.Err(), f.killer.killed(), f.session.locks.Load())
	}
}

// logind's default delay (5 s) is raised to the whole grace period
// before the lock is taken.
func TestInhibitDelayRaised(t *testing.T) {
	f := start(t, []Group{{Priority: 0, Period: 20 * time.Second}, {Priority: 1000, Period: 10 * time.Second}}, nil)
	if got := time.Duration(f.session.raised.Load()); got != 30*time.Second {
		t.Fatalf("raised to %v, want the grace period 30s", got)
	}
}

// A shutdown called off gives the node back: Ready, admitting pods, the
// lock held again.
func TestShutdownCalledOff(t *testing.T) {
	f := start(t, []Group{{Priority: 0, Period: time.Second}}, nil)
	f.session.shutdowns <- true
	<-f.hooks
	<-f.hooks
	testutil.WaitFor(t, "the lock released", func() bool { return f.session.locks.Load() == 0 })
	f.session.shutdowns <- false
	testutil.WaitFor(t, "the lock taken again", func() bool { return f.session.locks.Load() == 1 })
	if f.state.Err() != nil {
		t.Fatalf("still shutting down: %v", f.state.Err())
	}
	<-f.recorder.Events
	if e := <-f.recorder.Events; e != "Normal NodeShutdown Shutdown manager detected shutdown cancellation" {
		t.Fatalf("event %q", e)
	}
}

// Without logind there is no graceful shutdown, and nodelet keeps
// trying: once logind answers the lock is taken; a connection lost is
// made again.
func TestLogindUnreachableThenBack(t *testing.T) {
	l := &fakeLogind{down: true, delay: time.Minute, sessions: make(chan *fakeSession, 4)}
	clk := testingclock.NewFakeClock(time.Now())
	m := New(Options{Groups: []Group{{Period: time.Second}}, State: &State{}, Logind: l, Pods: pods{}, Killer: &fakeKiller{},
		Recorder: record.NewFakeRecorder(4), Clock: clk, RetryPeriod: 10 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	testutil.WaitFor(t, "the retry wait", clk.HasWaiters)
	l.mu.Lock()
	l.down = false
	l.mu.Unlock()
	clk.Step(10 * time.Second)
	s := <-l.sessions
	testutil.WaitFor(t, "the lock", func() bool { return s.locks.Load() == 1 })
	close(s.shutdowns) // the connection ends
	testutil.WaitFor(t, "the retry wait", clk.HasWaiters)
	clk.Step(10 * time.Second)
	s2 := <-l.sessions
	testutil.WaitFor(t, "the lock on the new connection", func() bool { return s2.locks.Load() == 1 })
	cancel()
	<-done
}

// livePods is an ActivePods whose list the test sets.
type livePods struct {
	mu   sync.Mutex
	pods []*v1.Pod
}

func (l *livePods) ActivePods() []*v1.Pod {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.pods)
}

// A shutdown announced before the pod sources delivered (nodelet just
// restarted) waits for them, so each pod is stopped in its group rather
// than refused and stopped outside it; the node is not yet marked as
// shutting down meanwhile.
func TestShutdownWaitsForThePods(t *testing.T) {
	var known atomic.Bool
	live := &livePods{}
	killer := &fakeKiller{done: map[string]chan struct{}{}, status: map[string]func(*v1.PodStatus){}}
	l := &fakeLogind{delay: time.Minute, sessions: make(chan *fakeSession, 1)}
	clk := testingclock.NewFakeClock(time.Now())
	state := &State{}
	m := New(Options{Groups: []Group{{Period: 10 * time.Second}}, State: state, Logind: l, Pods: live, Killer: killer,
		PodsKnown: known.Load, Recorder: record.NewFakeRecorder(4), Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.Run(ctx)
	s := <-l.sessions
	testutil.WaitFor(t, "the lock", func() bool { return s.locks.Load() == 1 })
	s.shutdowns <- true
	testutil.WaitFor(t, "the wait for the sources", clk.HasWaiters)
	clk.Step(time.Second)
	testutil.WaitFor(t, "the wait for the sources", clk.HasWaiters)
	if state.Err() != nil || len(killer.killed()) != 0 {
		t.Fatalf("before the pods were known: Err %v, killed %v", state.Err(), killer.killed())
	}
	live.mu.Lock()
	live.pods = []*v1.Pod{pod("web", 0, 30)}
	live.mu.Unlock()
	known.Store(true)
	clk.Step(time.Second)
	testutil.WaitFor(t, "the pod stopped in its group", func() bool { return len(killer.killed()) == 1 })
	if state.Err() != ErrShuttingDown {
		t.Fatal("not shutting down")
	}
}
