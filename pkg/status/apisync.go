package status

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/podutil"
)

// Timing of the API syncer.
const (
	// resyncPeriod is how often every pod is checked against what the API
	// server last said about it, without a change of our own: a mirror
	// pod recreated, a write that failed, or a deletion that became
	// possible. The check is local; only a difference costs API calls.
	resyncPeriod = time.Second
	// retryDelay is how soon a pod whose write could not be done yet (a
	// conflict, a mirror pod not created yet) is tried again.
	retryDelay = 500 * time.Millisecond
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
// newest), retried on conflict, never moving the API's status out of a
// terminal phase; and once a deleted pod has stopped for good, it deletes
// the object with grace 0 and a UID precondition, which completes the
// graceful deletion the user began. A static pod's status goes to its
// mirror pod.
type APISyncer struct {
	client kubernetes.Interface
	m      *Manager
	pods   PodSource
	clock  clock.WithTicker

	// synced is the version of each pod's status last written (or found
	// already equal).
	synced map[types.UID]uint64
	// target is the API object each status was last written to: a new
	// object (a recreated mirror pod) needs the status written again.
	target  map[types.UID]types.UID
	deleted map[types.UID]bool
}

// NewAPISyncer returns a syncer for m's statuses.
func NewAPISyncer(client kubernetes.Interface, m *Manager, pods PodSource, clk clock.WithTicker) *APISyncer {
	return &APISyncer{client: client, m: m, pods: pods, clock: clk, synced: map[types.UID]uint64{}, target: map[types.UID]types.UID{}, deleted: map[types.UID]bool{}}
}

// Run syncs until ctx ends.
func (s *APISyncer) Run(ctx context.Context) {
	t := s.clock.NewTicker(resyncPeriod)
	defer t.Stop()
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.m.Changed():
		case <-t.C():
		case <-retry:
		}
		retry = nil
		if s.SyncBatch(ctx) {
			retry = s.clock.After(retryDelay)
		}
	}
}

type pending struct {
	uid types.UID
	versioned
}

// snapshot returns a copy of every status.
func (m *Manager) snapshot() []pending {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]pending, 0, len(m.statuses))
	for uid, v := range m.statuses {
		c := *v
		c.status = *v.status.DeepCopy()
		out = append(out, pending{uid: uid, versioned: c})
	}
	return out
}

// SyncBatch writes every status not written yet and deletes the pods
// that may now go. It reports whether something must be tried again soon.
func (s *APISyncer) SyncBatch(ctx context.Context) (retry bool) {
	all := s.m.snapshot()
	live := make(map[types.UID]bool, len(all))
	for _, p := range all {
		live[p.uid] = true
		if s.deleted[p.uid] {
			continue
		}
		pod, desired := s.pods.PodByUID(p.uid)
		deletable := p.mirrorOf == "" && p.finished && desired && pod.DeletionTimestamp != nil && !s.pods.CouldHaveRunningContainers(p.uid)
		if s.synced[p.uid] == p.version && !deletable && !s.needsReconcile(p) {
			continue
		}
		done, err := s.syncPod(ctx, p, deletable)
		if err != nil {
			klog.V(2).InfoS("Failed to update the pod status in the API", "pod", klog.KRef(p.namespace, p.name), "podUID", p.uid, "err", err)
		}
		if !done {
			retry = true
		}
	}
	for uid := range s.synced {
		if !live[uid] {
			delete(s.synced, uid)
			delete(s.target, uid)
			delete(s.deleted, uid)
		}
	}
	return retry
}

// errStale classifies a pod whose object is not the one the status is
// for: nothing to write, and nothing to retry.
var errStale = errors.New("the API object is for another pod")

// syncPod writes one pod's status and, if deletable, deletes the pod. It
// reports whether the pod is done with (false: try again soon).
func (s *APISyncer) syncPod(ctx context.Context, p pending, deletable bool) (bool, error) {
	pods := s.client.CoreV1().Pods(p.namespace)
	obj, err := pods.Get(ctx, p.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && p.mirrorOf != "":
		// The mirror pod is not created yet (or was just deleted): its
		// status is written once it exists.
		return false, nil
	case apierrors.IsNotFound(err):
		s.synced[p.uid], s.deleted[p.uid] = p.version, true
		return true, nil
	case err != nil:
		return false, fmt.Errorf("getting pod: %w", err)
	}
	if !s.isFor(obj, p) {
		s.synced[p.uid] = p.version
		klog.V(3).InfoS("Pod was deleted and then recreated, skipping status update", "pod", klog.KObj(obj), "oldPodUID", p.uid, "podUID", obj.UID)
		return true, errStale
	}
	if s.synced[p.uid] != p.version || s.target[p.uid] != obj.UID || s.needsReconcile(p) {
		merged := mergeStatus(obj.Status, p.status)
		if isTerminal(obj.Status.Phase) && !isTerminal(merged.Phase) {
			klog.ErrorS(nil, "The API has the pod in a terminal phase; not moving it back", "pod", klog.KObj(obj), "podUID", p.uid,
				"apiPhase", obj.Status.Phase, "phase", merged.Phase)
			merged.Phase = obj.Status.Phase
		}
		if !apiequality.Semantic.DeepEqual(obj.Status, merged) {
			obj.Status = merged
			if _, err := pods.UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
				// A conflict means the object moved on: read it again.
				return false, fmt.Errorf("updating status: %w", err)
			}
			klog.V(3).InfoS("Status for pod updated successfully", "pod", klog.KObj(obj), "podUID", p.uid, "statusVersion", p.version, "phase", merged.Phase)
		}
		s.synced[p.uid], s.target[p.uid] = p.version, obj.UID
	}
	if !deletable {
		return true, nil
	}
	uid := obj.UID
	err = pods.Delete(ctx, p.name, metav1.DeleteOptions{GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return false, fmt.Errorf("deleting pod: %w", err)
	}
	klog.V(2).InfoS("Pod fully terminated and removed from the API", "pod", klog.KObj(obj), "podUID", p.uid)
	s.deleted[p.uid] = true
	return true, nil
}

// needsReconcile reports whether the API object as last seen differs from
// the status written, or is another object than the one written to.
func (s *APISyncer) needsReconcile(p pending) bool {
	obj := s.pods.APIPod(p.uid)
	if obj == nil || !s.isFor(obj, p) {
		return false
	}
	if s.target[p.uid] != obj.UID {
		return true
	}
	return !apiequality.Semantic.DeepEqual(obj.Status, mergeStatus(obj.Status, p.status))
}

// isFor reports whether the API object holds the status of the pod: the
// same UID, or for a static pod its mirror pod of the same manifest.
func (s *APISyncer) isFor(obj *v1.Pod, p pending) bool {
	if p.mirrorOf != "" {
		return podutil.IsMirror(obj) && obj.Annotations[podutil.ConfigMirrorAnnotationKey] == p.mirrorOf
	}
	return obj.UID == p.uid
}

// mergeStatus lays nodelet's status over the API's, keeping what others
// own: conditions of types nodelet does not report (readiness gates,
// disruption targets) and the scheduler's nominated node.
func mergeStatus(api, ours v1.PodStatus) v1.PodStatus {
	out := *ours.DeepCopy()
	have := map[v1.PodConditionType]bool{}
	for _, c := range out.Conditions {
		have[c.Type] = true
	}
	for _, c := range api.Conditions {
		if !have[c.Type] {
			out.Conditions = append(out.Conditions, c)
		}
	}
	out.NominatedNodeName = api.NominatedNodeName
	return out
}
