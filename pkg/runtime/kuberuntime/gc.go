package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/pods/poddirs"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/crierr"
	"github.com/nodelet/nodelet/pkg/runtime/logs"
	"github.com/nodelet/nodelet/pkg/runtime/runtimegate"
)

// GCPolicy bounds what garbage collection keeps.
type GCPolicy struct {
	// MaxPerPodContainer is how many dead instances of each container of a
	// live pod are kept (their logs and exit status stay readable).
	MaxPerPodContainer int
}

// ContainerGC removes what is left of containers, sandboxes and pods:
// dead containers beyond the newest few, old sandboxes, and everything of
// pods whose content may go. It shares the runtime manager's stop gate,
// behind every pod's stop, so removals hold up no pod's start or stop.
type ContainerGC struct {
	runtime     RuntimeService
	runtimeName string
	podLogsDir  string
	legacyLogs  legacyLogs
	timeout     time.Duration
	stops       *runtimegate.Gate
	pods        interface {
		GetPods(ctx context.Context) ([]*container.Pod, error)
	}
}

// ContainerGC returns the garbage collector of the manager's containers.
func (m *Manager) ContainerGC() *ContainerGC {
	return &ContainerGC{runtime: m.runtime, runtimeName: m.runtimeName, podLogsDir: m.podLogsDir,
		legacyLogs: m.legacyLogs, timeout: m.requestTimeout, stops: m.stops, pods: m}
}

func (g *ContainerGC) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, g.timeout)
}

// GarbageCollect lists the runtime afresh and collects what it holds (see
// Collect); the eviction manager, reclaiming disk, calls it.
func (g *ContainerGC) GarbageCollect(ctx context.Context, policy GCPolicy, state PodState) error {
	pods, err := g.pods.GetPods(ctx)
	if err != nil {
		return err
	}
	return g.Collect(ctx, pods, policy, state)
}

// Collect removes what no longer serves a purpose among pods, a view of
// the runtime: dead containers beyond the newest few per container, dead
// sandboxes that are not a pod's newest, and everything (containers,
// sandboxes, logs) of pods whose content the pod workers say may go. It
// never touches anything running.
//
// The view may be the last relist's rather than a listing of its own
// (housekeeping's: a listing of its own added two CRI calls every 2 s to
// the relist's two every second). Being a little old is safe, because
// nothing it removes
// can come back: a dead container or sandbox never runs again, a
// container created but not yet started is its name's newest (always
// kept), a pod whose content may go starts nothing more, and what was
// created since is not in the view at all.
func (g *ContainerGC) Collect(ctx context.Context, pods []*container.Pod, policy GCPolicy, state PodState) error {
	var errs []error
	live := map[types.UID]bool{}
	for _, p := range pods {
		if state.ShouldPodContentBeRemoved(p.ID) {
			errs = append(errs, g.removePodLeftovers(ctx, p))
			continue
		}
		live[p.ID] = true
		errs = append(errs, g.pruneDeadContainers(ctx, p, policy.MaxPerPodContainer))
		errs = append(errs, g.pruneOldSandboxes(ctx, p))
	}
	errs = append(errs, g.removeOrphanedLogDirs(live, state), g.legacyLogs.sweep(ctx, g.runtime))
	return errors.Join(errs...)
}

// removePodLeftovers removes a finished pod's dead sandboxes (taking their
// containers with them) and dead containers. Running parts are left for
// the pod workers to stop first.
func (g *ContainerGC) removePodLeftovers(ctx context.Context, p *container.Pod) error {
	var errs []error
	for _, c := range p.Containers {
		if c.State != container.StateRunning {
			errs = append(errs, g.removeContainer(ctx, c.ID.ID))
		}
	}
	for _, sb := range p.Sandboxes {
		if !sb.Ready {
			errs = append(errs, g.removeSandbox(ctx, sb.ID))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing pod %s/%s (%s): %w", p.Namespace, p.Name, p.ID, err)
	}
	klog.V(3).InfoS("Removed the runtime leftovers of a finished pod", "pod", klog.KRef(p.Namespace, p.Name), "podUID", p.ID)
	return nil
}

// PruneDeadContainers removes one pod's dead containers beyond the newest
// keep per container (the newest instance of each always stays: it is the
// container's status). The sync loop calls it when a container dies.
func (g *ContainerGC) PruneDeadContainers(ctx context.Context, uid types.UID, keep int) error {
	cctx, cancel := g.call(ctx)
	defer cancel()
	resp, err := g.runtime.ListContainers(cctx, &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{LabelPodUID: string(uid)}},
	})
	if err != nil {
		return err
	}
	p := &container.Pod{ID: uid}
	for _, c := range resp.GetContainers() {
		p.Containers = append(p.Containers, &container.Container{
			ID: container.ContainerID{Type: g.runtimeName, ID: c.Id}, Name: c.GetMetadata().GetName(),
			State: stateFromCRI(c.State), CreatedAt: time.Unix(0, c.CreatedAt),
		})
	}
	return g.pruneDeadContainers(ctx, p, keep)
}

func (g *ContainerGC) pruneDeadContainers(ctx context.Context, p *container.Pod, keep int) error {
	byName := map[string][]*container.Container{}
	for _, c := range p.Containers {
		byName[c.Name] = append(byName[c.Name], c)
	}
	var errs []error
	for _, cs := range byName {
		sort.Slice(cs, func(i, j int) bool { return cs[i].CreatedAt.After(cs[j].CreatedAt) })
		// The newest instance always stays: it is the container's status.
		dead := 0
		for i, c := range cs {
			if c.State == container.StateRunning || i == 0 {
				continue
			}
			if dead++; dead > keep {
				errs = append(errs, g.removeContainer(ctx, c.ID.ID))
			}
		}
	}
	return errors.Join(errs...)
}

// pruneOldSandboxes removes dead sandboxes other than the newest once no
// container of theirs is left.
func (g *ContainerGC) pruneOldSandboxes(ctx context.Context, p *container.Pod) error {
	if len(p.Sandboxes) < 2 {
		return nil
	}
	sbs := append([]*container.Sandbox(nil), p.Sandboxes...)
	sort.Slice(sbs, func(i, j int) bool { return sbs[i].CreatedAt.After(sbs[j].CreatedAt) })
	var errs []error
	for _, sb := range sbs[1:] {
		if !sb.Ready {
			errs = append(errs, g.removeSandbox(ctx, sb.ID))
		}
	}
	return errors.Join(errs...)
}

// removeContainer removes a container and its log files in a background
// slot of the stop gate.
func (g *ContainerGC) removeContainer(ctx context.Context, id string) error {
	return g.gated(ctx, func(ctx context.Context) error { return removeContainer(ctx, g.runtime, g.legacyLogs, id) })
}

// removeContainer removes a container and its log files, rotated ones
// included, and its log's link: the runtime does not own them.
func removeContainer(ctx context.Context, runtime RuntimeService, links legacyLogs, id string) error {
	st, err := runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if _, err := runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil && !crierr.IsNotFound(err) {
		return fmt.Errorf("removing container %s: %w", id, err)
	}
	if path := st.GetStatus().GetLogPath(); err == nil && path != "" {
		rmErr := os.Remove(path)
		if os.IsNotExist(rmErr) {
			rmErr = nil
		}
		if err := errors.Join(logs.RemoveRotated(path), rmErr, links.unlink(st.GetStatus())); err != nil {
			return fmt.Errorf("removing the logs of container %s: %w", id, err)
		}
	}
	return nil
}

func (g *ContainerGC) removeSandbox(ctx context.Context, id string) error {
	return g.gated(ctx, func(ctx context.Context) error {
		if _, err := g.runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil && !crierr.IsNotFound(err) {
			return fmt.Errorf("removing sandbox %s: %w", id, err)
		}
		return nil
	})
}

// gated runs a removal in a background slot of the stop gate (pod stops
// go first), bounded by the request timeout.
func (g *ContainerGC) gated(ctx context.Context, remove func(ctx context.Context) error) error {
	slot, err := g.stops.Acquire(ctx, runtimegate.Waiter{Background: true})
	if err != nil {
		return err
	}
	defer slot.Release()
	ctx, cancel := g.call(ctx)
	defer cancel()
	return remove(ctx)
}

// removeOrphanedLogDirs deletes the log directories of pods that left the
// runtime and whose content may go.
func (g *ContainerGC) removeOrphanedLogDirs(live map[types.UID]bool, state PodState) error {
	if g.podLogsDir == "" {
		return nil
	}
	return poddirs.Sweep(g.podLogsDir, poddirs.LogDirUID, func(uid types.UID, path string) error {
		if live[uid] || !state.ShouldPodContentBeRemoved(uid) {
			return nil
		}
		return os.RemoveAll(path)
	})
}
