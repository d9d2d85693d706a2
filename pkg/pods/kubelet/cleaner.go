package kubelet

import (
	"context"
	"errors"
	"fmt"
	"os"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/pods/poddirs"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
	"github.com/nodelet/nodelet/pkg/volumes/volume"
)

// The cleaner does housekeeping's slow work off the sync loop: removing
// dead containers and sandboxes, orphaned pod directories and cgroups,
// and orphaned mirror pods. Each of these makes runtime, filesystem or
// API calls, one per leftover; a burst of deletions would otherwise keep
// the loop from dispatching anything (new pods included) for seconds.
//
// The loop hands it work without waiting: a pod whose container died, and
// after each housekeeping pass a cleanup request. Requests coalesce: only
// the newest view of what to keep matters.
type cleaner struct {
	// deadContainers carries pods with a container that just died.
	deadContainers chan types.UID
	// requests holds at most one pending cleanup, the newest.
	requests chan cleanupRequest

	gc                 GC
	workers            PodWorkers
	pods               *podManager
	status             StatusStore
	mirrors            MirrorPods
	cgroups            Cgroups
	volumes            VolumeTearDown
	rootDir            string
	deadContainersKept int
	dirRemoved         []func(types.UID)
}

// cleanupRequest is housekeeping's view of what must stay.
type cleanupRequest struct {
	// keep holds pods that are desired, known to the workers, or still
	// in the runtime: their directories and cgroups stay.
	keep map[types.UID]bool
	// cgroups were read before keep was computed, so a pod added meanwhile
	// has no cgroup here rather than one wrongly taken for an orphan.
	cgroups map[types.UID]string
	// active pods size the QoS cgroups.
	active []*v1.Pod
	// runtime is housekeeping's view of the runtime (the last relist's),
	// which garbage collection works from rather than listing again.
	runtime []*container.Pod
}

const deadContainersBuffer = 64

// newCleaner returns a cleaner with deps' dependencies and its own queues.
func newCleaner(deps cleaner) *cleaner {
	deps.deadContainers = make(chan types.UID, deadContainersBuffer)
	deps.requests = make(chan cleanupRequest, 1)
	return &deps
}

// containerDied queues a pod for pruning without blocking; when the queue
// is full, the next garbage collection catches up.
func (c *cleaner) containerDied(uid types.UID) {
	select {
	case c.deadContainers <- uid:
	default:
	}
}

// request replaces any pending cleanup with r, without blocking. Only the
// sync loop sends, so the loop below ends.
func (c *cleaner) request(r cleanupRequest) {
	for {
		select {
		case c.requests <- r:
			return
		default:
		}
		select {
		case <-c.requests: // drop the stale one
		default:
		}
	}
}

// evicted reports whether the pod was evicted, by its source or by
// nodelet: none of its dead containers is kept.
func (c *cleaner) evicted(uid types.UID) bool {
	if p, ok := c.pods.podByUID(uid); ok && isEvicted(p.Status) {
		return true
	}
	s, ok := c.status.GetPodStatus(uid)
	return ok && isEvicted(s)
}

// run serves the cleaner until ctx ends.
func (c *cleaner) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case uid := <-c.deadContainers:
			keep := c.deadContainersKept
			if c.workers.ShouldPodContentBeRemoved(uid) || c.evicted(uid) {
				keep = 0
			}
			if err := c.gc.PruneDeadContainers(ctx, uid, keep); err != nil {
				klog.V(2).InfoS("Failed to remove dead containers", "podUID", uid, "err", err)
			}
		case r := <-c.requests:
			if err := c.cleanup(ctx, r); err != nil {
				klog.ErrorS(err, "Failed cleaning up after pods")
			}
		}
	}
}

// cleanup removes what is left of pods that are gone.
func (c *cleaner) cleanup(ctx context.Context, r cleanupRequest) error {
	c.deleteOrphanedMirrorPods(ctx)
	var errs []error
	if err := c.gc.Collect(ctx, r.runtime, kuberuntime.GCPolicy{MaxPerPodContainer: c.deadContainersKept}, c.workers); err != nil {
		errs = append(errs, fmt.Errorf("garbage collection: %w", err))
	}
	if err := c.cleanupOrphanedPodDirs(r.keep); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.cleanupOrphanedPodCgroups(r.cgroups, r.keep))
	errs = append(errs, c.cgroups.UpdateQoS(r.active))
	return errors.Join(errs...)
}

// deleteOrphanedMirrorPods deletes mirror pods whose static pod is gone
// and done terminating.
func (c *cleaner) deleteOrphanedMirrorPods(ctx context.Context) {
	for _, m := range c.pods.mirrorPods() {
		if static, _, _ := c.pods.podAndMirror(m); static != nil {
			continue
		}
		fullName := podutil.FullName(m)
		if c.workers.IsPodForMirrorPodTerminatingByFullName(fullName) {
			continue
		}
		klog.V(2).InfoS("Deleting orphaned mirror pod", "pod", klog.KObj(m), "podUID", m.UID)
		if _, err := c.mirrors.DeleteMirrorPod(ctx, fullName, &m.UID); err != nil {
			klog.ErrorS(err, "Failed deleting orphaned mirror pod", "pod", klog.KObj(m), "podUID", m.UID)
		}
	}
}

// cleanupOrphanedPodCgroups removes the cgroups of pods that are neither
// desired, known to the workers, nor running. keep includes all three.
func (c *cleaner) cleanupOrphanedPodCgroups(cgroups map[types.UID]string, keep map[types.UID]bool) error {
	var errs []error
	for uid, cg := range cgroups {
		if keep[uid] {
			continue
		}
		klog.V(3).InfoS("Removing the cgroup of an orphaned pod", "podUID", uid, "cgroup", cg)
		if err := c.cgroups.Destroy(cg); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cleanupOrphanedPodDirs removes the directories of pods nobody knows any
// more, but never while anything is still mounted inside one. A pod added
// after keep was computed is safe: its directory is made only after its
// worker exists, and the workers never let a live pod's content go.
func (c *cleaner) cleanupOrphanedPodDirs(keep map[types.UID]bool) error {
	err := poddirs.Sweep(poddirs.Root(c.rootDir).Pods(), poddirs.PodUID, func(uid types.UID, path string) error {
		if keep[uid] || !c.workers.ShouldPodContentBeRemoved(uid) {
			return nil
		}
		if err := c.volumes.TearDown(uid); err != nil {
			return err
		}
		mounted, err := volume.MountPointsUnder(path)
		if err != nil || len(mounted) > 0 {
			klog.V(3).InfoS("Orphaned pod directory still has mounts, leaving it", "podUID", uid, "path", path, "err", err)
			return err
		}
		if err := os.RemoveAll(path); err != nil {
			return err
		}
		for _, removed := range c.dirRemoved {
			removed(uid)
		}
		klog.V(3).InfoS("Removed orphaned pod directory", "podUID", uid, "path", path)
		return nil
	})
	if err != nil {
		return fmt.Errorf("removing orphaned pod directories: %w", err)
	}
	return nil
}
