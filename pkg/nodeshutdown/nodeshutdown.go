// Package nodeshutdown carries out a graceful node shutdown: told the
// node is going down, it marks the node NotReady, refuses new pods, and
// stops the running ones in groups by priority, the lowest first, each
// group within its share of the shutdown grace period. The stopped pods
// end Failed, with upstream's reason and a DisruptionTarget condition.
//
// Upstream learns of a shutdown from logind's inhibitor lock. Nodes
// without systemd have none, so nodelet takes the signal it is given
// (SIGTERM to itself, when a shutdown grace period is configured).
//
// The state only moves forward:
//
//	running ──signal──▶ shutting down ──last group stopped──▶ done
//
// While shutting down, Err reports it (the node's Ready condition) and
// Admit refuses every pod.
package nodeshutdown

import (
	"context"
	"errors"
	"os"
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

	"github.com/nodelet/nodelet/pkg/podutil"
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
	// Signal announces the shutdown.
	Signal <-chan os.Signal
	Pods   ActivePods
	Killer Killer
	// OnStart runs as the shutdown begins, once the node is marked as
	// shutting down (to publish NotReady at once); OnDone after the last
	// group, with the time left of the whole grace period, and at least
	// a moment (to write the stopped pods' statuses).
	OnStart []func(ctx context.Context)
	OnDone  []func(ctx context.Context)

	NodeName string
	Recorder record.EventRecorder
	Clock    clock.Clock
}

// minDoneTime is the least time OnDone gets, however long the pods took.
const minDoneTime = 2 * time.Second

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
func (s *State) Admit(*v1.Pod) (ok bool, reason, message string) {
	if s.shuttingDown.Load() {
		return false, NotAdmittedReason, NotAdmittedMessage
	}
	return true, "", ""
}

// Manager waits for the shutdown signal, then shuts the node down.
type Manager struct{ o Options }

// New returns a manager; nothing happens before Run.
func New(o Options) *Manager { return &Manager{o: o} }

// Run waits for the signal, then shuts the node down and returns: the
// caller stops nodelet. It returns early, with the pods as they are, if
// ctx ends.
func (m *Manager) Run(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case sig := <-m.o.Signal:
		klog.InfoS("Shutdown signal received: stopping every pod by priority", "signal", sig, "groups", m.o.Groups)
	}
	start := m.o.Clock.Now()
	m.o.State.shuttingDown.Store(true)
	node := &v1.ObjectReference{Kind: "Node", Name: m.o.NodeName, UID: types.UID(m.o.NodeName), APIVersion: "v1"}
	m.o.Recorder.Event(node, v1.EventTypeNormal, eventReason, "Shutdown manager detected shutdown event")
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
