// Package podworkers drives every pod through its lifecycle, exactly once
// and in order, however updates race: the "pod workers" box of the
// pipeline, between the sync loop and the kubelet core's sync scripts.
//
// Each pod has at most one worker running at a time. A worker takes the
// pod's pending update, calls the matching Syncer method for the pod's
// state, records the outcome, and goes on while updates are pending:
//
//	            UpdatePod (create/update/sync)
//	                 │
//	                 ▼
//	 ┌──────────── SyncPod ◄──────┐  SyncPod succeeded or failed:
//	 │               │            │  resync later / back off
//	 │               └────────────┘
//	 │ deletionTimestamp, terminal phase,
//	 │ UpdateKill, orphaned, or SyncPod
//	 │ returned isTerminal
//	 ▼
//	TerminatingPod ◄─────┐  SyncTerminatingPod failed or was cancelled
//	 │    │              │  (grace period shortened): retry
//	 │    └──────────────┘
//	 │ SyncTerminatingPod succeeded
//	 ▼                                  runtime-only pod: after
//	TerminatedPod ◄──────┐              SyncTerminatingRuntimePod the
//	 │    │              │ failed:      worker is simply forgotten
//	 │    └──────────────┘ retry
//	 │ SyncTerminatedPod succeeded
//	 ▼
//	finished ── SyncKnownPods, pod gone from config ──► forgotten
//	         ── create with the same UID (restartRequested) ──► forgotten,
//	            then started afresh by the next update
//
// A pod never goes back: once termination is requested it cannot start
// again under the same UID until the worker is forgotten.
//
// Unlike upstream, no transition waits for the PLEG's next relist: when a
// worker needs a status newer than its last sync it reads the pod from the
// runtime on the spot (StatusSource.GetNewerThan).
//
// Workers are started through an Executor: in production each runs on a
// goroutine that exits when the pod has no more pending work; tests step
// them one at a time to get deterministic traces.
package podworkers

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/container"
	"github.com/nodelet/nodelet/pkg/podutil"
)

// ErrNetworkNotReady classifies sync errors that only need a short wait:
// the pod network is coming up.
var ErrNetworkNotReady = errors.New("network is not ready")

// RetryAfterError is what a sync returns when it made all the progress it
// could and must wait (a container or image back-off): the pod is synced
// again after Delay. It is not a failure.
type RetryAfterError struct {
	Delay  time.Duration
	Reason string
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%s: retry in %v", e.Reason, e.Delay.Round(time.Millisecond))
}

const (
	// backOffOnNetworkNotReady is the retry delay when the network is not ready.
	backOffOnNetworkNotReady = time.Second
	resyncJitterFactor       = 0.5
	backOffJitterFactor      = 0.5
)

// Options configure the pod workers.
type Options struct {
	Syncer         Syncer
	Status         StatusSource
	WorkQueue      *WorkQueue
	Clock          clock.Clock
	ResyncInterval time.Duration
	BackOffPeriod  time.Duration
	// Executor starts workers; nil means GoExecutor.
	Executor Executor
	// Jitter randomises a delay; nil means uniform jitter up to the factor.
	Jitter func(d time.Duration, factor float64) time.Duration
}

// PodWorkers is the set of per-pod workers and the source of truth for
// which pods may have running containers.
type PodWorkers struct {
	syncer         Syncer
	status         StatusSource
	workQueue      *WorkQueue
	clock          clock.Clock
	resyncInterval time.Duration
	backOffPeriod  time.Duration
	exec           Executor
	jitter         func(time.Duration, float64) time.Duration

	mu sync.Mutex
	// podsSynced is set by the first SyncKnownPods: from then on a pod the
	// workers do not know is known not to run.
	podsSynced bool
	statuses   map[types.UID]*podSyncStatus
	// active marks pods with a worker running (or scheduled to run).
	active map[types.UID]bool
	// startedStaticPodsByFullname and waitingToStartStaticPodsByFullname
	// make static pods with the same full name run one at a time, in the
	// order they arrived.
	startedStaticPodsByFullname        map[string]types.UID
	waitingToStartStaticPodsByFullname map[string][]types.UID
}

// New returns the pod workers.
func New(o Options) *PodWorkers {
	if o.Executor == nil {
		o.Executor = GoExecutor
	}
	if o.Jitter == nil {
		o.Jitter = jitter
	}
	return &PodWorkers{
		syncer:                             o.Syncer,
		status:                             o.Status,
		workQueue:                          o.WorkQueue,
		clock:                              o.Clock,
		resyncInterval:                     o.ResyncInterval,
		backOffPeriod:                      o.BackOffPeriod,
		exec:                               o.Executor,
		jitter:                             o.Jitter,
		statuses:                           map[types.UID]*podSyncStatus{},
		active:                             map[types.UID]bool{},
		startedStaticPodsByFullname:        map[string]types.UID{},
		waitingToStartStaticPodsByFullname: map[string][]types.UID{},
	}
}

func jitter(d time.Duration, factor float64) time.Duration {
	return d + time.Duration(rand.Float64()*factor*float64(d))
}

// podSyncStatus tracks one pod through the lifecycle.
type podSyncStatus struct {
	// ctx is cancelled to interrupt a sync in flight.
	ctx      context.Context
	cancelFn context.CancelFunc
	fullname string
	// working is true while an update is pending or being processed.
	working bool
	// pendingUpdate is the next update to process.
	pendingUpdate *UpdatePodOptions
	// activeUpdate is the latest update the worker acted on: what other
	// components see as the pod.
	activeUpdate *UpdatePodOptions
	syncedAt     time.Time
	startedAt    time.Time
	// lastSyncTime is when the last sync finished. It outlives the worker
	// goroutine, which exits whenever the pod is idle.
	lastSyncTime time.Time
	// terminatingAt is set when termination is requested.
	terminatingAt time.Time
	// terminatedAt is set when SyncTerminatingPod succeeded.
	terminatedAt time.Time
	// gracePeriod is the grace period in force once terminating.
	gracePeriod           int64
	notifyPostTerminating []chan<- struct{}
	statusPostTerminating []PodStatusFunc
	// startedTerminating is set once the worker acted on the termination:
	// from then on no container will start.
	startedTerminating bool
	// deleted: the pod was deleted in the API or vanished from config.
	deleted bool
	// evicted: the pod is being evicted; its content may go at once.
	evicted bool
	// finished: SyncTerminatedPod succeeded; the worker is done.
	finished bool
	// restartRequested: a create arrived for the UID while terminating.
	restartRequested bool
	// observedRuntime: the pod was seen in the runtime, so it must go
	// through a terminating sync even if it never started here.
	observedRuntime bool
}

func (s *podSyncStatus) IsTerminationRequested() bool { return !s.terminatingAt.IsZero() }
func (s *podSyncStatus) IsTerminationStarted() bool   { return s.startedTerminating }
func (s *podSyncStatus) IsTerminated() bool           { return !s.terminatedAt.IsZero() }
func (s *podSyncStatus) IsFinished() bool             { return s.finished }
func (s *podSyncStatus) IsEvicted() bool              { return s.evicted }
func (s *podSyncStatus) IsDeleted() bool              { return s.deleted }
func (s *podSyncStatus) IsStarted() bool              { return !s.startedAt.IsZero() }

// WorkType is the pod's current lifecycle state.
func (s *podSyncStatus) WorkType() State {
	switch {
	case s.IsTerminated():
		return TerminatedPod
	case s.IsTerminationRequested():
		return TerminatingPod
	default:
		return SyncPod
	}
}

// mergeLastUpdate makes an update the pod's visible state. The newest pod
// wins, except that a runtime-only placeholder never replaces a real pod;
// kill options are carried along.
func (s *podSyncStatus) mergeLastUpdate(other UpdatePodOptions) {
	opts := s.activeUpdate
	if opts == nil {
		opts = &UpdatePodOptions{}
		s.activeUpdate = opts
	}
	if opts.Pod == nil || other.RunningPod == nil {
		opts.Pod = other.Pod
	}
	opts.RunningPod = other.RunningPod
	if other.MirrorPod != nil {
		opts.MirrorPod = other.MirrorPod
	}
	if other.KillPodOptions != nil {
		opts.KillPodOptions = &KillPodOptions{Evict: other.KillPodOptions.Evict}
		if o := other.KillPodOptions.PodTerminationGracePeriodSecondsOverride; o != nil {
			v := *o
			opts.KillPodOptions.PodTerminationGracePeriodSecondsOverride = &v
		}
	}
}

// work is one unit a worker processes.
type work struct {
	state   State
	options UpdatePodOptions
}

// UpdatePod hands a pod change to its worker, starting one if needed. A
// pod becomes terminating when it is deleted, reaches a terminal phase, is
// killed or (for runtime-only pods) always. Once terminating, updates can
// only shorten its grace period.
func (p *PodWorkers) UpdatePod(options UpdatePodOptions) {
	var (
		isRuntimePod   bool
		uid            types.UID
		name, ns       string
		logUpdateType  = options.UpdateType
		runningPodOnly = options.RunningPod != nil && options.Pod == nil
	)
	switch {
	case runningPodOnly:
		if options.UpdateType != UpdateKill {
			klog.InfoS("Pod update is ignored, runtime pods can only be killed", "pod", klog.KRef(options.RunningPod.Namespace, options.RunningPod.Name), "podUID", options.RunningPod.ID, "updateType", logUpdateType)
			return
		}
		uid, ns, name = options.RunningPod.ID, options.RunningPod.Namespace, options.RunningPod.Name
		isRuntimePod = true
	case options.Pod == nil:
		klog.ErrorS(nil, "Pod update without a pod is ignored")
		return
	default:
		if options.RunningPod != nil {
			klog.InfoS("Pod update included RunningPod which is only valid when Pod is not specified", "pod", klog.KObj(options.Pod), "podUID", options.Pod.UID, "updateType", logUpdateType)
			options.RunningPod = nil
		}
		uid, ns, name = options.Pod.UID, options.Pod.Namespace, options.Pod.Name
	}

	p.mu.Lock()
	defer p.mu.Unlock()

	now := p.clock.Now()
	status, ok := p.statuses[uid]
	firstTime := !ok
	if firstTime {
		klog.V(4).InfoS("Pod is being synced for the first time", "pod", klog.KRef(ns, name), "podUID", uid, "updateType", logUpdateType)
		status = &podSyncStatus{syncedAt: now, fullname: podutil.BuildFullName(name, ns)}
		// A pod in a terminal phase seen for the first time (typically
		// after a nodelet restart) whose runtime state agrees has already
		// been through termination: only the cleanup is left to do.
		if options.Pod != nil && podutil.IsTerminal(options.Pod.Status.Phase) {
			if cached, err := p.status.Get(uid); err == nil && cached.IsTerminal() {
				status.terminatingAt, status.terminatedAt = now, now
				status.startedTerminating = true
			}
		}
		p.statuses[uid] = status
	}

	// A runtime-only pod is a stand-in: once the pod is known from config,
	// use its spec instead. Either way it has been seen in the runtime and
	// must be driven to completion.
	pod := options.Pod
	if isRuntimePod {
		status.observedRuntime = true
		switch {
		case status.pendingUpdate != nil && status.pendingUpdate.Pod != nil:
			pod = status.pendingUpdate.Pod
			options.Pod, options.RunningPod = pod, nil
		case status.activeUpdate != nil && status.activeUpdate.Pod != nil:
			pod = status.activeUpdate.Pod
			options.Pod, options.RunningPod = pod, nil
		default:
			pod = options.RunningPod.ToAPIPod()
		}
	}

	// A create for a UID that is already terminating means the UID was
	// reused (common with static pods, whose UID is their content hash):
	// remember it, and let SyncKnownPods clear the history once the old
	// incarnation is finished so the next update starts a new one.
	if !firstTime && status.IsTerminationRequested() && options.UpdateType == UpdateCreate {
		status.restartRequested = true
		klog.V(4).InfoS("Pod is terminating but has been requested to restart with same UID, will be reconciled later", "pod", klog.KRef(ns, name), "podUID", uid)
		return
	}

	if status.IsFinished() {
		klog.V(4).InfoS("Pod is finished processing, no further updates", "pod", klog.KRef(ns, name), "podUID", uid, "updateType", logUpdateType)
		return
	}

	var becameTerminating bool
	if !status.IsTerminationRequested() {
		switch {
		case isRuntimePod:
			klog.V(4).InfoS("Pod is orphaned and must be torn down", "pod", klog.KRef(ns, name), "podUID", uid)
			status.deleted = true
			status.terminatingAt = now
			becameTerminating = true
		case pod.DeletionTimestamp != nil:
			klog.V(4).InfoS("Pod is marked for graceful deletion, begin teardown", "pod", klog.KRef(ns, name), "podUID", uid)
			status.deleted = true
			status.terminatingAt = now
			becameTerminating = true
		case podutil.IsTerminal(pod.Status.Phase):
			klog.V(4).InfoS("Pod is in a terminal phase (success/failed), begin teardown", "pod", klog.KRef(ns, name), "podUID", uid)
			status.terminatingAt = now
			becameTerminating = true
		case options.UpdateType == UpdateKill:
			if options.KillPodOptions != nil && options.KillPodOptions.Evict {
				klog.V(4).InfoS("Pod is being evicted, begin teardown", "pod", klog.KRef(ns, name), "podUID", uid)
				status.evicted = true
			} else {
				klog.V(4).InfoS("Pod is being removed, begin teardown", "pod", klog.KRef(ns, name), "podUID", uid)
			}
			status.terminatingAt = now
			becameTerminating = true
		}
	}

	var gracePeriodShortened bool
	switch {
	case status.IsTerminated():
		// A runtime-only kill for a terminated pod comes from a stale
		// runtime view in housekeeping: ignore it until the worker is done.
		if isRuntimePod {
			klog.V(3).InfoS("Pod is waiting for termination, ignoring runtime-only kill until after pod worker is fully terminated", "pod", klog.KRef(ns, name), "podUID", uid)
			return
		}
		if options.KillPodOptions != nil {
			if ch := options.KillPodOptions.CompletedCh; ch != nil {
				close(ch)
			}
		}
		options.KillPodOptions = nil
	case status.IsTerminationRequested():
		if options.KillPodOptions == nil {
			options.KillPodOptions = &KillPodOptions{}
		}
		if ch := options.KillPodOptions.CompletedCh; ch != nil {
			status.notifyPostTerminating = append(status.notifyPostTerminating, ch)
		}
		if fn := options.KillPodOptions.PodStatusFunc; fn != nil {
			status.statusPostTerminating = append(status.statusPostTerminating, fn)
		}
		var grace int64
		grace, gracePeriodShortened = effectiveGracePeriod(status, pod, options.KillPodOptions)
		status.gracePeriod = grace
		// The terminating sync always gets the grace period to use.
		options.KillPodOptions.PodTerminationGracePeriodSecondsOverride = &grace
	default:
		// Kill options mean nothing outside termination.
		if options.KillPodOptions != nil {
			if ch := options.KillPodOptions.CompletedCh; ch != nil {
				close(ch)
			}
			options.KillPodOptions = nil
		}
	}

	if firstTime && podutil.IsStatic(pod) {
		// Static pods with the same full name start in arrival order.
		p.waitingToStartStaticPodsByFullname[status.fullname] = append(p.waitingToStartStaticPodsByFullname[status.fullname], uid)
	}

	// Keep the oldest start time so latency covers the whole wait.
	if status.pendingUpdate != nil && !status.pendingUpdate.StartTime.IsZero() && status.pendingUpdate.StartTime.Before(options.StartTime) {
		options.StartTime = status.pendingUpdate.StartTime
	}
	status.pendingUpdate = &options
	status.working = true
	klog.V(4).InfoS("Notifying pod of pending update", "pod", klog.KRef(ns, name), "podUID", uid, "workType", status.WorkType())
	p.wake(uid)

	if (becameTerminating || gracePeriodShortened) && status.cancelFn != nil {
		klog.V(3).InfoS("Cancelling current pod sync", "pod", klog.KRef(ns, name), "podUID", uid, "workType", status.WorkType())
		status.cancelFn()
	}
}

// wake makes sure a worker runs for the pod. Call with p.mu held; the
// executor must not run the worker before returning.
func (p *PodWorkers) wake(uid types.UID) {
	if p.active[uid] {
		return
	}
	p.active[uid] = true
	p.exec(func() { p.workerLoop(uid) })
}

// effectiveGracePeriod is the grace period a terminating pod gets: the
// smallest of the one in force, the API's deletion grace period and any
// kill override; the pod spec's (or the API default) when none of those
// was given. Never less than one second, and it only ever decreases. An
// explicit zero (a forced deletion) means as fast as possible: one second.
// The second result reports whether the grace period just decreased.
func effectiveGracePeriod(status *podSyncStatus, pod *v1.Pod, options *KillPodOptions) (int64, bool) {
	grace := status.gracePeriod // 0: not decided yet
	lower := func(v int64) {
		if v < 1 {
			v = 1
		}
		if grace == 0 || v < grace {
			grace = v
		}
	}
	if o := pod.DeletionGracePeriodSeconds; o != nil {
		lower(*o)
	}
	if options != nil && options.PodTerminationGracePeriodSecondsOverride != nil {
		lower(*options.PodTerminationGracePeriodSecondsOverride)
	}
	if grace == 0 {
		lower(podutil.GracePeriodSeconds(pod))
	}
	return grace, status.gracePeriod != 0 && status.gracePeriod != grace
}

// workerLoop processes a pod's updates until none is pending, then exits;
// the next update starts a new worker.
func (p *PodWorkers) workerLoop(uid types.UID) {
	for {
		ctx, w, lastSync, run := p.startPodSync(uid)
		if !run {
			return
		}
		p.processWork(ctx, uid, w, lastSync)
	}
}

// processWork runs one update through the Syncer and records the outcome.
func (p *PodWorkers) processWork(ctx context.Context, uid types.UID, w work, lastSyncTime time.Time) {
	ref := podRef(w.options)
	klog.V(4).InfoS("Processing pod event", "pod", ref, "podUID", uid, "updateType", w.state)
	var isTerminal bool
	err := func() error {
		var status *container.PodStatus
		if w.options.RunningPod == nil {
			var err error
			// The worker must see the effects of its own last sync: ask for
			// a status newer than it, read on demand if the cache is older.
			status, err = p.status.GetNewerThan(ctx, uid, w.options.Pod.Name, w.options.Pod.Namespace, lastSyncTime)
			if err != nil {
				return err
			}
		}
		var err error
		switch w.state {
		case TerminatedPod:
			err = p.syncer.SyncTerminatedPod(ctx, w.options.Pod, status)
		case TerminatingPod:
			var grace *int64
			if o := w.options.KillPodOptions; o != nil {
				grace = o.PodTerminationGracePeriodSecondsOverride
			}
			statusFn := p.acknowledgeTerminating(uid)
			if w.options.RunningPod != nil {
				err = p.syncer.SyncTerminatingRuntimePod(ctx, w.options.RunningPod)
			} else {
				err = p.syncer.SyncTerminatingPod(ctx, w.options.Pod, status, grace, statusFn)
			}
		default:
			isTerminal, err = p.syncer.SyncPod(ctx, w.options.UpdateType, w.options.Pod, w.options.MirrorPod, status)
		}
		p.recordSyncTime(uid)
		return err
	}()

	var phaseTransition bool
	switch {
	case errors.Is(err, context.Canceled):
		// Cancelled because an update is waiting: it runs next.
		klog.V(2).InfoS("Sync exited with context cancellation error", "pod", ref, "podUID", uid, "updateType", w.state)
	case errors.As(err, new(*RetryAfterError)):
		klog.V(4).InfoS("Pod is waiting for a back-off", "pod", ref, "podUID", uid, "wait", err)
	case err != nil:
		klog.ErrorS(err, "Error syncing pod, skipping", "pod", ref, "podUID", uid, "updateType", w.state)
	case w.state == TerminatedPod:
		p.completeTerminated(uid)
		klog.V(4).InfoS("Processing pod event done", "pod", ref, "podUID", uid, "updateType", w.state)
		return
	case w.state == TerminatingPod && w.options.RunningPod != nil:
		p.completeTerminatingRuntimePod(uid)
		klog.V(4).InfoS("Processing pod event done", "pod", ref, "podUID", uid, "updateType", w.state)
		return
	case w.state == TerminatingPod:
		p.completeTerminating(uid)
		phaseTransition = true
	case isTerminal:
		klog.V(4).InfoS("Pod is terminal", "pod", ref, "podUID", uid)
		p.completeSync(uid)
		phaseTransition = true
	}
	p.completeWork(uid, phaseTransition, err)
	klog.V(4).InfoS("Processing pod event done", "pod", ref, "podUID", uid, "updateType", w.state)
}

func podRef(o UpdatePodOptions) klog.ObjectRef {
	if o.Pod != nil {
		return klog.KObj(o.Pod)
	}
	if o.RunningPod != nil {
		return klog.KRef(o.RunningPod.Namespace, o.RunningPod.Name)
	}
	return klog.ObjectRef{}
}

// startPodSync takes the pod's pending update and reports whether the
// worker should run it. When it should not (no work left, the pod must
// wait for a static pod with its name, or can never start) the worker is
// retired under the same lock, so an update arriving meanwhile starts a
// new one instead of being lost.
func (p *PodWorkers) startPodSync(uid types.UID) (ctx context.Context, w work, lastSync time.Time, run bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	status, exists := p.statuses[uid]
	if !exists {
		klog.V(4).InfoS("Pod worker no longer has status, worker should exit", "podUID", uid)
		delete(p.active, uid)
		return nil, w, lastSync, false
	}
	if status.pendingUpdate == nil || status.finished {
		status.working = false
		delete(p.active, uid)
		return nil, w, lastSync, false
	}
	w.state = status.WorkType()
	w.options = *status.pendingUpdate
	status.pendingUpdate = nil

	if status.ctx == nil || status.ctx.Err() != nil {
		status.ctx, status.cancelFn = context.WithCancel(context.Background())
	}
	ctx, lastSync = status.ctx, status.lastSyncTime

	switch {
	case status.IsStarted():
	case w.options.RunningPod != nil && w.state == TerminatingPod:
		// A runtime-only pod goes straight to terminating.
	case w.options.Pod == nil:
		klog.V(4).InfoS("Running pod cannot start ever, programmer error", "podUID", uid)
		status.mergeLastUpdate(w.options)
		delete(p.active, uid)
		return nil, w, lastSync, false
	default:
		canStart, canEverStart := p.allowPodStart(w.options.Pod, status)
		switch {
		case !canEverStart:
			klog.V(4).InfoS("Pod cannot start ever", "pod", klog.KObj(w.options.Pod), "podUID", uid, "updateType", w.state)
			p.cleanupUnstartedPod(w.options.Pod, status)
			delete(p.active, uid)
			return nil, w, lastSync, false
		case !canStart:
			// Wait for the static pod ahead of us; it wakes us when done.
			klog.V(4).InfoS("Pod cannot start yet", "pod", klog.KObj(w.options.Pod), "podUID", uid)
			status.pendingUpdate = &w.options
			status.working = false
			delete(p.active, uid)
			return nil, w, lastSync, false
		}
		status.startedAt = p.clock.Now()
	}
	status.mergeLastUpdate(w.options)
	if w.state == TerminatingPod && w.options.Pod != nil {
		// Transitions replay the last update, which may predate the
		// termination: the terminating sync must still get the grace
		// period in force.
		if status.gracePeriod == 0 {
			status.gracePeriod, _ = effectiveGracePeriod(status, w.options.Pod, nil)
		}
		grace := status.gracePeriod
		kill := KillPodOptions{}
		if w.options.KillPodOptions != nil {
			kill = *w.options.KillPodOptions
		}
		kill.PodTerminationGracePeriodSecondsOverride = &grace
		w.options.KillPodOptions = &kill
	}
	return ctx, w, lastSync, true
}

// recordSyncTime notes when the pod's last sync finished: the next sync
// must see a runtime status at least that new.
func (p *PodWorkers) recordSyncTime(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.statuses[uid]; ok {
		s.lastSyncTime = p.clock.Now()
	}
}

// allowPodStart decides whether a pod may start now and whether it ever
// can. Only static pods wait: two with the same full name never run at once.
func (p *PodWorkers) allowPodStart(pod *v1.Pod, status *podSyncStatus) (canStart, canEverStart bool) {
	if !podutil.IsStatic(pod) {
		return true, true
	}
	if status.IsTerminationRequested() {
		return false, false
	}
	if !p.allowStaticPodStart(status.fullname, pod.UID) {
		// Safety net: the pod ahead wakes us when it finishes.
		p.workQueue.Enqueue(pod.UID, p.jitter(p.backOffPeriod, backOffJitterFactor))
		return false, true
	}
	return true, true
}

// allowStaticPodStart lets a static pod start when no other pod with its
// full name runs and it is first in line. Call with p.mu held.
func (p *PodWorkers) allowStaticPodStart(fullname string, uid types.UID) bool {
	if started, ok := p.startedStaticPodsByFullname[fullname]; ok {
		return started == uid
	}
	waiting := p.waitingToStartStaticPodsByFullname[fullname]
	for i, w := range waiting {
		s, ok := p.statuses[w]
		if !ok || s.IsTerminationRequested() || s.IsTerminated() {
			continue // gone or terminating: it will never start
		}
		if w != uid {
			p.waitingToStartStaticPodsByFullname[fullname] = waiting[i:]
			return false
		}
		waiting = waiting[i+1:]
		break
	}
	if len(waiting) > 0 {
		p.waitingToStartStaticPodsByFullname[fullname] = waiting
	} else {
		delete(p.waitingToStartStaticPodsByFullname, fullname)
	}
	p.startedStaticPodsByFullname[fullname] = uid
	return true
}

// releaseStaticPod frees a static pod's full name and wakes the next pod
// waiting for it. Call with p.mu held.
func (p *PodWorkers) releaseStaticPod(fullname string, uid types.UID) {
	if p.startedStaticPodsByFullname[fullname] != uid {
		return
	}
	delete(p.startedStaticPodsByFullname, fullname)
	for _, w := range p.waitingToStartStaticPodsByFullname[fullname] {
		if s, ok := p.statuses[w]; ok && s.pendingUpdate != nil && !s.IsTerminationRequested() {
			s.working = true
			p.wake(w)
			return
		}
	}
}

// cleanupUnstartedPod finishes a pod that was terminated before it could
// start: there is nothing to tear down. Call with p.mu held.
func (p *PodWorkers) cleanupUnstartedPod(pod *v1.Pod, status *podSyncStatus) {
	status.finished = true
	status.working = false
	status.terminatedAt = p.clock.Now()
	p.releaseStaticPod(status.fullname, pod.UID)
}

// acknowledgeTerminating records that the worker acted on the termination,
// so no component starts containers any more, and returns the status
// function the terminating sync must apply.
func (p *PodWorkers) acknowledgeTerminating(uid types.UID) PodStatusFunc {
	p.mu.Lock()
	defer p.mu.Unlock()
	status, ok := p.statuses[uid]
	if !ok {
		return nil
	}
	if !status.terminatingAt.IsZero() && !status.startedTerminating {
		klog.V(4).InfoS("Pod worker has observed request to terminate", "podUID", uid)
		status.startedTerminating = true
	}
	if l := len(status.statusPostTerminating); l > 0 {
		return status.statusPostTerminating[l-1]
	}
	return nil
}

// completeSync moves a pod that ended on its own (a non-Always pod whose
// containers exited) to terminating.
func (p *PodWorkers) completeSync(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	status, ok := p.statuses[uid]
	if !ok {
		return
	}
	if status.terminatingAt.IsZero() {
		status.terminatingAt = p.clock.Now()
	}
	status.startedTerminating = true
	p.requeueLastPodUpdate(uid, status)
}

// completeTerminating records that no container runs any more: anyone
// waiting for the kill is told, and the terminated step runs next.
func (p *PodWorkers) completeTerminating(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	status, ok := p.statuses[uid]
	if !ok {
		return
	}
	status.terminatedAt = p.clock.Now()
	for _, ch := range status.notifyPostTerminating {
		close(ch)
	}
	status.notifyPostTerminating = nil
	status.statusPostTerminating = nil
	p.requeueLastPodUpdate(uid, status)
}

// completeTerminatingRuntimePod forgets a runtime-only pod once it is
// stopped: it has no configuration and no API object to report to.
func (p *PodWorkers) completeTerminatingRuntimePod(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	status, ok := p.statuses[uid]
	if !ok {
		return
	}
	status.terminatedAt = p.clock.Now()
	status.finished = true
	status.working = false
	p.releaseStaticPod(status.fullname, uid)
	delete(p.statuses, uid)
}

// completeTerminated marks the pod finished: the worker is done with it.
func (p *PodWorkers) completeTerminated(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	status, ok := p.statuses[uid]
	if !ok {
		return
	}
	status.finished = true
	status.working = false
	p.releaseStaticPod(status.fullname, uid)
}

// requeueLastPodUpdate replays the last update so the worker moves on to
// the next state at once. Call with p.mu held.
func (p *PodWorkers) requeueLastPodUpdate(uid types.UID, status *podSyncStatus) {
	if status.pendingUpdate != nil || status.activeUpdate == nil {
		return
	}
	copied := *status.activeUpdate
	status.pendingUpdate = &copied
	status.working = true
	p.wake(uid)
}

// completeWork schedules the pod's next sync: at once after a phase
// transition, when its back-off ends if it is waiting for one, after the
// resync interval on success, soon when the network is not ready, after a
// back-off on other errors.
func (p *PodWorkers) completeWork(uid types.UID, phaseTransition bool, syncErr error) {
	var retry *RetryAfterError
	switch {
	case phaseTransition:
		p.workQueue.Enqueue(uid, 0)
	case errors.As(syncErr, &retry):
		p.workQueue.Enqueue(uid, retry.Delay)
	case syncErr == nil:
		p.workQueue.Enqueue(uid, p.jitter(p.resyncInterval, resyncJitterFactor))
	case errors.Is(syncErr, ErrNetworkNotReady):
		p.workQueue.Enqueue(uid, p.jitter(backOffOnNetworkNotReady, backOffJitterFactor))
	default:
		p.workQueue.Enqueue(uid, p.jitter(p.backOffPeriod, backOffJitterFactor))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if status, ok := p.statuses[uid]; ok && status.pendingUpdate == nil {
		status.working = false
	}
}

// SyncKnownPods reconciles the workers with the desired pods: workers of
// pods no longer desired are driven to completion and, once finished,
// forgotten; a finished pod whose UID was recreated is forgotten so it can
// start again. It returns what it knows about the remaining workers; the
// caller must send a create for desired pods missing from it.
func (p *PodWorkers) SyncKnownPods(desired []*v1.Pod) map[types.UID]PodWorkerSync {
	known := podutil.UIDs(desired)
	workers := map[types.UID]PodWorkerSync{}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.podsSynced = true
	for uid, status := range p.statuses {
		orphan := !known[uid]
		if status.restartRequested || orphan {
			if p.removeTerminatedWorker(uid, status, orphan) {
				continue
			}
		}
		sync := PodWorkerSync{State: status.WorkType(), Orphan: orphan}
		var pod *v1.Pod
		switch {
		case status.activeUpdate != nil:
			pod = status.activeUpdate.Pod
		case status.pendingUpdate != nil:
			pod = status.pendingUpdate.Pod
		}
		if pod != nil {
			sync.HasConfig = true
			sync.Static = podutil.IsStatic(pod)
		}
		workers[uid] = sync
	}
	return workers
}

// removeTerminatedWorker forgets a finished worker, or pushes an orphan
// towards finishing. It reports whether the worker is gone. Call with p.mu
// held.
func (p *PodWorkers) removeTerminatedWorker(uid types.UID, status *podSyncStatus, orphaned bool) bool {
	if !status.finished {
		if !orphaned {
			klog.V(4).InfoS("Pod worker has been requested for removal but is still not fully terminated", "podUID", uid)
			return false
		}
		status.deleted = true
		switch {
		case !status.IsStarted() && !status.observedRuntime:
			// Never started: forget it; its worker exits without a sync.
			klog.V(4).InfoS("Pod is orphaned and has not been started", "podUID", uid)
		case !status.IsTerminationRequested():
			status.terminatingAt = p.clock.Now()
			if status.activeUpdate != nil && status.activeUpdate.Pod != nil {
				status.gracePeriod, _ = effectiveGracePeriod(status, status.activeUpdate.Pod, nil)
			} else {
				status.gracePeriod = 1
			}
			p.requeueLastPodUpdate(uid, status)
			klog.V(4).InfoS("Pod is orphaned and still running, began terminating", "podUID", uid)
			return false
		default:
			p.requeueLastPodUpdate(uid, status)
			klog.V(4).InfoS("Pod is orphaned and still terminating, notified the pod worker", "podUID", uid)
			return false
		}
	}
	if status.restartRequested {
		klog.V(4).InfoS("Pod has terminated but another pod with the same UID was created, remove history to allow restart", "podUID", uid)
	} else {
		klog.V(4).InfoS("Pod has been terminated and is no longer known to the kubelet, remove all history", "podUID", uid)
	}
	delete(p.statuses, uid)
	p.releaseStaticPod(status.fullname, uid)
	return true
}

// query answers a question about a pod from its status, or with
// unknown when the workers do not know the pod.
func (p *PodWorkers) query(uid types.UID, known func(*podSyncStatus) bool, unknown func() bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.statuses[uid]; ok {
		return known(s)
	}
	return unknown()
}

func (p *PodWorkers) synced() bool    { return p.podsSynced }
func (p *PodWorkers) notSynced() bool { return !p.podsSynced }
func never() bool                     { return false }

// IsPodKnownTerminated reports whether the pod's containers are known to
// have all stopped. Unknown pods are not known terminated.
func (p *PodWorkers) IsPodKnownTerminated(uid types.UID) bool {
	return p.query(uid, (*podSyncStatus).IsTerminated, never)
}

// CouldHaveRunningContainers reports whether the pod may have running
// containers: true until it is terminated, and for every pod until the
// first SyncKnownPods.
func (p *PodWorkers) CouldHaveRunningContainers(uid types.UID) bool {
	return p.query(uid, func(s *podSyncStatus) bool { return !s.IsTerminated() }, p.notSynced)
}

// ShouldPodBeFinished reports whether SyncTerminatedPod completed.
func (p *PodWorkers) ShouldPodBeFinished(uid types.UID) bool {
	return p.query(uid, (*podSyncStatus).IsFinished, p.synced)
}

// IsPodTerminationRequested reports whether termination was requested
// for a known pod.
func (p *PodWorkers) IsPodTerminationRequested(uid types.UID) bool {
	return p.query(uid, (*podSyncStatus).IsTerminationRequested, never)
}

// ShouldPodContainersBeTerminating reports whether the worker acted on a
// termination: from then on no container of the pod starts.
func (p *PodWorkers) ShouldPodContainersBeTerminating(uid types.UID) bool {
	return p.query(uid, (*podSyncStatus).IsTerminationStarted, p.synced)
}

// ShouldPodRuntimeBeRemoved reports whether resources tied to running
// containers may be released.
func (p *PodWorkers) ShouldPodRuntimeBeRemoved(uid types.UID) bool {
	return p.query(uid, (*podSyncStatus).IsTerminated, p.synced)
}

// ShouldPodContentBeRemoved reports whether everything of the pod (dead
// containers, logs, volumes) may be removed: it was evicted, or deleted and
// terminated.
func (p *PodWorkers) ShouldPodContentBeRemoved(uid types.UID) bool {
	return p.query(uid, func(s *podSyncStatus) bool { return s.IsEvicted() || (s.IsDeleted() && s.IsTerminated()) }, p.synced)
}

// IsPodForMirrorPodTerminatingByFullName reports whether the static pod
// with the full name is terminating and not done yet.
func (p *PodWorkers) IsPodForMirrorPodTerminatingByFullName(fullname string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	uid, ok := p.startedStaticPodsByFullname[fullname]
	if !ok {
		return false
	}
	s, ok := p.statuses[uid]
	if !ok {
		return false
	}
	return s.IsTerminationRequested() && !s.IsTerminated()
}
