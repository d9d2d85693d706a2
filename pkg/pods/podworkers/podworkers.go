// Package podworkers drives every pod through its lifecycle, exactly once
// and in order, however updates race: the "pod workers" box of the
// pipeline, between the sync loop and the kubelet core's sync scripts.
//
// Each pod has at most one worker running at a time. A worker takes the
// pod's pending update, calls the matching Syncer method for the pod's
// state, records the outcome, and goes on while updates are pending. The
// state is one lifecycle value per pod:
//
//	            UpdatePod (create/update/sync)
//	                 │
//	                 ▼
//	 ┌──────────── sync ◄─────────┐  SyncPod succeeded or failed:
//	 │               │            │  resync later / back off
//	 │               └────────────┘
//	 │ deletionTimestamp, terminal phase, UpdateKill, orphaned
//	 ▼
//	terminating-requested ─── the worker takes the update ───┐
//	 │                                                        │
//	 │ (SyncPod returned isTerminal: straight here)           ▼
//	 └──────────────────────────────────────────────► terminating ◄─┐
//	                                                   │   │         │ SyncTerminatingPod
//	                                                   │   └─────────┘ failed or cancelled
//	                     SyncTerminatingPod succeeded  │               (grace shortened): retry
//	                                                   ▼
//	                     runtime-only pod: forgotten ◄─┤
//	                                                   ▼
//	                                              terminated ◄─┐
//	                                                   │   │    │ SyncTerminatedPod
//	                                                   │   └────┘ failed: retry
//	                     SyncTerminatedPod succeeded   ▼
//	 never started (terminated before its turn) ──► finished
//	   (unless the runtime runs it: then to terminating)│
//	     SyncKnownPods, pod gone from config ──────────┤
//	     create with the same UID (restartRequested) ──┴──► forgotten; the
//	                                                        next update starts afresh
//
// Other components ask about pods by UID. For a known pod each answer
// follows from its state; for a pod the workers do not know, the answer
// depends on whether the first SyncKnownPods has run (after it, an unknown
// pod is one that finished and was forgotten):
//
//	question                          true from state         unknown, before / after sync
//	IsPodTerminationRequested         terminating-requested   false / false
//	ShouldPodContainersBeTerminating  terminating             false / true
//	IsPodKnownTerminated              terminated              false / false
//	ShouldPodRuntimeBeRemoved         terminated              false / true
//	CouldHaveRunningContainers        until terminated        true  / false
//	ShouldPodBeFinished               finished                false / true
//	ShouldPodContentBeRemoved         evicted, or deleted     false / true
//	                                  and terminated
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
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/infra/periodic"
	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/runtime/container"
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
	Syncer Syncer
	// Observers watch each call into Syncer, in order (the timeline, the
	// metrics, the tracer); none for no instrumentation.
	Observers      []instrument.SyncObserver
	Status         StatusSource
	WorkQueue      *WorkQueue
	Clock          clock.Clock
	ResyncInterval time.Duration
	BackOffPeriod  time.Duration
	// Executor starts workers; nil means GoExecutor.
	Executor Executor
	// Jitter randomises a delay; nil means uniform jitter up to the factor.
	Jitter func(d time.Duration, factor float64) time.Duration
	// Recorder receives the FailedSync event of a pod whose runtime
	// status could not be read; nil records nothing.
	Recorder record.EventRecorder
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
	recorder       record.EventRecorder

	mu sync.Mutex
	// podsSynced is set by the first SyncKnownPods: from then on a pod the
	// workers do not know is known not to run.
	podsSynced bool
	statuses   map[types.UID]*podSyncStatus
	// active marks pods with a worker running (or scheduled to run).
	active map[types.UID]bool
	// staticPods makes static pods with the same full name run one at a
	// time, in the order they arrived.
	staticPods staticPods

	// base is every pod's sync context: Run cancels it when nodelet
	// stops, then waits for the workers (running) before returning, so no
	// sync calls the runtime after its connection closes.
	base    context.Context
	cancel  context.CancelFunc
	running sync.WaitGroup
	// stopped: no worker starts any more.
	stopped bool
}

// New returns the pod workers.
func New(o Options) *PodWorkers {
	if o.Executor == nil {
		o.Executor = GoExecutor
	}
	if o.Jitter == nil {
		o.Jitter = jitter
	}
	if o.Recorder == nil {
		o.Recorder = &record.FakeRecorder{}
	}
	base, cancel := context.WithCancel(context.Background())
	return &PodWorkers{
		base: base, cancel: cancel,
		syncer:         observe(o.Syncer, o.Observers),
		status:         o.Status,
		workQueue:      o.WorkQueue,
		clock:          o.Clock,
		resyncInterval: o.ResyncInterval,
		backOffPeriod:  o.BackOffPeriod,
		exec:           o.Executor,
		jitter:         o.Jitter,
		recorder:       o.Recorder,
		statuses:       map[types.UID]*podSyncStatus{},
		active:         map[types.UID]bool{},
		staticPods:     newStaticPods(),
	}
}

func jitter(d time.Duration, factor float64) time.Duration {
	return d + time.Duration(rand.Float64()*factor*float64(d))
}

// lifecycle is where a pod's worker is. It only moves forward; the
// timestamps in podSyncStatus record when it moved, and nothing decides on
// them.
type lifecycle int

const (
	// syncing: the pod is set up and kept running (State SyncPod).
	syncing lifecycle = iota
	// terminationRequested: the pod must stop, but its worker has not yet
	// acted on it (State TerminatingPod).
	terminationRequested
	// terminating: the worker acted on the termination; no container of
	// the pod starts from now on (State TerminatingPod).
	terminating
	// terminated: nothing of the pod runs; its resources are being
	// released (State TerminatedPod).
	terminated
	// finished: SyncTerminatedPod succeeded, or the pod was stopped before
	// it ever started. The worker is done until it is forgotten.
	finished
)

func (l lifecycle) String() string {
	return [...]string{"sync", "terminating-requested", "terminating", "terminated", "finished"}[l]
}

// podSyncStatus tracks one pod through the lifecycle.
type podSyncStatus struct {
	// state is where the pod is; see lifecycle.
	state lifecycle
	// ctx is cancelled to interrupt a sync in flight.
	ctx      context.Context
	cancelFn context.CancelFunc
	fullname string
	// pendingUpdate is the next update to process.
	pendingUpdate *UpdatePodOptions
	// activeUpdate is the latest update the worker acted on: what other
	// components see as the pod.
	activeUpdate *UpdatePodOptions
	// started: the worker has begun syncing the pod (a static pod may
	// have to wait for another with its name first).
	started bool
	// lastSyncTime is when the last sync finished. It outlives the worker
	// goroutine, which exits whenever the pod is idle.
	lastSyncTime time.Time
	// gracePeriod is the grace period in force once terminating.
	gracePeriod           int64
	notifyPostTerminating []chan<- struct{}
	statusPostTerminating []PodStatusFunc
	// deleted: the pod was deleted in the API or vanished from config.
	deleted bool
	// evicted: the pod is being evicted; its content may go at once.
	evicted bool
	// restartRequested: a create arrived for the UID while terminating.
	restartRequested bool
	// observedRuntime: the pod was seen in the runtime, so it must go
	// through a terminating sync even if it never started here.
	observedRuntime bool
}

// advance moves the pod forward to l, never back.
func (s *podSyncStatus) advance(l lifecycle) {
	if l > s.state {
		s.state = l
	}
}

func (s *podSyncStatus) IsTerminationRequested() bool { return s.state >= terminationRequested }
func (s *podSyncStatus) IsTerminationStarted() bool   { return s.state >= terminating }
func (s *podSyncStatus) IsTerminated() bool           { return s.state >= terminated }
func (s *podSyncStatus) IsFinished() bool             { return s.state == finished }
func (s *podSyncStatus) IsEvicted() bool              { return s.evicted }
func (s *podSyncStatus) IsDeleted() bool              { return s.deleted }
func (s *podSyncStatus) IsStarted() bool              { return s.started }

// WorkType is the Syncer method the pod's state calls for.
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

// update is a pod change UpdatePod accepted: the pod it is about, and
// whether only the runtime knows it.
type update struct {
	uid         types.UID
	ns, name    string
	runtimeOnly bool
	options     UpdatePodOptions
}

// UpdatePod hands a pod change to its worker, starting one if needed. It
// classifies the update (which pod, is it valid), moves the pod's state
// on (a pod becomes terminating when it is deleted, reaches a terminal
// phase, is killed or, for runtime-only pods, always; once terminating,
// updates can only shorten its grace period) and queues the update for
// the worker.
func (p *PodWorkers) UpdatePod(options UpdatePodOptions) {
	u, ok := classify(options)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	status, firstTime := p.statusFor(u)
	pod := u.pod(status)
	if !firstTime && status.IsTerminationRequested() && u.options.UpdateType == UpdateCreate {
		// The UID was reused (common with static pods, whose UID is their
		// content hash): SyncKnownPods clears the history once the old
		// incarnation is finished, so the next update starts a new one.
		status.restartRequested = true
		klog.V(4).InfoS("Pod is terminating but has been requested to restart with same UID, will be reconciled later", "pod", klog.KRef(u.ns, u.name), "podUID", u.uid)
		return
	}
	if status.IsFinished() {
		klog.V(4).InfoS("Pod is finished processing, no further updates", "pod", klog.KRef(u.ns, u.name), "podUID", u.uid, "updateType", u.options.UpdateType)
		return
	}
	becameTerminating := transition(status, u, pod)
	gracePeriodShortened, proceed := killOptions(status, &u, pod)
	if !proceed {
		return
	}
	if firstTime && podutil.IsStatic(pod) {
		// Static pods with the same full name start in arrival order.
		p.staticPods.wait(status.fullname, u.uid)
	}
	p.enqueue(status, u, becameTerminating || gracePeriodShortened)
}

// classify checks an update and names its pod: a runtime-only pod can
// only be killed, and a pod update carries no runtime pod.
func classify(options UpdatePodOptions) (update, bool) {
	switch {
	case options.RunningPod != nil && options.Pod == nil:
		rp := options.RunningPod
		if options.UpdateType != UpdateKill {
			klog.InfoS("Pod update is ignored, runtime pods can only be killed", "pod", klog.KRef(rp.Namespace, rp.Name), "podUID", rp.ID, "updateType", options.UpdateType)
			return update{}, false
		}
		return update{uid: rp.ID, ns: rp.Namespace, name: rp.Name, runtimeOnly: true, options: options}, true
	case options.Pod == nil:
		klog.ErrorS(nil, "Pod update without a pod is ignored")
		return update{}, false
	}
	if options.RunningPod != nil {
		klog.InfoS("Pod update included RunningPod which is only valid when Pod is not specified", "pod", klog.KObj(options.Pod), "podUID", options.Pod.UID, "updateType", options.UpdateType)
		options.RunningPod = nil
	}
	return update{uid: options.Pod.UID, ns: options.Pod.Namespace, name: options.Pod.Name, options: options}, true
}

// statusFor returns the pod's status, making it the first time. A pod in
// a terminal phase seen for the first time (typically after a nodelet
// restart) whose runtime state agrees has already been through
// termination: only the cleanup is left to do. Call with p.mu held.
func (p *PodWorkers) statusFor(u update) (*podSyncStatus, bool) {
	if status, ok := p.statuses[u.uid]; ok {
		return status, false
	}
	klog.V(4).InfoS("Pod is being synced for the first time", "pod", klog.KRef(u.ns, u.name), "podUID", u.uid, "updateType", u.options.UpdateType)
	status := &podSyncStatus{fullname: podutil.BuildFullName(u.name, u.ns)}
	if pod := u.options.Pod; pod != nil && podutil.IsTerminal(pod.Status.Phase) {
		if cached, err := p.status.Get(u.uid); err == nil && cached.IsTerminal() {
			status.advance(terminated)
		}
	}
	p.statuses[u.uid] = status
	return status, true
}

// pod is the pod an update is about. A runtime-only pod is a stand-in:
// once the pod is known from config its spec is used instead, and the
// update carries it. Either way the pod has been seen in the runtime and
// must be driven to completion.
func (u *update) pod(status *podSyncStatus) *v1.Pod {
	if !u.runtimeOnly {
		return u.options.Pod
	}
	status.observedRuntime = true
	for _, known := range []*UpdatePodOptions{status.pendingUpdate, status.activeUpdate} {
		if known != nil && known.Pod != nil {
			u.options.Pod, u.options.RunningPod = known.Pod, nil
			return known.Pod
		}
	}
	return u.options.RunningPod.ToAPIPod()
}

// transition requests the pod's termination if the update calls for it,
// and reports whether it did.
func transition(status *podSyncStatus, u update, pod *v1.Pod) bool {
	if status.IsTerminationRequested() {
		return false
	}
	ref := klog.KRef(u.ns, u.name)
	switch {
	case u.runtimeOnly:
		klog.V(4).InfoS("Pod is orphaned and must be torn down", "pod", ref, "podUID", u.uid)
		status.deleted = true
	case pod.DeletionTimestamp != nil:
		klog.V(4).InfoS("Pod is marked for graceful deletion, begin teardown", "pod", ref, "podUID", u.uid)
		status.deleted = true
	case podutil.IsTerminal(pod.Status.Phase):
		klog.V(4).InfoS("Pod is in a terminal phase (success/failed), begin teardown", "pod", ref, "podUID", u.uid)
	case u.options.UpdateType == UpdateKill:
		status.evicted = u.options.KillPodOptions != nil && u.options.KillPodOptions.Evict
		klog.V(4).InfoS("Pod is being removed, begin teardown", "pod", ref, "podUID", u.uid, "evicted", status.evicted)
	default:
		return false
	}
	status.advance(terminationRequested)
	return true
}

// killOptions makes an update's kill options fit the pod's state: a
// terminating pod's waiters and status functions are kept and the grace
// period in force is set (reporting whether it just shortened); elsewhere
// they mean nothing, and anyone waiting is told at once. It reports
// whether the update goes to the worker at all.
func killOptions(status *podSyncStatus, u *update, pod *v1.Pod) (gracePeriodShortened, proceed bool) {
	kill := u.options.KillPodOptions
	switch {
	case status.IsTerminated():
		// A runtime-only kill for a terminated pod comes from a stale
		// runtime view in housekeeping: ignore it until the worker is done.
		if u.runtimeOnly {
			klog.V(3).InfoS("Pod is waiting for termination, ignoring runtime-only kill until after pod worker is fully terminated", "pod", klog.KRef(u.ns, u.name), "podUID", u.uid)
			return false, false
		}
		closeCompleted(kill)
		u.options.KillPodOptions = nil
	case status.IsTerminationRequested():
		if kill == nil {
			kill = &KillPodOptions{}
			u.options.KillPodOptions = kill
		}
		if kill.CompletedCh != nil {
			status.notifyPostTerminating = append(status.notifyPostTerminating, kill.CompletedCh)
		}
		if kill.PodStatusFunc != nil {
			status.statusPostTerminating = append(status.statusPostTerminating, kill.PodStatusFunc)
		}
		var grace int64
		grace, gracePeriodShortened = effectiveGracePeriod(status, pod, kill)
		status.gracePeriod = grace
		// The terminating sync always gets the grace period to use.
		kill.PodTerminationGracePeriodSecondsOverride = &grace
	default:
		closeCompleted(kill)
		u.options.KillPodOptions = nil
	}
	return gracePeriodShortened, true
}

// closeCompleted tells whoever waits for a kill that there is nothing to
// wait for.
func closeCompleted(kill *KillPodOptions) {
	if kill != nil && kill.CompletedCh != nil {
		close(kill.CompletedCh)
	}
}

// enqueue makes the update the pod's next work and wakes its worker,
// interrupting a sync in flight when the pod just became terminating or
// its grace period shortened. Call with p.mu held.
func (p *PodWorkers) enqueue(status *podSyncStatus, u update, interrupt bool) {
	options := u.options
	// Keep the oldest start time so latency covers the whole wait.
	if pending := status.pendingUpdate; pending != nil && !pending.StartTime.IsZero() && pending.StartTime.Before(options.StartTime) {
		options.StartTime = pending.StartTime
	}
	status.pendingUpdate = &options
	klog.V(4).InfoS("Notifying pod of pending update", "pod", klog.KRef(u.ns, u.name), "podUID", u.uid, "workType", status.WorkType())
	p.wake(u.uid)
	if interrupt && status.cancelFn != nil {
		klog.V(3).InfoS("Cancelling current pod sync", "pod", klog.KRef(u.ns, u.name), "podUID", u.uid, "workType", status.WorkType())
		status.cancelFn()
	}
}

// wake makes sure a worker runs for the pod. Call with p.mu held; the
// executor must not run the worker before returning.
func (p *PodWorkers) wake(uid types.UID) {
	if p.active[uid] || p.stopped {
		return
	}
	p.active[uid] = true
	p.running.Add(1)
	p.exec(func() {
		defer p.running.Done()
		p.workerLoop(uid)
	})
}

// stopWait bounds how long Run waits for syncs under way once nodelet
// stops: each returns as its runtime calls see the cancelled context,
// except a container start, which runs to its end (kuberuntime).
const stopWait = 10 * time.Second

// Run keeps the pod workers until ctx ends, then cancels every sync under
// way, starts no more, and returns once the workers have (or after
// stopWait, naming what is stuck). Pods keep running: only the workers
// stop.
func (p *PodWorkers) Run(ctx context.Context) error {
	<-ctx.Done()
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.cancel()
	periodic.WaitStopped(&p.running, stopWait, "pod workers")
	return nil
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
				if ctx.Err() == nil {
					// Seed 000: the one event the workers raise themselves;
					// every other is the syncer's.
					p.recorder.Eventf(podutil.PodRef(w.options.Pod), v1.EventTypeWarning, "FailedSync", "error determining status: %v", err)
				}
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

	var moved, done bool
	switch {
	case errors.Is(err, context.Canceled):
		// Cancelled because an update is waiting: it runs next.
		klog.V(2).InfoS("Sync exited with context cancellation error", "pod", ref, "podUID", uid, "updateType", w.state)
	case errors.As(err, new(*RetryAfterError)):
		klog.V(4).InfoS("Pod is waiting for a back-off", "pod", ref, "podUID", uid, "wait", err)
	case err != nil:
		klog.ErrorS(err, "Error syncing pod, skipping", "pod", ref, "podUID", uid, "updateType", w.state)
	default:
		moved, done = p.complete(uid, w, isTerminal)
	}
	if !done {
		p.completeWork(uid, moved, err)
	}
	klog.V(4).InfoS("Processing pod event done", "pod", ref, "podUID", uid, "updateType", w.state, "isTerminal", isTerminal)
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
	if status.pendingUpdate == nil || status.IsFinished() || p.stopped {
		delete(p.active, uid)
		return nil, w, lastSync, false
	}
	w.state = status.WorkType()
	w.options = *status.pendingUpdate
	status.pendingUpdate = nil

	if status.ctx == nil || status.ctx.Err() != nil {
		status.ctx, status.cancelFn = context.WithCancel(p.base)
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
		case !canEverStart && runsInRuntime(p.status, uid):
			// Killed before its first sync, but its containers run: a
			// pod adopted at a restart (a node shutdown announced right
			// after it). It is stopped as a started pod is, with its
			// grace period; housekeeping would only see a finished pod.
			klog.V(2).InfoS("Pod killed before its first sync runs in the runtime: stopping it", "pod", klog.KObj(w.options.Pod), "podUID", uid)
		case !canEverStart:
			klog.V(4).InfoS("Pod cannot start ever", "pod", klog.KObj(w.options.Pod), "podUID", uid, "updateType", w.state)
			// Terminated before it could start: nothing to tear down.
			status.advance(finished)
			p.staticPods.release(status.fullname, uid, p.statuses, p.wake)
			delete(p.active, uid)
			return nil, w, lastSync, false
		case !canStart:
			// Wait for the static pod ahead of us; it wakes us when done.
			klog.V(4).InfoS("Pod cannot start yet", "pod", klog.KObj(w.options.Pod), "podUID", uid)
			status.pendingUpdate = &w.options
			delete(p.active, uid)
			return nil, w, lastSync, false
		}
		status.started = true
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

// runsInRuntime reports whether the status cache shows the pod running
// a container or a ready sandbox.
func runsInRuntime(cache StatusSource, uid types.UID) bool {
	s, err := cache.Get(uid)
	return err == nil && s != nil && (len(s.RunningContainers()) > 0 || s.ReadySandboxes() > 0)
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
	blocked := func(uid types.UID) bool {
		s, ok := p.statuses[uid]
		return !ok || s.IsTerminationRequested()
	}
	if !p.staticPods.allowStart(status.fullname, pod.UID, blocked) {
		// Safety net: the pod ahead wakes us when it finishes.
		p.workQueue.Enqueue(pod.UID, p.jitter(p.backOffPeriod, backOffJitterFactor))
		return false, true
	}
	return true, true
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
	if status.state == terminationRequested {
		klog.V(4).InfoS("Pod worker has observed request to terminate", "podUID", uid)
		status.advance(terminating)
	}
	if l := len(status.statusPostTerminating); l > 0 {
		return status.statusPostTerminating[l-1]
	}
	return nil
}

// complete records a successful sync: a pod that ended on its own (a
// non-Always pod whose containers exited) or whose containers all stopped
// moves on at once (moved); a runtime-only pod that stopped, or a pod
// whose resources are released, is done with (done). Anyone waiting for
// the kill is told when no container runs any more.
func (p *PodWorkers) complete(uid types.UID, w work, isTerminal bool) (moved, done bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	status, ok := p.statuses[uid]
	if !ok {
		return false, true
	}
	switch {
	case w.state == TerminatedPod, w.state == TerminatingPod && w.options.RunningPod != nil:
		status.advance(finished)
		p.staticPods.release(status.fullname, uid, p.statuses, p.wake)
		if w.options.RunningPod != nil {
			// No configuration and no API object to report to: forget it.
			delete(p.statuses, uid)
		}
		return false, true
	case w.state == TerminatingPod:
		status.advance(terminated)
		for _, ch := range status.notifyPostTerminating {
			close(ch)
		}
		status.notifyPostTerminating, status.statusPostTerminating = nil, nil
	case isTerminal:
		status.advance(terminating)
	default:
		return false, false
	}
	p.requeueLastPodUpdate(uid, status)
	return true, false
}

// requeueLastPodUpdate replays the last update so the worker moves on to
// the next state at once. Call with p.mu held.
func (p *PodWorkers) requeueLastPodUpdate(uid types.UID, status *podSyncStatus) {
	if status.pendingUpdate != nil || status.activeUpdate == nil {
		return
	}
	copied := *status.activeUpdate
	status.pendingUpdate = &copied
	p.wake(uid)
}

// completeWork schedules the pod's next sync: at once after a phase
// transition, when its back-off ends if it is waiting for one (at most a
// resync interval away), after the
// resync interval on success, soon when the network is not ready, after a
// back-off on other errors.
func (p *PodWorkers) completeWork(uid types.UID, phaseTransition bool, syncErr error) {
	var retry *RetryAfterError
	switch {
	case phaseTransition:
		p.workQueue.Enqueue(uid, 0)
	case errors.As(syncErr, &retry):
		// As upstream v1.37 does (seed 003 predates it and waited for the
		// resync): the back-off's end, never later than a resync.
		p.workQueue.Enqueue(uid, p.jitter(min(max(retry.Delay, 0), p.resyncInterval), backOffJitterFactor))
	case syncErr == nil:
		p.workQueue.Enqueue(uid, p.jitter(p.resyncInterval, resyncJitterFactor))
	case errors.Is(syncErr, ErrNetworkNotReady):
		p.workQueue.Enqueue(uid, p.jitter(backOffOnNetworkNotReady, backOffJitterFactor))
	default:
		p.workQueue.Enqueue(uid, p.jitter(p.backOffPeriod, backOffJitterFactor))
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
	if !status.IsFinished() {
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
			status.advance(terminationRequested)
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
	p.staticPods.release(status.fullname, uid, p.statuses, p.wake)
	return true
}

// unknownPod is the answer about a pod the workers do not know: before
// the first SyncKnownPods, and after it (see the package doc's table).
type unknownPod struct{ beforeSync, afterSync bool }

var (
	neverForUnknown = unknownPod{false, false}
	onceSynced      = unknownPod{false, true}
	untilSynced     = unknownPod{true, false}
)

// query answers a question about a pod from its status, or for a pod the
// workers do not know, as unknown says.
func (p *PodWorkers) query(uid types.UID, known func(*podSyncStatus) bool, unknown unknownPod) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.statuses[uid]; ok {
		return known(s)
	}
	if p.podsSynced {
		return unknown.afterSync
	}
	return unknown.beforeSync
}

// IsPodKnownTerminated reports whether the pod's containers are known to
// have all stopped. Unknown pods are not known terminated.
func (p *PodWorkers) IsPodKnownTerminated(uid types.UID) bool {
	return p.query(uid, (*podSyncStatus).IsTerminated, neverForUnknown)
}

// CouldHaveRunningContainers reports whether the pod may have running
// containers: true until it is terminated, and for every pod until the
// first SyncKnownPods.
func (p *PodWorkers) CouldHaveRunningContainers(uid types.UID) bool {
	return p.query(uid, func(s *podSyncStatus) bool { return !s.IsTerminated() }, untilSynced)
}

// ShouldPodBeFinished reports whether SyncTerminatedPod completed.
func (p *PodWorkers) ShouldPodBeFinished(uid types.UID) bool {
	return p.query(uid, (*podSyncStatus).IsFinished, onceSynced)
}

// IsPodTerminationRequested reports whether termination was requested
// for a known pod.
func (p *PodWorkers) IsPodTerminationRequested(uid types.UID) bool {
	return p.query(uid, (*podSyncStatus).IsTerminationRequested, neverForUnknown)
}

// ShouldPodContainersBeTerminating reports whether the worker acted on a
// termination: from then on no container of the pod starts.
func (p *PodWorkers) ShouldPodContainersBeTerminating(uid types.UID) bool {
	return p.query(uid, (*podSyncStatus).IsTerminationStarted, onceSynced)
}

// ShouldPodRuntimeBeRemoved reports whether resources tied to running
// containers may be released.
func (p *PodWorkers) ShouldPodRuntimeBeRemoved(uid types.UID) bool {
	return p.query(uid, (*podSyncStatus).IsTerminated, onceSynced)
}

// ShouldPodContentBeRemoved reports whether everything of the pod (dead
// containers, logs, volumes) may be removed: it was evicted, or deleted and
// terminated.
func (p *PodWorkers) ShouldPodContentBeRemoved(uid types.UID) bool {
	return p.query(uid, func(s *podSyncStatus) bool { return s.IsEvicted() || (s.IsDeleted() && s.IsTerminated()) }, onceSynced)
}

// IsPodForMirrorPodTerminatingByFullName reports whether the static pod
// with the full name is terminating and not done yet.
func (p *PodWorkers) IsPodForMirrorPodTerminatingByFullName(fullname string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	uid, ok := p.staticPods.started[fullname]
	if !ok {
		return false
	}
	s, ok := p.statuses[uid]
	if !ok {
		return false
	}
	return s.IsTerminationRequested() && !s.IsTerminated()
}
