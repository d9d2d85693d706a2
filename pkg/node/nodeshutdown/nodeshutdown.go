// Package nodeshutdown carries out a graceful node shutdown: told the
// node is going down, it marks the node NotReady, refuses new pods, and
// stops the running ones in groups by priority, the lowest first, each
// group within its share of the shutdown grace period. The stopped pods
// end Failed, with upstream's reason and a DisruptionTarget condition.
//
// As the kubelet does, nodelet learns of a shutdown from systemd-logind:
// it holds a delay inhibitor lock, so logind waits (up to
// InhibitDelayMaxSec, which nodelet raises to the grace period) before
// shutting down, and announces the shutdown with PrepareForShutdown.
// Signals only stop nodelet; pods keep running. Without logind there is
// no graceful shutdown: nodelet says so and keeps trying to reach it.
//
// The states, per connection to logind:
//
//	           ┌─────────── PrepareForShutdown(false): lock taken again ───────────┐
//	           ▼                                                                    │
//	running (lock held) ──PrepareForShutdown(true)──▶ shutting down ──groups stopped─▶ shut down (lock released)
//
// While shutting down or shut down, Err reports it (the node's Ready
// condition) and Admit refuses every pod. A lost connection is made
// again; the state stays.
package nodeshutdown

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/pods/admission"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// Upstream's words, which tools and users match on.
const (
	// Reason and Message are a stopped pod's status.
	Reason  = "Terminated"
	Message = "Pod was terminated in response to imminent node shutdown."
	// NotAdmittedReason and NotAdmittedMessage refuse a pod while the
	// node shuts down.
	NotAdmittedReason  = "NodeShutdown"
	NotAdmittedMessage = "Pod was rejected as the node is shutting down."
	// eventReason is the node event's.
	eventReason = "NodeShutdown"
)

// Priorities of upstream's two groups when only shutdownGracePeriod and
// shutdownGracePeriodCriticalPods are set.
const (
	defaultPriority = 0
)

// ErrShuttingDown is what Err reports while the node shuts down.
var ErrShuttingDown = errors.New("node is shutting down")

// Group is the pods of priority at least Priority (and below the next
// group's), and the time they get to stop.
type Group struct {
	Priority int32
	Period   time.Duration
}

// Groups turns the configuration into groups, lowest priority first:
// shutdownGracePeriodByPodPriority as it is, or else two groups, the
// critical pods getting shutdownGracePeriodCriticalPods and the others
// the rest of shutdownGracePeriod. None means graceful shutdown is off.
func Groups(c *kubeletv1beta1.KubeletConfiguration) []Group {
	var out []Group
	for _, g := range c.ShutdownGracePeriodByPodPriority {
		out = append(out, Group{Priority: g.Priority, Period: time.Duration(g.ShutdownGracePeriodSeconds) * time.Second})
	}
	total, critical := c.ShutdownGracePeriod.Duration, c.ShutdownGracePeriodCriticalPods.Duration
	if len(out) == 0 && total > 0 && critical <= total {
		out = []Group{
			{Priority: defaultPriority, Period: (total - critical).Truncate(time.Second)},
			{Priority: podutil.SystemCriticalPriority, Period: critical.Truncate(time.Second)},
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Priority < out[j].Priority })
	return out
}

// ActivePods lists the pods that may still run.
type ActivePods interface {
	ActivePods() []*v1.Pod
}

// Killer stops a pod within gracePeriod seconds, amending its final
// status with status; the channel closes once its containers are stopped.
type Killer interface {
	KillPod(pod *v1.Pod, gracePeriod int64, status func(*v1.PodStatus)) <-chan struct{}
}

// Options configure a Manager.
type Options struct {
	// Groups are from Groups; there is at least one.
	Groups []Group
	// State is set as the shutdown begins.
	State *State
	// Logind announces the shutdown and waits for nodelet.
	Logind Logind
	Pods   ActivePods
	// PodsKnown says whether every pod source has delivered and its pods
	// were admitted: a shutdown announced sooner (nodelet just started)
	// waits for that, up to podsKnownWait, so no pod escapes its group.
	// nil: always.
	PodsKnown func() bool
	Killer    Killer
	// OnStart runs as the shutdown begins, once the node is marked as
	// shutting down (to publish NotReady at once); OnDone after the last
	// group, with the time left of the whole grace period, and at least
	// a moment (to write the stopped pods' statuses).
	OnStart []func(ctx context.Context)
	OnDone  []func(ctx context.Context)

	NodeName string
	Recorder record.EventRecorder
	Clock    clock.Clock
	// RetryPeriod is how long nodelet waits before reaching logind again
	// (default 30 s).
	RetryPeriod time.Duration
}

// Logind is systemd-logind, as nodeshutdown talks to it.
type Logind interface {
	Connect(ctx context.Context) (Session, error)
}

// Session is one connection to logind.
type Session interface {
	// InhibitDelayMax is how long logind waits for a delay lock.
	InhibitDelayMax() (time.Duration, error)
	// RaiseInhibitDelayMax configures logind to wait at least d, and
	// has it read its configuration again.
	RaiseInhibitDelayMax(d time.Duration) error
	// Inhibit takes a delay lock on shutdown; release gives it back.
	Inhibit() (release func() error, err error)
	// Shutdowns delivers PrepareForShutdown: true as a shutdown begins,
	// false when one is called off. It closes when the connection ends.
	Shutdowns() <-chan bool
	Close() error
}

// minDoneTime is the least time OnDone gets, however long the pods took.
const minDoneTime = 2 * time.Second

// podsKnownWait bounds how long a shutdown waits for the pod sources (an
// API server that does not answer never delivers).
const podsKnownWait = 5 * time.Second

// State is whether the node is shutting down: the node's Ready condition
// and admission read it, the Manager sets it.
type State struct{ shuttingDown atomic.Bool }

// Err is ErrShuttingDown once the shutdown began, else nil.
func (s *State) Err() error {
	if s.shuttingDown.Load() {
		return ErrShuttingDown
	}
	return nil
}

// Admit refuses every pod while the node shuts down.
func (s *State) Admit(admission.Attributes) admission.Verdict {
	if s.shuttingDown.Load() {
		return admission.Reject(NotAdmittedReason, NotAdmittedMessage)
	}
	return admission.Verdict{}
}

// Manager waits for logind to announce a shutdown, then shuts the node
// down.
type Manager struct{ o Options }

// New returns a manager; nothing happens before Run.
func New(o Options) *Manager {
	if o.RetryPeriod <= 0 {
		o.RetryPeriod = 30 * time.Second
	}
	return &Manager{o: o}
}

// Run talks to logind until ctx ends, reconnecting when the connection is
// lost. It never stops nodelet: after a shutdown the node stays NotReady
// until the system stops nodelet, or the shutdown is called off.
func (m *Manager) Run(ctx context.Context) {
	quiet := false
	for {
		err := m.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if !quiet {
			klog.ErrorS(err, "No graceful node shutdown while systemd-logind cannot be used; trying again", "retryPeriod", m.o.RetryPeriod)
		} else {
			klog.V(2).InfoS("systemd-logind still cannot be used", "err", err)
		}
		quiet = true
		select {
		case <-ctx.Done():
			return
		case <-m.o.Clock.After(m.o.RetryPeriod):
		}
	}
}

// session takes the delay lock on one connection and follows logind's
// announcements until ctx ends (nil) or the connection fails.
func (m *Manager) session(ctx context.Context) error {
	s, err := m.o.Logind.Connect(ctx)
	if err != nil {
		return fmt.Errorf("connecting to systemd-logind: %w", err)
	}
	defer s.Close()
	if err := m.ensureDelay(s); err != nil {
		return err
	}
	var release func() error
	defer func() {
		if release != nil {
			_ = release() // the connection goes, and the lock with it
		}
	}()
	if !m.o.State.shuttingDown.Load() {
		if release, err = s.Inhibit(); err != nil {
			return fmt.Errorf("taking logind's delay lock on shutdown: %w", err)
		}
		klog.InfoS("Graceful node shutdown armed: holding logind's delay lock", "gracePeriod", m.total())
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case down, ok := <-s.Shutdowns():
			if !ok {
				return errors.New("the connection to systemd-logind ended")
			}
			switch {
			case down && !m.o.State.shuttingDown.Load():
				m.shutdown(ctx)
				if release != nil {
					err = release()
					release = nil
				}
				klog.InfoS("Released logind's delay lock: the shutdown goes on", "err", err)
			case !down && m.o.State.shuttingDown.Load():
				if release, err = m.cancelled(s); err != nil {
					return err
				}
			}
		}
	}
}

// ensureDelay makes logind wait at least the whole grace period for the
// lock, as the kubelet does: its default (5 s) is raised with a drop-in.
func (m *Manager) ensureDelay(s Session) error {
	want := m.total()
	got, err := s.InhibitDelayMax()
	if err != nil || got >= want {
		return err
	}
	klog.InfoS("Raising logind's InhibitDelayMaxSec to the shutdown grace period", "from", got, "to", want)
	if err := s.RaiseInhibitDelayMax(want); err != nil {
		return err
	}
	// logind reads its configuration again after the call returns.
	for range 20 {
		if got, err = s.InhibitDelayMax(); err != nil || got >= want {
			return err
		}
		<-m.o.Clock.After(100 * time.Millisecond)
	}
	return fmt.Errorf("logind's InhibitDelayMaxSec is %v after raising it to the shutdown grace period %v", got, want)
}

// cancelled takes the node back when a shutdown is called off: Ready
// again, pods admitted, the lock held again.
func (m *Manager) cancelled(s Session) (func() error, error) {
	m.o.State.shuttingDown.Store(false)
	klog.InfoS("The node shutdown was called off")
	m.o.Recorder.Event(m.nodeRef(), v1.EventTypeNormal, eventReason, "Shutdown manager detected shutdown cancellation")
	release, err := s.Inhibit()
	if err != nil {
		return nil, fmt.Errorf("taking logind's delay lock again: %w", err)
	}
	return release, nil
}

func (m *Manager) nodeRef() *v1.ObjectReference {
	return &v1.ObjectReference{Kind: "Node", Name: m.o.NodeName, UID: types.UID(m.o.NodeName), APIVersion: "v1"}
}

// shutdown stops every pod by priority group, then runs OnDone.
func (m *Manager) shutdown(ctx context.Context) {
	klog.InfoS("Node shutdown announced: stopping every pod by priority", "groups", m.o.Groups)
	start := m.o.Clock.Now()
	m.waitForPods(ctx)
	m.o.State.shuttingDown.Store(true)
	m.o.Recorder.Event(m.nodeRef(), v1.EventTypeNormal, eventReason, "Shutdown manager detected shutdown event")
	for _, hook := range m.o.OnStart {
		hook(ctx)
	}
	for _, g := range groupPods(m.o.Groups, m.o.Pods.ActivePods()) {
		if ctx.Err() != nil {
			return
		}
		m.stopGroup(ctx, g)
	}
	left := m.total() - m.o.Clock.Since(start)
	doneCtx, cancel := context.WithTimeout(ctx, max(left, minDoneTime))
	defer cancel()
	for _, hook := range m.o.OnDone {
		hook(doneCtx)
	}
	klog.InfoS("Node shutdown complete", "took", m.o.Clock.Since(start))
}

// waitForPods waits, briefly, until the pods nodelet runs are all known:
// before that, a pod not yet admitted would be refused as the node shuts
// down and stopped at once, outside its group.
func (m *Manager) waitForPods(ctx context.Context) {
	if m.o.PodsKnown == nil || m.o.PodsKnown() {
		return
	}
	klog.InfoS("Waiting for the pod sources before stopping pods", "atMost", podsKnownWait)
	deadline := m.o.Clock.Now().Add(podsKnownWait)
	for !m.o.PodsKnown() && m.o.Clock.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-m.o.Clock.After(50 * time.Millisecond):
		}
	}
}

func (m *Manager) total() time.Duration {
	var sum time.Duration
	for _, g := range m.o.Groups {
		sum += g.Period
	}
	return sum
}

type podGroup struct {
	Group
	pods []*v1.Pod
}

// groupPods puts each pod in the group of the highest priority not above
// its own; a pod below every group goes in the lowest.
func groupPods(groups []Group, pods []*v1.Pod) []podGroup {
	out := make([]podGroup, len(groups))
	for i, g := range groups {
		out[i].Group = g
	}
	for _, p := range pods {
		var prio int32
		if p.Spec.Priority != nil {
			prio = *p.Spec.Priority
		}
		i := sort.Search(len(out), func(i int) bool { return out[i].Priority > prio }) - 1
		out[max(i, 0)].pods = append(out[max(i, 0)].pods, p)
	}
	return out
}

// stopGroup stops a group's pods at once, each with the group's period or
// its own shorter grace period, and waits until they stopped or the
// period ran out. An empty group takes no time.
func (m *Manager) stopGroup(ctx context.Context, g podGroup) {
	if len(g.pods) == 0 {
		return
	}
	var wg sync.WaitGroup
	for _, pod := range g.pods {
		grace := int64(g.Period / time.Second)
		if tgp := pod.Spec.TerminationGracePeriodSeconds; tgp != nil && *tgp < grace {
			grace = *tgp
		}
		klog.InfoS("Shutdown: stopping pod", "pod", klog.KObj(pod), "podUID", pod.UID, "gracePeriod", grace, "groupPriority", g.Priority)
		done := m.o.Killer.KillPod(pod, grace, markStopped(pod))
		wg.Add(1)
		go func() { defer wg.Done(); <-done }()
	}
	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
	timer := m.o.Clock.NewTimer(g.Period)
	defer timer.Stop()
	select {
	case <-stopped:
		klog.InfoS("Shutdown: group stopped", "priority", g.Priority, "pods", len(g.pods))
	case <-timer.C():
		klog.InfoS("Shutdown: group's period ran out; going on", "priority", g.Priority, "period", g.Period)
	case <-ctx.Done():
	}
}

// markStopped is a stopped pod's final status: Failed (unless it had
// already succeeded) with upstream's reason, and a DisruptionTarget
// condition saying nodelet stopped it.
func markStopped(pod *v1.Pod) func(*v1.PodStatus) {
	return func(s *v1.PodStatus) {
		if s.Phase != v1.PodSucceeded {
			s.Phase = v1.PodFailed
		}
		s.Reason, s.Message = Reason, Message
		podutil.MarkTerminatedByKubelet(s, pod, Message)
	}
}
