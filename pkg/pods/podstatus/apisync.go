package podstatus

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/cluster/kubeclient"
	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// Timing and concurrency of the API syncer.
const (
	// resyncPeriod is how often every pod is checked against what the API
	// server last said about it, without a change of our own: a mirror
	// pod recreated, a write that failed, or a deletion that became
	// possible. The check is local; only a difference costs API calls.
	resyncPeriod = time.Second
	// retryDelay is how soon a pod whose write could not be done yet (a
	// conflict, a mirror pod not created yet) is tried again.
	retryDelay = 500 * time.Millisecond
	// writers is how many pods are written at once: a write is a round
	// trip, and one pod's must not wait behind a hundred others'. The
	// client's QPS limit still applies.
	writers = 4
)

// PodSource is what the API syncer asks of the rest of nodelet: the
// desired pod (its deletion timestamp says whether it is being deleted),
// the pod's API object as last seen (a static pod's mirror pod), and
// whether its containers may still run.
type PodSource interface {
	PodByUID(uid types.UID) (*v1.Pod, bool)
	APIPod(uid types.UID) *v1.Pod
	CouldHaveRunningContainers(uid types.UID) bool
}

// APISyncer writes the manager's statuses to the API server: each pod's
// status as soon as it changes (changes in between are coalesced into the
// newest), pods in the order their statuses changed (those past Pending,
// finished or deletable before first sightings), a few at a time, and
// never moving the API's status out of a terminal phase; and once a
// deleted pod has stopped for good, it deletes the object with grace 0
// and a UID precondition, which completes the graceful deletion the user
// began. A static pod's status goes to its mirror pod.
//
// A write is one strategic-merge PATCH of the status against the pod as
// the source last delivered it, with the pod's UID as precondition (the
// API server refuses the patch for another pod of the same name). Only
// when nodelet has no copy, or a patch failed, is the pod read first.
type APISyncer struct {
	client kubeclient.Interface
	m      *Manager
	pods   PodSource
	clock  clock.WithTicker
	steps  instrument.StepRecorder
	queue  *writeQueue

	mu sync.Mutex
	// synced is the version of each pod's status last written (or found
	// already equal).
	synced map[types.UID]uint64
	// target is the API object each status was last written to: a new
	// object (a recreated mirror pod) needs the status written again.
	target  map[types.UID]types.UID
	deleted map[types.UID]bool
	// reread marks pods whose next write must read the object first.
	reread map[types.UID]bool
	// checked is the (status version, API object version) pair last found
	// in agreement, so an unchanged pod costs no comparison.
	checked map[types.UID]checkedPair
	// written is the object each pod's last write returned, with the
	// resourceVersion of the source's copy at the time. While the source
	// still holds that copy, the write has not come back through the
	// watch: the copy's status is ours before the write, not somebody
	// else's change, and the returned object is the newest there is.
	// Comparing against the copy would only repeat the write.
	written map[types.UID]writtenObject
}

type writtenObject struct {
	sourceVersion string
	obj           *v1.Pod
}

type checkedPair struct {
	version         uint64
	resourceVersion string
}

// NewAPISyncer returns a syncer for m's statuses.
func NewAPISyncer(o APISyncerOptions) *APISyncer {
	if o.Steps == nil {
		o.Steps = instrument.NoSteps{}
	}
	return &APISyncer{
		client: o.Client, m: o.Status, pods: o.Pods, clock: o.Clock, steps: o.Steps,
		queue:  newWriteQueue(o.Clock),
		synced: map[types.UID]uint64{}, target: map[types.UID]types.UID{}, deleted: map[types.UID]bool{},
		reread: map[types.UID]bool{}, checked: map[types.UID]checkedPair{}, written: map[types.UID]writtenObject{},
	}
}

// APISyncerOptions configure an APISyncer.
type APISyncerOptions struct {
	Client kubeclient.Interface
	Status *Manager
	Pods   PodSource
	Clock  clock.WithTicker
	// Steps records each status written in the pod's timeline; nil
	// records nothing.
	Steps instrument.StepRecorder
}

// Run syncs until ctx ends.
func (s *APISyncer) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s.processNext(ctx) {
			}
		}()
	}
	defer func() {
		// The writers finish the pod in hand, then stop.
		s.queue.ShutDown()
		wg.Wait()
	}()
	t := s.clock.NewTicker(resyncPeriod)
	defer t.Stop()
	// A change costs the check of the pods that changed; the resync looks
	// at every pod, which catches what changes without a status change
	// of its own (see resyncPeriod).
	due := s.due
	for {
		for _, d := range due() {
			s.queue.Add(d.uid, d.urgent)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.m.Changed():
			due = s.dueChanged
		case <-t.C():
			due = s.due
		}
	}
}

// Flush waits until every status is written and every deletable pod
// deleted, or ctx ends: pods stopped as the node shuts down must say so
// in the API before nodelet exits. Run does the writing.
func (s *APISyncer) Flush(ctx context.Context) {
	t := s.clock.NewTicker(retryDelay)
	defer t.Stop()
	for len(s.due()) > 0 {
		select {
		case <-ctx.Done():
			klog.InfoS("Pod statuses left unwritten", "pods", len(s.due()), "err", ctx.Err())
			return
		case <-t.C():
		}
	}
}

func (s *APISyncer) processNext(ctx context.Context) bool {
	uid, urgent, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(uid)
	if !s.syncOne(ctx, uid) {
		s.queue.AddAfter(uid, urgent, retryDelay)
	}
	return true
}

// SyncBatch writes, one after another, every status not written yet and
// deletes the pods that may now go. It reports whether something must be
// tried again soon. Run does the same with several writers.
func (s *APISyncer) SyncBatch(ctx context.Context) (retry bool) {
	for _, d := range s.due() {
		if !s.syncOne(ctx, d.uid) {
			retry = true
		}
	}
	return retry
}

// dueWrite is a pod with something to write or delete; urgent when the
// write is news a client waits for (see writeQueue).
type dueWrite struct {
	uid    types.UID
	urgent bool
}

// due lists the pods with something to write or delete: the urgent ones
// (started, finished, or deletable) first, each class oldest change
// first. It forgets the state of pods the manager no longer has.
func (s *APISyncer) due() []dueWrite {
	all := s.m.versions()
	s.mu.Lock()
	defer s.mu.Unlock()
	live := make(map[types.UID]bool, len(all))
	for _, p := range all {
		live[p.uid] = true
	}
	for uid := range s.synced {
		if !live[uid] {
			delete(s.synced, uid)
			delete(s.target, uid)
			delete(s.deleted, uid)
			delete(s.reread, uid)
			delete(s.checked, uid)
			delete(s.written, uid)
		}
	}
	return s.classifyLocked(all)
}

// dueChanged is due for the pods whose status changed since it was last
// called: over a burst of n pods, a scan of all of them on each change
// would cost the square of n.
func (s *APISyncer) dueChanged() []dueWrite {
	changed := s.m.takeChanged()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.classifyLocked(changed)
}

// classifyLocked lists the pods in ps with something to write or delete,
// urgent ones first, each class oldest change first.
func (s *APISyncer) classifyLocked(ps []versionInfo) []dueWrite {
	slices.SortFunc(ps, func(a, b versionInfo) int { return cmp.Compare(a.seq, b.seq) })
	var urgent, normal []dueWrite
	for _, p := range ps {
		if s.deleted[p.uid] {
			continue
		}
		deletable := s.deletableLocked(p)
		switch {
		case s.synced[p.uid] == p.version && !deletable && !s.needsReconcileLocked(p):
		case p.started || p.finished || deletable:
			urgent = append(urgent, dueWrite{p.uid, true})
		default:
			normal = append(normal, dueWrite{p.uid, false})
		}
	}
	return append(urgent, normal...)
}

// deletableLocked reports whether the pod's object may be deleted: it is
// an API pod being deleted, its containers are gone for good and its
// final status is recorded.
func (s *APISyncer) deletableLocked(p versionInfo) bool {
	pod, desired := s.pods.PodByUID(p.uid)
	return p.mirrorOf == "" && p.finished && desired && pod.DeletionTimestamp != nil && !s.pods.CouldHaveRunningContainers(p.uid)
}

// needsReconcileLocked reports whether the API object as last seen
// differs from the status written, or is another object than the one
// written to. A pair of versions found in agreement is not compared again.
func (s *APISyncer) needsReconcileLocked(p versionInfo) bool {
	obj := s.pods.APIPod(p.uid)
	if obj == nil || !isFor(obj, p.uid, p.mirrorOf) {
		return false
	}
	if s.target[p.uid] != obj.UID {
		return true
	}
	obj = s.newestLocked(p.uid, obj)
	pair := checkedPair{p.version, obj.ResourceVersion}
	if s.checked[p.uid] == pair {
		return false
	}
	ours, ok := s.m.GetPodStatus(p.uid)
	if ok && !apiequality.Semantic.DeepEqual(obj.Status, mergeStatus(obj.Status, ours)) {
		return true
	}
	s.checked[p.uid] = pair
	return false
}

// newestLocked returns the object the pod's last write returned while the
// source's copy is still the one it had then (see written), else the
// source's copy, forgetting the write: the watch has brought it or
// something newer. A copy without a resourceVersion proves nothing.
func (s *APISyncer) newestLocked(uid types.UID, source *v1.Pod) *v1.Pod {
	w, ok := s.written[uid]
	if !ok {
		return source
	}
	if source.ResourceVersion != "" && source.ResourceVersion == w.sourceVersion {
		return w.obj
	}
	delete(s.written, uid)
	return source
}

// errStale classifies a pod whose object is not the one the status is
// for: nothing to write, and nothing to retry.
var errStale = errors.New("the API object is for another pod")

// syncOne writes one pod's status and, if deletable, deletes the pod. It
// reports whether the pod is done with (false: try again soon).
func (s *APISyncer) syncOne(ctx context.Context, uid types.UID) bool {
	p, ok := s.m.pending(uid)
	if !ok {
		return true
	}
	s.mu.Lock()
	deletable := s.deletableLocked(p.versionInfo)
	done := s.deleted[uid] || (s.synced[uid] == p.version && !deletable && !s.needsReconcileLocked(p.versionInfo))
	s.mu.Unlock()
	if done {
		return true
	}
	done, err := s.syncPod(ctx, p, deletable)
	if err != nil {
		klog.V(2).InfoS("Failed to update the pod status in the API", "pod", klog.KRef(p.namespace, p.name), "podUID", uid, "err", err)
	}
	return done
}

// syncPod writes one pod's status and, if deletable, deletes the pod. It
// reports whether the pod is done with (false: try again soon).
func (s *APISyncer) syncPod(ctx context.Context, p pending, deletable bool) (bool, error) {
	obj, done, err := s.base(ctx, p)
	if obj == nil {
		return done, err
	}
	s.mu.Lock()
	write := s.synced[p.uid] != p.version || s.target[p.uid] != obj.UID
	s.mu.Unlock()
	held := s.holdTerminalPhase(obj, &p)
	if write || !apiequality.Semantic.DeepEqual(obj.Status, mergeStatus(obj.Status, p.status)) {
		// The source's copy as it was before the write: one delivered
		// during the write (ours, or somebody else's after it) is newer
		// than what the write returned.
		before := s.sourceVersion(p)
		res, err := s.patch(ctx, obj, p)
		if err != nil {
			s.mark(func() { s.reread[p.uid] = true })
			return false, err
		}
		if res != nil && before != "" {
			s.mark(func() { s.written[p.uid] = writtenObject{sourceVersion: before, obj: res} })
		}
	}
	if held {
		// Written but for the phase: not done until the containers are.
		return false, nil
	}
	s.mark(func() { s.synced[p.uid], s.target[p.uid] = p.version, obj.UID })
	if !deletable {
		return true, nil
	}
	outcome, err := s.deletePod(ctx, obj)
	if err != nil {
		return false, err
	}
	klog.V(2).InfoS("Pod fully terminated and removed from the API", "pod", klog.KObj(obj), "podUID", p.uid, "outcome", outcome)
	s.mark(func() { s.deleted[p.uid] = true })
	return true, nil
}

// deletePod deletes obj from the API, if it is still that pod, and says
// how it went. Neither a conflict nor a not-found in answer is proof: a
// conflict is either the UID precondition (the name is another pod's
// now: ours is gone) or the API server failing to apply the delete, and
// a not-found may come from the NodeRestriction admission, which looks
// the pod up in its own cache, empty just after the API server restarts
// (seen in TestAPIServerOutageDuringBurst). Only a read tells.
func (s *APISyncer) deletePod(ctx context.Context, obj *v1.Pod) (string, error) {
	uid := obj.UID
	pods := s.client.CoreV1().Pods(obj.Namespace)
	err := pods.Delete(ctx, obj.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &uid}})
	switch {
	case err == nil:
		return "deleted", nil
	case !apierrors.IsNotFound(err) && !apierrors.IsConflict(err):
		return "", fmt.Errorf("deleting pod: %w", err)
	}
	cur, gerr := pods.Get(ctx, obj.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(gerr):
		return "already gone", nil
	case gerr != nil:
		return "", fmt.Errorf("deleting pod: %w (and reading it back: %v)", err, gerr)
	case cur.UID != uid:
		return "replaced by another pod of the name", nil
	}
	return "", fmt.Errorf("deleting pod: %w (it is still there)", err)
}

// holdTerminalPhase keeps the API's phase, reason and message in p while
// the pod's containers could still run (a pod evicted, past its deadline
// or stopped at node shutdown, whose containers are being stopped): a
// controller that sees a terminal phase creates a replacement, and two
// copies would run at once. The rest of the status is written, and the
// phase follows once the containers are gone, as upstream's status
// manager holds it. It reports whether it held the phase back.
func (s *APISyncer) holdTerminalPhase(obj *v1.Pod, p *pending) bool {
	if podutil.IsTerminal(obj.Status.Phase) || !podutil.IsTerminal(p.status.Phase) || !s.pods.CouldHaveRunningContainers(p.uid) {
		return false
	}
	klog.V(3).InfoS("Holding the terminal phase back while the pod's containers may run", "pod", klog.KObj(obj), "podUID", p.uid, "phase", p.status.Phase)
	p.status.Phase, p.status.Reason, p.status.Message = obj.Status.Phase, obj.Status.Reason, obj.Status.Message
	return true
}

// sourceVersion is the resourceVersion of the source's copy of the pod's
// object, "" when it has none for this pod.
func (s *APISyncer) sourceVersion(p pending) string {
	if source := s.pods.APIPod(p.uid); source != nil && isFor(source, p.uid, p.mirrorOf) {
		return source.ResourceVersion
	}
	return ""
}

func (s *APISyncer) mark(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn()
}

// base returns the API object to write the status to: the source's copy
// when there is one for this pod and no earlier write failed, else the
// object read from the API. A nil object means there is nothing to write
// now; done then says whether to try again.
func (s *APISyncer) base(ctx context.Context, p pending) (obj *v1.Pod, done bool, err error) {
	s.mu.Lock()
	reread := s.reread[p.uid]
	s.mu.Unlock()
	if obj := s.pods.APIPod(p.uid); obj != nil && !reread && isFor(obj, p.uid, p.mirrorOf) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.newestLocked(p.uid, obj), false, nil
	}
	obj, err = s.client.CoreV1().Pods(p.namespace).Get(ctx, p.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && p.mirrorOf != "":
		// The mirror pod is not created yet (or was just deleted): its
		// status is written once it exists.
		return nil, false, nil
	case apierrors.IsNotFound(err):
		s.mark(func() { s.synced[p.uid], s.deleted[p.uid] = p.version, true })
		return nil, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("getting pod: %w", err)
	}
	if !isFor(obj, p.uid, p.mirrorOf) {
		s.mark(func() { s.synced[p.uid] = p.version })
		klog.V(3).InfoS("Pod was deleted and then recreated, skipping status update", "pod", klog.KObj(obj), "oldPodUID", p.uid, "podUID", obj.UID)
		return nil, true, errStale
	}
	s.mark(func() { delete(s.reread, p.uid) })
	return obj, false, nil
}

// patch writes p's status over obj's with a strategic merge patch carrying
// obj's UID, so it can never land on a recreated pod of the same name. It
// returns the object as written, nil when there was nothing to write.
func (s *APISyncer) patch(ctx context.Context, obj *v1.Pod, p pending) (*v1.Pod, error) {
	merged := mergeStatus(obj.Status, p.status)
	if podutil.IsTerminal(obj.Status.Phase) && !podutil.IsTerminal(merged.Phase) {
		klog.ErrorS(nil, "The API has the pod in a terminal phase; not moving it back", "pod", klog.KObj(obj), "podUID", p.uid,
			"apiPhase", obj.Status.Phase, "phase", merged.Phase)
		merged.Phase = obj.Status.Phase
	}
	if apiequality.Semantic.DeepEqual(obj.Status, merged) {
		return nil, nil
	}
	patch, err := statusPatch(obj.UID, obj.Status, merged)
	if err != nil {
		return nil, err
	}
	end := s.steps.Begin(&v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: p.uid, Namespace: obj.Namespace, Name: obj.Name}}, instrument.KindStatus, "written to the API")
	res, err := s.client.CoreV1().Pods(obj.Namespace).Patch(ctx, obj.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	end(err, fmt.Sprintf("phase %s, version %d", merged.Phase, p.version))
	if err != nil {
		return nil, fmt.Errorf("patching status: %w", err)
	}
	klog.V(3).InfoS("Status for pod updated successfully", "pod", klog.KObj(obj), "podUID", p.uid, "statusVersion", p.version, "phase", merged.Phase)
	return res, nil
}

// statusPatch is the strategic merge patch from old to new status, with
// the UID as a precondition (a patch may not change it).
func statusPatch(uid types.UID, old, new v1.PodStatus) ([]byte, error) {
	oldJSON, err := json.Marshal(v1.Pod{Status: old})
	if err != nil {
		return nil, err
	}
	newJSON, err := json.Marshal(v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}, Status: new})
	if err != nil {
		return nil, err
	}
	return strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, v1.Pod{})
}

// isFor reports whether the API object holds the status of the pod: the
// same UID, or for a static pod its mirror pod of the same manifest.
func isFor(obj *v1.Pod, uid types.UID, mirrorOf string) bool {
	if mirrorOf != "" {
		return podutil.IsMirror(obj) && obj.Annotations[podutil.ConfigMirrorAnnotationKey] == mirrorOf
	}
	return obj.UID == uid
}

// mergeStatus lays nodelet's status over the API's, keeping what others
// own: conditions of types nodelet does not report (readiness gates,
// disruption targets), the scheduler's nominated node, and the resource
// claim statuses the resource claim controller and scheduler write.
func mergeStatus(api, ours v1.PodStatus) v1.PodStatus {
	out := *ours.DeepCopy()
	have := map[v1.PodConditionType]bool{}
	for _, c := range out.Conditions {
		have[c.Type] = true
	}
	for _, c := range api.Conditions {
		// Others' conditions stay; one of ours that we no longer set
		// (a resize done) goes.
		if !have[c.Type] && !podutil.IsKubeletCondition(c.Type) {
			out.Conditions = append(out.Conditions, c)
		}
	}
	out.NominatedNodeName = api.NominatedNodeName
	out.ResourceClaimStatuses = api.ResourceClaimStatuses
	out.ExtendedResourceClaimStatus = api.ExtendedResourceClaimStatus
	out.NodeAllocatableResourceClaimStatuses = api.NodeAllocatableResourceClaimStatuses
	return out
}
