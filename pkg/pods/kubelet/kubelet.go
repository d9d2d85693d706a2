// Package kubelet is the core between the pod sources and the pod
// workers: the "syncLoop" box of the pipeline. The sync scripts the pod
// workers call are pkg/pods/podsync's.
//
// The sync loop (seeds 000 and 001) selects over the merged config
// updates, PLEG events, a one-second sync tick and a two-second
// housekeeping tick, and dispatches each to a SyncHandler method. Those
// methods update the desired pods, admit or reject new pods, and hand
// every change to the pod workers; housekeeping reconciles the workers
// with the desired pods and the runtime and cleans up what is left of
// pods that are gone.
//
// The core holds a handful of components, each behind an interface
// declared here with only the methods the core uses.
package kubelet

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"golang.org/x/sync/errgroup"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/cluster/standalone"
	"github.com/nodelet/nodelet/pkg/infra/failpoint"
	"github.com/nodelet/nodelet/pkg/pods/admission"
	"github.com/nodelet/nodelet/pkg/pods/pleg"
	"github.com/nodelet/nodelet/pkg/pods/podsources"
	"github.com/nodelet/nodelet/pkg/pods/podstatus"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/pods/podworkers"
	"github.com/nodelet/nodelet/pkg/pods/prober"
	"github.com/nodelet/nodelet/pkg/resources/cm"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
)

// PodWorkers is what the core asks of the pod workers.
type PodWorkers interface {
	UpdatePod(options podworkers.UpdatePodOptions)
	SyncKnownPods(desired []*v1.Pod) map[types.UID]podworkers.PodWorkerSync
	IsPodKnownTerminated(uid types.UID) bool
	IsPodTerminationRequested(uid types.UID) bool
	ShouldPodContentBeRemoved(uid types.UID) bool
	IsPodForMirrorPodTerminatingByFullName(fullName string) bool
}

// Runtime is what the core (not the sync scripts) asks of the runtime.
type Runtime interface {
	ForgetBackOffs()
}

// GC removes dead containers and what is left of finished pods.
type GC interface {
	Collect(ctx context.Context, pods []*container.Pod, policy kuberuntime.GCPolicy, state kuberuntime.PodState) error
	PruneDeadContainers(ctx context.Context, uid types.UID, keep int) error
}

// PLEG is the event source and health of the pod lifecycle event
// generator, and housekeeping's view of what is in the runtime: its last
// relist, with each pod read since (not a second listing of every
// sandbox and container).
type PLEG interface {
	Watch() <-chan *pleg.Event
	Healthy() error
	RuntimePods(ctx context.Context) ([]*container.Pod, error)
}

// Probes is the prober as the core uses it.
type Probes interface {
	Updates() <-chan prober.Update
	CleanupPods(keep map[types.UID]bool)
}

// noProbes is the prober when nothing is probed.
type noProbes struct{}

func (noProbes) Updates() <-chan prober.Update  { return nil }
func (noProbes) CleanupPods(map[types.UID]bool) {}

// StatusStore is the status manager as the core uses it.
type StatusStore interface {
	podstatus.Reader
	Phase(uid types.UID) (v1.PodPhase, bool)
	SetPodStatus(pod *v1.Pod, status v1.PodStatus)
	RemoveOrphanedStatuses(keep map[types.UID]bool)
	Reopen(pod *v1.Pod)
}

// MirrorPods deletes mirror pods whose static pod is gone.
type MirrorPods interface {
	// DeleteMirrorPod deletes the mirror pod with the full name; with a
	// UID, only that instance. It reports whether it deleted one.
	DeleteMirrorPod(ctx context.Context, fullName string, uid *types.UID) (bool, error)
}

// Config is the node-level configuration the core acts on.
type Config struct {
	NodeName string
	RootDir  string
	// HostIPs are the node's addresses, primary first.
	HostIPs []string
	// DeadContainersKept is how many dead instances of each container a
	// live pod keeps, for its last state and logs.
	DeadContainersKept int
	// Cgroups is the container manager; nil (cm.Disabled) when
	// cgroupsPerQOS is off.
	Cgroups Cgroups
	// Admitter decides whether a new pod may run.
	Admitter *admission.Admitter
	// Resizer grants admitted pods their resources and decides their
	// in-place resizes.
	Resizer *admission.Resizer
	// Release are told, at every housekeeping, which pods are active:
	// what the resource managers hold for any other pod (CPUs, memory,
	// devices, prepared claims) goes back.
	Release []func(active []*v1.Pod)
}

// Health is where the sync loop learns whether it may sync pods, and
// reports that it is alive.
type Health interface {
	SyncError() error
	SyncLoopIterated()
	// SyncLoopHandled: the loop handled an event of the kind in took.
	SyncLoopHandled(event string, took time.Duration)
}

// Cgroups is what housekeeping asks of the container manager.
type Cgroups interface {
	PodCgroups() (map[types.UID]string, error)
	Destroy(cgroup string) error
	UpdateQoS(active []*v1.Pod) error
}

// Deps are the components the core drives.
type Deps struct {
	Workers   PodWorkers
	WorkQueue *podworkers.WorkQueue
	Runtime   Runtime
	GC        GC
	PLEG      PLEG
	Status    StatusStore
	Sources   *podsources.SourcesReady
	// Updates are the merged pod sources' changes.
	Updates  <-chan podsources.PodUpdate
	Health   Health
	Recorder record.EventRecorder
	Clock    clock.WithTicker
	// Probes is nil when nothing is probed.
	Probes Probes
	// Mirrors is nil (standalone.API) without an API server.
	Mirrors MirrorPods
	// Volumes tears down the volumes of pods nodelet forgot (after a
	// restart, say) before their directories go; nil for none.
	Volumes VolumeTearDown
	// PodDirRemoved are told of each pod whose directory housekeeping
	// removed: what was kept for the pod there (its user namespace
	// range) may go to another pod now.
	PodDirRemoved []func(uid types.UID)
}

// VolumeTearDown unmounts and removes a pod's volumes by UID.
type VolumeTearDown interface {
	TearDown(uid types.UID) error
}

// noVolumes tears down nothing: the runtime manager's helper resolved the
// volumes by itself.
type noVolumes struct{}

func (noVolumes) TearDown(types.UID) error { return nil }

const (
	syncTickPeriod     = time.Second
	housekeepingPeriod = 2 * time.Second
	// The sync loop backs off while the runtime is unhealthy.
	runtimeBackOffBase = 100 * time.Millisecond
	runtimeBackOffMax  = 5 * time.Second
)

// Kubelet is the core.
type Kubelet struct {
	cfg       Config
	pods      *podManager
	workers   PodWorkers
	workQueue *podworkers.WorkQueue
	runtime   Runtime
	pleg      PLEG
	status    StatusStore
	sources   *podsources.SourcesReady
	recorder  record.EventRecorder
	clock     clock.WithTicker
	probes    Probes
	health    Health
	updates   <-chan podsources.PodUpdate

	// cleaner does housekeeping's slow work off the sync loop.
	cleaner  *cleaner
	admitter *admission.Admitter
	resizer  *admission.Resizer
	view     *PodView
}

// New builds the core.
func New(cfg Config, d Deps) *Kubelet {
	cfg.Cgroups = orNone[Cgroups](cfg.Cgroups, cm.Disabled{})
	d.Probes = orNone[Probes](d.Probes, noProbes{})
	d.Mirrors = orNone[MirrorPods](d.Mirrors, standalone.API{})
	d.Volumes = orNone[VolumeTearDown](d.Volumes, noVolumes{})
	pods := newPodManager()
	cleaner := newCleaner(cleaner{
		gc: d.GC, workers: d.Workers, pods: pods, status: d.Status, mirrors: d.Mirrors, cgroups: cfg.Cgroups,
		volumes: d.Volumes, rootDir: cfg.RootDir, deadContainersKept: cfg.DeadContainersKept, dirRemoved: d.PodDirRemoved,
	})
	return &Kubelet{
		cfg: cfg, pods: pods, workers: d.Workers, workQueue: d.WorkQueue,
		runtime: d.Runtime, pleg: d.PLEG, status: d.Status, sources: d.Sources,
		recorder: d.Recorder, clock: d.Clock, probes: d.Probes, health: d.Health, updates: d.Updates,
		cleaner:  cleaner,
		admitter: cfg.Admitter, resizer: cfg.Resizer,
		view: &PodView{pods: pods, status: d.Status, workers: d.Workers, sources: d.Sources},
	}
}

// View answers what the node's pods are, for the rest of the node.
func (kl *Kubelet) View() *PodView { return kl.view }

// Run runs the sync loop, and the cleaner that does housekeeping's slow
// work, until ctx ends or the updates channel closes. Stopping it leaves
// every pod running.
func (kl *Kubelet) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var g errgroup.Group
	g.Go(func() error { kl.cleaner.run(ctx); return nil })
	g.Go(func() error {
		// The cleaner goes when the loop does.
		defer cancel()
		kl.syncLoop(ctx, kl.updates)
		return nil
	})
	return g.Wait()
}

func (kl *Kubelet) syncLoop(ctx context.Context, updates <-chan podsources.PodUpdate) {
	klog.InfoS("Starting the sync loop")
	syncTicker := kl.clock.NewTicker(syncTickPeriod)
	defer syncTicker.Stop()
	housekeeping := kl.clock.NewTicker(housekeepingPeriod)
	defer housekeeping.Stop()
	plegCh := kl.pleg.Watch()
	probeCh := kl.probes.Updates()
	backOff := runtimeBackOffBase
	for {
		if err := kl.health.SyncError(); err != nil {
			klog.ErrorS(err, "Skipping pod synchronization")
			select {
			case <-ctx.Done():
				return
			case <-kl.clock.After(backOff):
			}
			backOff = nextRuntimeBackOff(backOff)
			continue
		}
		backOff = runtimeBackOffBase
		kl.health.SyncLoopIterated()
		if !kl.syncLoopIteration(ctx, updates, syncTicker.C(), housekeeping.C(), plegCh, probeCh) {
			return
		}
	}
}

// nextRuntimeBackOff doubles the wait while the runtime is unhealthy, up
// to runtimeBackOffMax.
func nextRuntimeBackOff(d time.Duration) time.Duration { return min(2*d, runtimeBackOffMax) }

// syncLoopIteration handles one event and reports whether to go on.
func (kl *Kubelet) syncLoopIteration(ctx context.Context, updates <-chan podsources.PodUpdate, syncCh, housekeepingCh <-chan time.Time, plegCh <-chan *pleg.Event, probeCh <-chan prober.Update) bool {
	failpoint.Inject("sync-loop-iteration")
	select {
	case <-ctx.Done():
		return false
	case u, ok := <-updates:
		if !ok {
			klog.ErrorS(nil, "Update channel is closed, exiting the sync loop")
			return false
		}
		defer kl.handling("update")()
		kl.dispatch(u)
		// Only now, with the update applied, does the source count as
		// having reported: cleanup must never act on a half-known set,
		// nor on the journal's word.
		if u.Restored {
			kl.sources.AddRestored(u.Source)
		} else {
			kl.sources.AddSource(u.Source)
		}
	case e := <-plegCh:
		defer kl.handling("pleg")()
		if e.Type == pleg.ContainerDied {
			kl.cleaner.containerDied(e.ID)
		}
		if e.Type != pleg.ContainerRemoved {
			if pod, ok := kl.pods.podByUID(e.ID); ok {
				klog.V(2).InfoS("SyncLoop (PLEG): event for pod", "pod", klog.KObj(pod), "podUID", pod.UID, "event", e.Type)
				kl.HandlePodSyncs([]*v1.Pod{pod})
			} else {
				klog.V(4).InfoS("SyncLoop (PLEG): pod does not exist, ignore irrelevant event", "podUID", e.ID, "event", e.Type)
			}
		}
	case u := <-probeCh:
		defer kl.handling("probe")()
		// A failed liveness or startup probe restarts the container; a
		// readiness change (or a passed startup probe) changes the status.
		if pod, ok := kl.pods.podByUID(u.PodUID); ok {
			klog.V(2).InfoS("SyncLoop (probe)", "pod", klog.KObj(pod), "podUID", pod.UID, "probe", u.Type, "result", u.Result)
			kl.HandlePodSyncs([]*v1.Pod{pod})
		}
	case <-syncCh:
		defer kl.handling("sync")()
		if pods := kl.podsToSync(); len(pods) > 0 {
			klog.V(4).InfoS("SyncLoop (SYNC) pods", "pods", klog.KObjSlice(pods))
			kl.HandlePodSyncs(pods)
		}
	case <-housekeepingCh:
		defer kl.handling("housekeeping")()
		if !kl.sources.AllReady() {
			// Cleaning up before every source reported could kill pods
			// that are merely not announced yet.
			klog.V(4).InfoS("SyncLoop (housekeeping, skipped): sources aren't ready yet")
			break
		}
		start := kl.clock.Now()
		if err := kl.HandlePodCleanups(ctx); err != nil {
			klog.ErrorS(err, "Failed cleaning pods")
		}
		if d := kl.clock.Since(start); d > housekeepingPeriod {
			klog.ErrorS(nil, "Housekeeping took longer than expected", "expected", housekeepingPeriod, "actual", d.Round(time.Millisecond))
		}
	}
	return true
}

// handling starts timing the handling of an event; the function it
// returns reports it done (and the loop alive).
func (kl *Kubelet) handling(event string) func() {
	start := kl.clock.Now()
	return func() { kl.health.SyncLoopHandled(event, kl.clock.Since(start)) }
}

func (kl *Kubelet) dispatch(u podsources.PodUpdate) {
	switch u.Op {
	case podsources.ADD:
		klog.V(2).InfoS("SyncLoop ADD", "source", u.Source, "pods", klog.KObjSlice(u.Pods), "restored", u.Restored)
		kl.handlePodAdditions(u.Pods, u.Restored)
	case podsources.UPDATE:
		klog.V(2).InfoS("SyncLoop UPDATE", "source", u.Source, "pods", klog.KObjSlice(u.Pods))
		kl.HandlePodUpdates(u.Pods)
	case podsources.REMOVE:
		klog.V(2).InfoS("SyncLoop REMOVE", "source", u.Source, "pods", klog.KObjSlice(u.Pods))
		kl.HandlePodRemoves(u.Pods)
	case podsources.RECONCILE:
		klog.V(4).InfoS("SyncLoop RECONCILE", "source", u.Source, "pods", klog.KObjSlice(u.Pods))
		kl.HandlePodReconcile(u.Pods)
	case podsources.DELETE:
		klog.V(2).InfoS("SyncLoop DELETE", "source", u.Source, "pods", klog.KObjSlice(u.Pods))
		// Graceful deletion is an update carrying a deletion timestamp.
		kl.HandlePodUpdates(u.Pods)
	default:
		klog.ErrorS(nil, "Invalid operation type received", "operation", u.Op)
	}
}

// podsToSync returns the desired pods whose next sync is due.
func (kl *Kubelet) podsToSync() []*v1.Pod {
	due := map[types.UID]bool{}
	for _, uid := range kl.workQueue.GetWork() {
		due[uid] = true
	}
	var out []*v1.Pod
	now := kl.clock.Now()
	for _, p := range kl.pods.pods() {
		if due[p.UID] || kl.deadlinePassed(p, now) {
			out = append(out, p)
		}
	}
	return out
}

// deadlinePassed reports whether a running pod just passed its active
// deadline: its worker must sync it now to fail it.
func (kl *Kubelet) deadlinePassed(p *v1.Pod, now time.Time) bool {
	if p.Spec.ActiveDeadlineSeconds == nil {
		return false
	}
	return podstatus.DeadlinePassed(p, podstatus.LastStatus(kl.status, p), now)
}

// HandlePodAdditions admits new pods, oldest first, and starts them.
func (kl *Kubelet) HandlePodAdditions(pods []*v1.Pod) { kl.handlePodAdditions(pods, false) }

// handlePodAdditions admits new pods; pods restored from the journal keep
// the admission decision they had before the restart.
func (kl *Kubelet) handlePodAdditions(pods []*v1.Pod, restored bool) {
	start := kl.clock.Now()
	sort.SliceStable(pods, func(i, j int) bool {
		return pods[i].CreationTimestamp.Before(&pods[j].CreationTimestamp)
	})
	// active is what counts against the node before each pod: listed
	// once for the batch and extended pod by pod (each pod is judged
	// alone), not listed again per pod, which made a batch of n pods cost
	// n² (1.8 s of 10 at 5,000). A pod already known is a replacement:
	// then the list is taken afresh.
	var active []*v1.Pod
	listed := false
	// The grants are staged, not written: each pod's sync writes them
	// before its first container, and the sync loop does not wait for
	// the disk (under a burst's writeback an fsync took 100 ms and more).
	var updates []podworkers.UpdatePodOptions
	for _, pod := range pods {
		_, known := kl.pods.podByUID(pod.UID)
		if !listed || known {
			active, listed = kl.view.activePods(kl.pods.pods()), true
		}
		pod = kl.resizer.Resize(func() []*v1.Pod { return active }, pod)
		kl.pods.addOrUpdate(pod)
		pod, mirror, wasMirror := kl.pods.podAndMirror(pod)
		if wasMirror {
			if pod == nil {
				klog.V(2).InfoS("Unable to find pod for mirror pod, skipping", "mirrorPod", klog.KObj(mirror), "mirrorPodUID", mirror.UID)
				continue
			}
			updates = append(updates, podworkers.UpdatePodOptions{Pod: pod, MirrorPod: mirror, UpdateType: podworkers.UpdateUpdate, StartTime: start})
			continue
		}
		admitted := kl.admitAddition(pod, active, restored)
		// The next pod is judged beside this one as it is now (a rejected
		// pod is not active), not beside what it replaced.
		if known {
			active = slices.DeleteFunc(active, func(p *v1.Pod) bool { return p.UID == pod.UID })
		}
		active = append(active, kl.view.activePods([]*v1.Pod{pod})...)
		if !admitted {
			continue
		}
		updates = append(updates, podworkers.UpdatePodOptions{Pod: pod, MirrorPod: mirror, UpdateType: podworkers.UpdateCreate, StartTime: start})
	}
	for _, u := range updates {
		kl.workers.UpdatePod(u)
	}
}

// admitAddition admits an added pod beside the active ones (staging its
// grant), or rejects it; it reports whether the pod goes to its worker.
// Pods being terminated already went through admission, and a pod that
// already finished is never admitted again: its status stays what it
// ended with, and nothing of it starts.
func (kl *Kubelet) admitAddition(pod *v1.Pod, active []*v1.Pod, restored bool) bool {
	if kl.workers.IsPodTerminationRequested(pod.UID) || kl.view.terminalInStatus(pod) {
		return true
	}
	if v := kl.admitter.Admit(active, pod, restored); !v.Admitted() {
		kl.rejectPod(pod, v.Reason, v.Message)
		return false
	}
	kl.resizer.Allocate(pod)
	return true
}

// HandlePodUpdates hands changed pods to their workers.
func (kl *Kubelet) HandlePodUpdates(pods []*v1.Pod) {
	start := kl.clock.Now()
	for _, pod := range pods {
		pod = kl.resizer.Resize(kl.view.ActivePods, pod)
		kl.pods.addOrUpdate(pod)
		pod, mirror, wasMirror := kl.pods.podAndMirror(pod)
		if wasMirror && pod == nil {
			continue
		}
		updateType := podworkers.UpdateUpdate
		if wasMirror {
			updateType = podworkers.UpdateSync
		}
		kl.workers.UpdatePod(podworkers.UpdatePodOptions{Pod: pod, MirrorPod: mirror, UpdateType: updateType, StartTime: start})
	}
}

// HandlePodRemoves terminates pods that left their source.
func (kl *Kubelet) HandlePodRemoves(pods []*v1.Pod) {
	start := kl.clock.Now()
	for _, pod := range pods {
		kl.pods.remove(pod)
		pod, mirror, wasMirror := kl.pods.podAndMirror(pod)
		if wasMirror {
			if pod != nil {
				kl.workers.UpdatePod(podworkers.UpdatePodOptions{Pod: pod, MirrorPod: mirror, UpdateType: podworkers.UpdateUpdate, StartTime: start})
			}
			continue
		}
		if !kl.sources.AllReady() {
			// Housekeeping will terminate it once the sources are ready.
			klog.V(2).InfoS("Skipping delete because sources aren't ready yet", "pod", klog.KObj(pod), "podUID", pod.UID)
			continue
		}
		kl.workers.UpdatePod(podworkers.UpdatePodOptions{Pod: pod, UpdateType: podworkers.UpdateKill, StartTime: start})
	}
}

// HandlePodReconcile records pods whose status alone changed at the
// source, as seed 001 describes. nodelet owns pod status, so it acts only
// on a terminal phase reported by the source (the API server failing a
// pod), on a readiness gate whose change moves the Ready condition, and
// on an evicted pod, whose dead containers all go.
func (kl *Kubelet) HandlePodReconcile(pods []*v1.Pod) {
	start := kl.clock.Now()
	for _, pod := range pods {
		kl.pods.addOrUpdate(kl.resizer.AsRun(pod))
		pod, mirror, _ := kl.pods.podAndMirror(pod)
		if pod == nil {
			continue
		}
		if podutil.IsTerminal(pod.Status.Phase) || podstatus.ReadinessNeedsReconcile(pod) {
			kl.workers.UpdatePod(podworkers.UpdatePodOptions{Pod: pod, MirrorPod: mirror, UpdateType: podworkers.UpdateSync, StartTime: start})
		}
		if isEvicted(pod.Status) {
			kl.cleaner.containerDied(pod.UID)
		}
	}
}

// isEvicted reports whether a pod was evicted (upstream's eviction
// manager's reason, which the API and nodelet both set).
func isEvicted(s v1.PodStatus) bool { return s.Phase == v1.PodFailed && s.Reason == "Evicted" }

// HandlePodSyncs asks the workers to sync pods again.
func (kl *Kubelet) HandlePodSyncs(pods []*v1.Pod) {
	start := kl.clock.Now()
	for _, pod := range pods {
		pod, mirror, wasMirror := kl.pods.podAndMirror(pod)
		if wasMirror && pod == nil {
			continue
		}
		kl.workers.UpdatePod(podworkers.UpdatePodOptions{Pod: pod, MirrorPod: mirror, UpdateType: podworkers.UpdateSync, StartTime: start})
	}
}

// KillPod stops a pod that stays desired (the node shutting down, say)
// within gracePeriod seconds; status amends its final status. The channel
// closes once its containers are stopped.
func (kl *Kubelet) KillPod(pod *v1.Pod, gracePeriod int64, status func(*v1.PodStatus)) <-chan struct{} {
	return kl.kill(pod, gracePeriod, status, false)
}

// EvictPod is KillPod for an eviction: the pod workers count the pod as
// evicted, so its content (sandbox, writable layers, logs, volumes) is
// removed as soon as it stopped, not when its API object goes: the space
// the eviction was for is freed.
func (kl *Kubelet) EvictPod(pod *v1.Pod, gracePeriod int64, status func(*v1.PodStatus)) <-chan struct{} {
	return kl.kill(pod, gracePeriod, status, true)
}

func (kl *Kubelet) kill(pod *v1.Pod, gracePeriod int64, status func(*v1.PodStatus), evict bool) <-chan struct{} {
	done := make(chan struct{})
	pod, mirror, _ := kl.pods.podAndMirror(pod)
	kl.workers.UpdatePod(podworkers.UpdatePodOptions{
		Pod: pod, MirrorPod: mirror, UpdateType: podworkers.UpdateKill, StartTime: kl.clock.Now(),
		KillPodOptions: &podworkers.KillPodOptions{
			CompletedCh: done, PodStatusFunc: status, PodTerminationGracePeriodSecondsOverride: &gracePeriod, Evict: evict,
		},
	})
	return done
}

// rejectPod fails a pod that was not admitted: it never starts.
func (kl *Kubelet) rejectPod(pod *v1.Pod, reason, message string) {
	klog.InfoS("Pod was rejected", "pod", klog.KObj(pod), "podUID", pod.UID, "reason", reason, "message", message)
	kl.recorder.Event(pod, v1.EventTypeWarning, reason, message)
	kl.status.SetPodStatus(pod, v1.PodStatus{
		Phase: v1.PodFailed, Reason: reason, Message: "Pod was rejected: " + message, QOSClass: podutil.QOSClass(pod),
	})
}

// HandlePodCleanups reconciles the pod workers with the desired pods and
// the runtime: orphaned workers are driven to completion, runtime pods
// nobody wants are killed, pods whose worker finished but that are still
// desired are restarted, and leftovers of finished pods are removed.
func (kl *Kubelet) HandlePodCleanups(ctx context.Context) error {
	// The cgroups are read before the pods: a pod added meanwhile has a
	// cgroup that is not in this list, rather than one wrongly orphaned.
	cgroups, err := kl.cfg.Cgroups.PodCgroups()
	if err != nil {
		return fmt.Errorf("listing pod cgroups: %w", err)
	}
	all := kl.pods.pods()
	byUID := make(map[types.UID]*v1.Pod, len(all))
	for _, p := range all {
		byUID[p.UID] = p
	}
	working := kl.workers.SyncKnownPods(all)

	keep := map[types.UID]bool{}
	for uid := range byUID {
		keep[uid] = true
	}
	for uid := range working {
		keep[uid] = true
	}
	kl.status.RemoveOrphanedStatuses(keep)
	kl.probes.CleanupPods(keep)
	kl.retryDeferredResizes(all)
	kl.resizer.Forget(keep)

	running, err := kl.pleg.RuntimePods(ctx)
	if err != nil {
		return fmt.Errorf("listing runtime pods: %w", err)
	}
	// Restarts first: a pod started again is the workers' own, and what
	// is left running that they do not own is stopped.
	kl.restartUnknown(all, working)
	kl.killOrphans(running, byUID, working)

	// Whatever still has something in the runtime keeps its directory and
	// cgroup until garbage collection removed it.
	for _, rp := range running {
		keep[rp.ID] = true
	}
	active := kl.view.activePods(all)
	// On the loop, not the cleaner: a pod admitted after this list was
	// made must not lose what it was given.
	for _, release := range kl.cfg.Release {
		release(active)
	}
	kl.cleaner.request(cleanupRequest{keep: keep, cgroups: cgroups, active: active, runtime: running})
	kl.runtime.ForgetBackOffs()

	return nil
}

// restartUnknown starts again the desired pods the workers do not know:
// their previous incarnation under the same UID finished (a static pod
// put back). Pods that finished or were rejected stay as they are.
func (kl *Kubelet) restartUnknown(all []*v1.Pod, working map[types.UID]podworkers.PodWorkerSync) {
	start := kl.clock.Now()
	for _, p := range all {
		if _, known := working[p.UID]; known || kl.view.terminalInStatus(p) {
			continue
		}
		klog.V(3).InfoS("Pod will be restarted because it is in the desired set and not known to the pod workers", "pod", klog.KObj(p), "podUID", p.UID)
		kl.status.Reopen(p)
		kl.workers.UpdatePod(podworkers.UpdatePodOptions{Pod: p, MirrorPod: kl.pods.mirrorPodOf(p), UpdateType: podworkers.UpdateCreate, StartTime: start})
		working[p.UID] = podworkers.PodWorkerSync{State: podworkers.SyncPod}
	}
}

// killOrphans stops runtime pods that no worker runs: pods nobody wants
// any more, and desired pods that were not admitted (after a restart
// under pressure, or that no longer fit). Only the workers' pods run.
func (kl *Kubelet) killOrphans(running []*container.Pod, desired map[types.UID]*v1.Pod, working map[types.UID]podworkers.PodWorkerSync) {
	for _, rp := range running {
		if w, ok := working[rp.ID]; ok && (w.State == podworkers.SyncPod || w.State == podworkers.TerminatingPod) {
			continue
		}
		if !hasRunning(rp) {
			continue // nothing to stop; garbage collection removes it
		}
		if pod, ok := desired[rp.ID]; ok {
			why := "it is not running on this node"
			if s, ok := kl.status.GetPodStatus(pod.UID); ok && s.Reason != "" {
				why = fmt.Sprintf("it was not admitted (%s)", s.Reason)
			}
			klog.InfoS("Stopping the containers of a pod no worker runs", "pod", klog.KObj(pod), "podUID", pod.UID, "why", why)
			kl.recorder.Eventf(pod, v1.EventTypeWarning, "Killing", "Stopping the pod's containers: %s", why)
		}
		klog.V(3).InfoS("Clean up orphaned pod containers", "pod", klog.KRef(rp.Namespace, rp.Name), "podUID", rp.ID)
		one := int64(1)
		kl.workers.UpdatePod(podworkers.UpdatePodOptions{
			UpdateType: podworkers.UpdateKill, RunningPod: rp,
			KillPodOptions: &podworkers.KillPodOptions{PodTerminationGracePeriodSecondsOverride: &one},
		})
	}
}

func hasRunning(p *container.Pod) bool {
	for _, c := range p.Containers {
		// A Created container never started runs nothing, and stopping
		// it leaves it Created: counted here, housekeeping would kill the
		// pod every pass for ever, and each kill's worker kept garbage
		// collection from removing it. (Upstream lists running
		// containers only, too.)
		if c.State == container.StateRunning || c.State == container.StateUnknown {
			return true
		}
	}
	for _, s := range p.Sandboxes {
		if s.Ready {
			return true
		}
	}
	return false
}
