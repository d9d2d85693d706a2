// Package podstatus is the status manager: the kubelet core's record of the
// API status of every pod, the "status" box at the end of the pipeline.
// SyncPod and the termination scripts write it after every sync; the
// read-only server (and, in cluster mode, the API server) read it.
//
// It guards the invariants the API expects: a terminal phase never goes
// back, condition transition times change only when the condition does,
// and a pod's start time is set once.
package podstatus

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// Manager keeps the newest status of each pod, with a version that grows
// on every change.
type Manager struct {
	clock clock.Clock

	mu       sync.RWMutex
	statuses map[types.UID]*versioned
	// seq numbers changes across all pods, so writers can take the oldest
	// change first.
	seq uint64
	// changed is signalled (without blocking) whenever a status changes.
	changed chan struct{}
	// dirty holds the pods whose status changed since the API syncer last
	// took them (takeChanged), so a change costs the syncer that pod's
	// check, not a scan of every pod. It only holds pods the manager has.
	dirty map[types.UID]struct{}
	// journal keeps every change across restarts.
	journal Journal
}

// Journal keeps each pod's newest status across restarts. It is called
// with the manager's lock held, and must not block.
type Journal interface {
	PodStatus(uid types.UID, status *v1.PodStatus, finished bool)
}

type noJournal struct{}

func (noJournal) PodStatus(types.UID, *v1.PodStatus, bool) {}

// Option configures a Manager.
type Option func(*Manager)

// WithJournal records every status change in the node journal.
func WithJournal(j Journal) Option { return func(m *Manager) { m.journal = j } }

type versioned struct {
	status    v1.PodStatus
	version   uint64
	name      string
	namespace string
	// finished is set once TerminatePod ran: no more changes are expected.
	finished bool
	// mirrorOf is the config hash of a static pod, whose status the API
	// server holds on its mirror pod; empty for API pods.
	mirrorOf string
	// seq is the manager-wide number of the change that made this version.
	seq uint64
}

// versionInfo is what the API syncer needs to decide whether a pod has
// something to write, without copying its status.
type versionInfo struct {
	uid      types.UID
	version  uint64
	seq      uint64
	mirrorOf string
	finished bool
	// started: the status is past Pending (running or terminal), news a
	// client waits for, written before first sightings.
	started bool
}

func (v *versioned) info(uid types.UID) versionInfo {
	return versionInfo{uid: uid, version: v.version, seq: v.seq, mirrorOf: v.mirrorOf, finished: v.finished,
		started: v.status.Phase != v1.PodPending && v.status.Phase != ""}
}

// pending is one pod's status to write.
type pending struct {
	versionInfo
	name, namespace string
	status          v1.PodStatus
}

// versions lists every pod's status version.
func (m *Manager) versions() []versionInfo {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]versionInfo, 0, len(m.statuses))
	for uid, v := range m.statuses {
		out = append(out, v.info(uid))
	}
	return out
}

// takeChanged lists the version of each pod whose status changed since
// the last call, and forgets them.
func (m *Manager) takeChanged() []versionInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]versionInfo, 0, len(m.dirty))
	for uid := range m.dirty {
		out = append(out, m.statuses[uid].info(uid))
	}
	clear(m.dirty)
	return out
}

// pending returns a copy of one pod's status to write.
func (m *Manager) pending(uid types.UID) (pending, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	v, ok := m.statuses[uid]
	if !ok {
		return pending{}, false
	}
	return pending{
		versionInfo: v.info(uid),
		name:        v.name, namespace: v.namespace, status: *v.status.DeepCopy(),
	}, true
}

// New returns an empty status manager.
func New(clk clock.Clock, opts ...Option) *Manager {
	m := &Manager{clock: clk, statuses: map[types.UID]*versioned{}, changed: make(chan struct{}, 1), journal: noJournal{},
		dirty: map[types.UID]struct{}{}}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Restore takes a pod's status as the node journal kept it before a
// restart: its start time, its conditions' transition times and, for a
// pod that finished, its final status, which nothing changes again. The
// status is written to the API server like any other change.
func (m *Manager) Restore(pod *v1.Pod, status v1.PodStatus, finished bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.statuses[pod.UID]; ok {
		return
	}
	// A pod stopped without finishing (a static pod at node shutdown,
	// say) may run again: its status must be free to change.
	m.update(pod, *status.DeepCopy(), finished && podutil.IsTerminal(status.Phase))
}

// Changed is signalled after a status changes.
func (m *Manager) Changed() <-chan struct{} { return m.changed }

// GetPodStatus returns the newest status of a pod.
func (m *Manager) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if v, ok := m.statuses[uid]; ok {
		return *v.status.DeepCopy(), true
	}
	return v1.PodStatus{}, false
}

// Phase returns the phase of a pod's status, without copying the rest
// (admission asks it of every pod for every pod it admits).
func (m *Manager) Phase(uid types.UID) (v1.PodPhase, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if v, ok := m.statuses[uid]; ok {
		return v.status.Phase, true
	}
	return "", false
}

// Version returns the version of a pod's status, 0 when there is none.
func (m *Manager) Version(uid types.UID) uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if v, ok := m.statuses[uid]; ok {
		return v.version
	}
	return 0
}

// SetPodStatus records a pod's newly computed status.
func (m *Manager) SetPodStatus(pod *v1.Pod, status v1.PodStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.update(pod, *status.DeepCopy(), false)
}

// Reopen starts a pod's status afresh when the pod runs again under the
// same UID (a static pod whose manifest came back while or just after it
// terminated): its finished record would otherwise refuse every update,
// and its start time is the new run's. Nothing is written until the next
// status; the version goes on from the old one.
func (m *Manager) Reopen(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.statuses[pod.UID]
	if !ok || !old.finished {
		return
	}
	klog.V(3).InfoS("Starting the status of a pod run again under its UID afresh", "pod", klog.KObj(pod), "podUID", pod.UID)
	m.statuses[pod.UID] = &versioned{name: old.name, namespace: old.namespace, mirrorOf: old.mirrorOf, version: old.version, seq: old.seq}
}

// TerminatePod marks the end of a pod's life: every container that is not
// known to have terminated is recorded as terminated with an unknown
// status, and a pod that did not reach a terminal phase is marked Failed
// (static pods excepted: their phase follows their manifest).
func (m *Manager) TerminatePod(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var status v1.PodStatus
	if old, ok := m.statuses[pod.UID]; ok {
		status = *old.status.DeepCopy()
	} else {
		status = *pod.Status.DeepCopy()
	}
	// A container with no state left is reported failed, as nothing
	// tells whether it succeeded: the app containers once the pod has
	// initialized (before that they never ran), and the init containers
	// that tried to start (all but the trailing ones still waiting).
	if podInitialized(pod, &status) {
		markUnknownTerminated(status.ContainerStatuses)
	}
	markUnknownTerminated(initializedContainers(status.InitContainerStatuses))
	if !podutil.IsStatic(pod) {
		switch status.Phase {
		case v1.PodSucceeded, v1.PodFailed:
		default:
			klog.V(3).InfoS("Marking terminal pod as failed", "pod", klog.KObj(pod), "podUID", pod.UID, "oldPhase", status.Phase)
			status.Phase = v1.PodFailed
		}
	}
	m.update(pod, status, true)
}

func markUnknownTerminated(cs []v1.ContainerStatus) {
	for i := range cs {
		if cs[i].State.Terminated != nil {
			continue
		}
		cs[i].State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
			Reason:   "ContainerStatusUnknown",
			Message:  "The container could not be located when the pod was terminated",
			ExitCode: 137,
		}}
		cs[i].Ready = false
	}
}

// podInitialized tells from a status whether the pod ever got past its
// init containers: it has none, an app container left Waiting or ended
// once, or the last init container completed (a sidecar: runs and has
// started). Upstream reads the pod object's status; the newest status
// known is read here, which is the same or more recent.
func podInitialized(pod *v1.Pod, status *v1.PodStatus) bool {
	if len(pod.Spec.InitContainers) == 0 {
		return true
	}
	for _, cs := range status.ContainerStatuses {
		if cs.LastTerminationState.Terminated != nil || cs.State.Waiting == nil {
			return true
		}
	}
	n := len(status.InitContainerStatuses)
	if n == 0 {
		return false
	}
	last := status.InitContainerStatuses[n-1]
	if n > len(pod.Spec.InitContainers) || pod.Spec.InitContainers[n-1].Name != last.Name {
		klog.V(4).InfoS("Pod status does not match its spec's init containers", "pod", klog.KObj(pod), "podUID", pod.UID, "container", last.Name)
		return false
	}
	if podutil.IsRestartableInitContainer(&pod.Spec.InitContainers[n-1]) {
		return last.State.Running != nil && last.Started != nil && *last.Started
	}
	completed := func(t *v1.ContainerStateTerminated) bool { return t != nil && t.Reason == "Completed" }
	return completed(last.State.Terminated) || completed(last.LastTerminationState.Terminated)
}

// initializedContainers is every init container status but the trailing
// ones that never left Waiting: those never tried to start. The first is
// always included.
func initializedContainers(cs []v1.ContainerStatus) []v1.ContainerStatus {
	for i := len(cs) - 1; i >= 0; i-- {
		if cs[i].State.Waiting == nil || cs[i].LastTerminationState.Terminated != nil {
			return cs[:i+1]
		}
	}
	if len(cs) > 0 {
		return cs[:1]
	}
	return nil
}

// update stores a status under the lock, keeping its invariants.
func (m *Manager) update(pod *v1.Pod, status v1.PodStatus, finished bool) {
	old, hadOld := m.statuses[pod.UID]
	var oldStatus *v1.PodStatus
	if hadOld {
		oldStatus = &old.status
		if old.finished && !finished {
			// After TerminatePod nothing may change the status again.
			klog.V(4).InfoS("Ignoring status update for a finished pod", "pod", klog.KObj(pod), "podUID", pod.UID)
			return
		}
		if podutil.IsTerminal(oldStatus.Phase) && !podutil.IsTerminal(status.Phase) {
			klog.ErrorS(nil, "Refusing to move a pod out of its terminal phase", "pod", klog.KObj(pod), "podUID", pod.UID,
				"oldPhase", oldStatus.Phase, "newPhase", status.Phase)
			status.Phase = oldStatus.Phase
		}
	}
	if hadOld && oldStatus.ObservedGeneration > status.ObservedGeneration {
		// A status computed from an older spec (a sync that was under
		// way when the spec changed) must not move it back.
		status.ObservedGeneration = oldStatus.ObservedGeneration
	}
	now := metav1.NewTime(m.clock.Now())
	for i := range status.Conditions {
		keepTransitionTime(&status.Conditions[i], oldStatus, now)
	}
	switch {
	case hadOld && oldStatus.StartTime != nil && !oldStatus.StartTime.IsZero():
		status.StartTime = oldStatus.StartTime.DeepCopy()
	case status.StartTime == nil || status.StartTime.IsZero():
		status.StartTime = &now
	}
	normalizeTimes(&status)

	if hadOld && old.finished == finished && apiequality.Semantic.DeepEqual(old.status, status) {
		return
	}
	v := &versioned{status: status, name: pod.Name, namespace: pod.Namespace, finished: finished}
	if podutil.IsStatic(pod) {
		v.mirrorOf = pod.Annotations[podutil.ConfigHashAnnotationKey]
	}
	if hadOld {
		v.version = old.version + 1
	} else {
		v.version = 1
	}
	m.seq++
	v.seq = m.seq
	m.statuses[pod.UID] = v
	m.dirty[pod.UID] = struct{}{}
	m.journal.PodStatus(pod.UID, &v.status, finished)
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// keepTransitionTime carries a condition's last transition time over from
// the old status unless the condition's value changed.
func keepTransitionTime(c *v1.PodCondition, old *v1.PodStatus, now metav1.Time) {
	if old != nil {
		for _, oc := range old.Conditions {
			if oc.Type == c.Type && oc.Status == c.Status {
				c.LastTransitionTime = oc.LastTransitionTime
				return
			}
		}
	}
	if c.LastTransitionTime.IsZero() {
		c.LastTransitionTime = now
	}
}

// normalizeTimes truncates times to what the API stores (seconds), so a
// status read back from the API compares equal to the one written.
func normalizeTimes(s *v1.PodStatus) {
	trunc := func(t *metav1.Time) {
		if t != nil && !t.IsZero() {
			*t = metav1.NewTime(t.Rfc3339Copy().Time)
		}
	}
	trunc(s.StartTime)
	for i := range s.Conditions {
		trunc(&s.Conditions[i].LastProbeTime)
		trunc(&s.Conditions[i].LastTransitionTime)
	}
	for _, list := range [][]v1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses, s.EphemeralContainerStatuses} {
		for i := range list {
			for _, st := range []*v1.ContainerState{&list[i].State, &list[i].LastTerminationState} {
				if st.Running != nil {
					trunc(&st.Running.StartedAt)
				}
				if st.Terminated != nil {
					trunc(&st.Terminated.StartedAt)
					trunc(&st.Terminated.FinishedAt)
				}
			}
		}
	}
}

// RemoveOrphanedStatuses forgets the statuses of pods not in keep.
func (m *Manager) RemoveOrphanedStatuses(keep map[types.UID]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for uid := range m.statuses {
		if !keep[uid] {
			delete(m.statuses, uid)
			delete(m.dirty, uid)
		}
	}
}
