// Package eviction is node-pressure eviction: when memory, disk space,
// inodes or PIDs run below their thresholds, nodelet reclaims what the
// node holds (unused images, dead containers) and then evicts pods, one
// per interval, the ones using most beyond what they asked for first, as
// the upstream kubelet does.
//
// Each interval:
//
//	measure the node (and the pods, if one has a storage limit of its own
//	   │               or a threshold is met: the runtime's dearest call)
//	   ├──pods over their own storage limits──▶ evict them all ──▶ done
//	   │
//	   ├──none met──▶ done (min-reclaim targets forgotten)
//	   │ hard met, or soft met for its grace period
//	   ▼
//	disk signal? ──▶ reclaim images and dead containers ──▶ measure the node ──resolved──▶ done
//	   │ not disk, or not resolved
//	   ▼
//	rank active pods ──▶ evict the first that is not critical ──▶ wait until it stopped
//
// A threshold once met stays met until the signal is back above it by
// evictionMinimumReclaim, so the node does not evict a pod for every
// byte. The node's pressure conditions come from the same measure, every
// interval (Conditions): a threshold met sets its condition at once,
// soft ones before their grace period lets eviction act, and the
// condition stays until the signal recovered for the transition period.
package eviction

import (
	"context"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/infra/periodic"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// Reason is an evicted pod's status reason, as upstream's.
const Reason = "Evicted"

// cleanupTimeout bounds the wait for an evicted pod's resources to be
// released (containers stopped, volumes unmounted) before the next
// interval may evict another; cleanupPoll is how often it is checked
// (upstream's 30 s and 1 s).
const (
	cleanupTimeout = 30 * time.Second
	cleanupPoll    = time.Second
)

// hardGracePeriod is the grace period of a pod evicted for a hard
// threshold: the node cannot wait (upstream's 1 s).
const hardGracePeriod = 1

// Pods are the pods eviction may choose from, and how it stops one.
type Pods interface {
	ActivePods() []*v1.Pod
	// EvictPod stops the pod with the grace period, then sets its final
	// status with status; the pod's content goes once it stopped.
	EvictPod(pod *v1.Pod, gracePeriod int64, status func(*v1.PodStatus)) <-chan struct{}
}

// Stats measures the node, and its pods apart: a pass reads the pods only
// when it must choose one to evict or a pod has a local storage limit of
// its own, since the runtime's stats of every pod are its dearest call.
type Stats interface {
	// NodeSummary measures the node alone; its Pods are empty.
	NodeSummary(ctx context.Context) (*statsapi.Summary, error)
	PodStats(ctx context.Context) ([]statsapi.PodStats, error)
}

// Reclaim frees node-level disk space or inodes (unused images, dead
// containers) before any pod is evicted for them.
type Reclaim struct {
	Name string
	Func func(ctx context.Context) error
}

// Options configure a Manager.
type Options struct {
	Pods Pods
	// PodCleanedUp reports whether an evicted pod's resources are
	// released: until then, its memory and disk still count.
	PodCleanedUp func(types.UID) bool
	Stats        Stats
	// Hard thresholds act at once; Soft ones once crossed for their
	// SoftGracePeriod.
	Hard, Soft      Thresholds
	SoftGracePeriod map[string]time.Duration
	// MinReclaim is how far above its threshold a signal must come back
	// before the threshold counts as resolved.
	MinReclaim Thresholds
	// Conditions are the node's pressure conditions, which the manager
	// keeps from its measures (required).
	Conditions *Conditions
	// MaxPodGracePeriod caps the grace period of a pod evicted for a
	// soft threshold (evictionMaxPodGracePeriod).
	MaxPodGracePeriod int64
	// DiskReclaims run, in order, before a pod is evicted for disk.
	DiskReclaims []Reclaim
	Recorder     record.EventRecorder
	Clock        clock.WithTicker
	Interval     time.Duration
}

// Manager evicts pods when the node runs short.
type Manager struct {
	o Options
	// firstMet is when each soft threshold was first seen crossed.
	firstMet map[string]time.Time
	// active are the signals whose thresholds were met at the last
	// measure: they must recover by the minimum reclaim.
	active map[string]bool
}

// New returns a Manager; it does nothing before Run or Synchronize.
func New(o Options) *Manager {
	if o.Conditions == nil {
		o.Conditions = NewConditions(0, o.Clock)
	}
	return &Manager{o: o, firstMet: map[string]time.Time{}, active: map[string]bool{}}
}

// Run measures and acts every interval until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	periodic.Run(ctx, m.o.Clock, m.o.Interval, true, func(ctx context.Context) {
		if _, err := m.Synchronize(ctx); err != nil {
			klog.ErrorS(err, "Eviction manager: synchronize failed")
		}
	})
}

// Synchronize measures the node once; it evicts pods over their own local
// storage limits, or, if a threshold is met, reclaims or evicts. It
// returns the (first) evicted pod, if any. The pods are measured only
// when one of them has a local storage limit or a threshold is met.
func (m *Manager) Synchronize(ctx context.Context) (*v1.Pod, error) {
	summary, err := m.o.Stats.NodeSummary(ctx)
	if err != nil {
		// No measurement is no news: the conditions keep their state.
		return nil, fmt.Errorf("measuring the node: %w", err)
	}
	readings := Readings(&summary.Node)
	due, crossed := m.due(readings)
	m.o.Conditions.update(crossed)
	limited := slices.DeleteFunc(m.o.Pods.ActivePods(), func(p *v1.Pod) bool { return !hasLocalLimit(p) })
	if len(due) > 0 || len(limited) > 0 {
		if summary.Pods, err = m.o.Stats.PodStats(ctx); err != nil {
			return nil, fmt.Errorf("measuring the pods: %w", err)
		}
	}
	if evicted := m.localStorage(ctx, summary, limited); len(evicted) > 0 {
		return evicted[0], nil
	}
	klog.V(4).InfoS("Eviction manager: measured the node", "memoryAvailable", readings[SignalMemoryAvailable].Available, "thresholdsDue", len(due), "podsMeasured", len(summary.Pods))
	if len(due) == 0 {
		return nil, nil
	}
	th := due[0]
	klog.InfoS("Eviction manager: threshold met", "signal", th.signal, "available", readings[th.signal].Available, "threshold", th.min, "hard", th.hard)
	if resourceOf[th.signal] != v1.ResourceMemory && resourceOf[th.signal] != resourcePIDs && m.reclaimed(ctx, th) {
		return nil, nil
	}
	return m.evict(ctx, th, readings, summary)
}

// threshold is a threshold met, as the manager acts on it.
type threshold struct {
	signal string
	min    uint64
	hard   bool
}

// due returns the thresholds met that eviction must act on, in upstream's
// order (memory first), and every signal crossed (hard or soft, grace
// period or not) with a message, for the pressure conditions; it updates
// what is remembered between measures. A threshold due is always crossed.
func (m *Manager) due(readings map[string]Reading) ([]threshold, map[string]string) {
	now := m.o.Clock.Now()
	var out []threshold
	active := map[string]bool{}
	crossed := map[string]string{}
	for _, signal := range signalOrder {
		r, ok := readings[signal]
		if !ok {
			continue
		}
		reclaim := uint64(0)
		if m.active[signal] {
			reclaim, _ = m.o.MinReclaim.Min(signal, r.Capacity)
		}
		if min, ok := m.o.Hard.Min(signal, r.Capacity); ok && r.Available < min+reclaim {
			active[signal] = true
			crossed[signal] = fmt.Sprintf("%s is %d, below its threshold %d", signal, r.Available, min+reclaim)
			out = append(out, threshold{signal: signal, min: min, hard: true})
			continue
		}
		min, ok := m.o.Soft.Min(signal, r.Capacity)
		if !ok || r.Available >= min+reclaim {
			delete(m.firstMet, signal)
			continue
		}
		active[signal] = true
		crossed[signal] = fmt.Sprintf("%s is %d, below its threshold %d (soft)", signal, r.Available, min+reclaim)
		first, seen := m.firstMet[signal]
		if !seen {
			m.firstMet[signal], first = now, now
		}
		if now.Sub(first) >= m.o.SoftGracePeriod[signal] {
			out = append(out, threshold{signal: signal, min: min})
		}
	}
	m.active = active
	return out, crossed
}

// reclaimed frees node-level disk first and reports whether that was
// enough: the signal back above its threshold and minimum reclaim.
func (m *Manager) reclaimed(ctx context.Context, th threshold) bool {
	if len(m.o.DiskReclaims) == 0 {
		return false
	}
	for _, r := range m.o.DiskReclaims {
		if err := r.Func(ctx); err != nil {
			klog.ErrorS(err, "Eviction manager: reclaiming node resources failed", "reclaim", r.Name, "signal", th.signal)
		}
	}
	summary, err := m.o.Stats.NodeSummary(ctx)
	if err != nil {
		klog.ErrorS(err, "Eviction manager: measuring after reclaim failed")
		return false
	}
	r, ok := Readings(&summary.Node)[th.signal]
	if !ok {
		return false
	}
	reclaim, _ := m.o.MinReclaim.Min(th.signal, r.Capacity)
	if r.Available >= th.min+reclaim {
		klog.InfoS("Eviction manager: node-level reclaim was enough; no pod evicted", "signal", th.signal, "available", r.Available)
		return true
	}
	return false
}

// evict stops the first pod of the ranking that may be evicted, and waits
// until it stopped (or cleanupTimeout passed).
func (m *Manager) evict(ctx context.Context, th threshold, readings map[string]Reading, summary *statsapi.Summary) (*v1.Pod, error) {
	pods := m.o.Pods.ActivePods()
	usage := usageByPod(summary)
	rank(th.signal, pods, usage)
	for _, pod := range pods {
		if podutil.IsCritical(pod) {
			klog.InfoS("Eviction manager: cannot evict a critical pod", "pod", klog.KObj(pod), "podUID", pod.UID)
			continue
		}
		grace := int64(hardGracePeriod)
		if !th.hard {
			grace = m.o.MaxPodGracePeriod
			if tgp := pod.Spec.TerminationGracePeriodSeconds; tgp != nil {
				grace = min(grace, *tgp)
			}
		}
		msg := message(th, readings[th.signal], pod, usage[pod.UID])
		klog.InfoS("Eviction manager: evicting pod", "pod", klog.KObj(pod), "podUID", pod.UID, "signal", th.signal, "gracePeriod", grace, "message", msg)
		m.o.Recorder.Event(pod, v1.EventTypeWarning, Reason, msg)
		m.o.Pods.EvictPod(pod, grace, evicted(pod, msg))
		m.waitForCleanup(ctx, pod)
		return pod, nil
	}
	return nil, fmt.Errorf("%s threshold met, but no pod may be evicted (%d active)", th.signal, len(pods))
}

// waitForCleanup waits until the evicted pod's resources are released,
// or cleanupTimeout passed: measuring before that would count them and
// evict another pod.
func (m *Manager) waitForCleanup(ctx context.Context, pod *v1.Pod) {
	timeout := m.o.Clock.NewTimer(cleanupTimeout)
	defer timeout.Stop()
	ticker := m.o.Clock.NewTicker(cleanupPoll)
	defer ticker.Stop()
	for !m.o.PodCleanedUp(pod.UID) {
		select {
		case <-ticker.C():
		case <-timeout.C():
			klog.InfoS("Eviction manager: evicted pod's resources are not released yet", "pod", klog.KObj(pod), "podUID", pod.UID, "waited", cleanupTimeout)
			return
		case <-ctx.Done():
			return
		}
	}
	klog.V(3).InfoS("Eviction manager: evicted pod's resources released", "pod", klog.KObj(pod), "podUID", pod.UID)
}

// evicted is an evicted pod's final status.
func evicted(pod *v1.Pod, msg string) func(*v1.PodStatus) {
	return func(s *v1.PodStatus) {
		s.Phase, s.Reason, s.Message = v1.PodFailed, Reason, msg
		podutil.MarkTerminatedByKubelet(s, pod, msg)
	}
}
