// Package pleg is the pod lifecycle event generator: it relists the
// runtime every second, compares what it sees with the previous relist,
// and emits an event per container that started, died, changed or was
// removed. The sync loop turns those events into pod syncs. Alongside, it
// keeps the pod status cache that the pod workers sync from, and can
// refresh one pod's entry on demand so no transition waits for a relist.
package pleg

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// EventType says what happened to a container.
type EventType string

const (
	ContainerStarted EventType = "ContainerStarted"
	ContainerDied    EventType = "ContainerDied"
	ContainerRemoved EventType = "ContainerRemoved"
	ContainerChanged EventType = "ContainerChanged"
)

// Event is one lifecycle change of one container (or sandbox) of a pod.
type Event struct {
	ID   types.UID
	Type EventType
	// Data is the container or sandbox ID.
	Data string
}

// Runtime is what the PLEG reads.
type Runtime interface {
	GetPods(ctx context.Context) ([]*container.Pod, error)
	GetPodStatus(ctx context.Context, uid types.UID, name, namespace string) (*container.PodStatus, error)
}

const (
	// eventCapacity bounds events waiting for the sync loop; beyond it
	// events are dropped (the periodic sync catches up).
	eventCapacity = 1000
	// RelistThreshold is how long relisting may stall before the PLEG,
	// and with it the node, is reported unhealthy.
	RelistThreshold = 3 * time.Minute
)

// Generic is the relisting PLEG.
type Generic struct {
	runtime Runtime
	cache   *Cache
	clock   clock.WithTicker
	period  time.Duration
	events  chan *Event
	// wake tells Run that triggers are pending; they coalesce.
	wake chan struct{}

	// triggerMu guards the pending triggers (never held across a call).
	triggerMu sync.Mutex
	// pendingIDs are containers and sandboxes reported changed; pendingAll
	// asks for a full relist.
	pendingIDs map[string]int // ID → how often it was tried
	pendingAll bool

	// records is the previous view of each pod, and owner maps each of
	// their container and sandbox IDs to the pod. Only Run's goroutine
	// touches them (through Relist and refresh), so they need no lock:
	// none is held across the runtime calls a relist makes.
	records map[types.UID]*container.Pod
	owner   map[string]types.UID

	// lastRelist is the start of the last successful relist (unix nanos).
	lastRelist atomic.Int64
	// listed is the last successful relist's view of the runtime, for
	// RuntimePods.
	listed atomic.Pointer[listing]
	// observe, if set, is told each successful relist's start and length.
	observe func(start time.Time, took time.Duration)
}

// listing is what a relist found in the runtime, and when it began.
// Nothing changes it once stored.
type listing struct {
	pods []*container.Pod
	at   time.Time
}

// GenericOptions configure a Generic PLEG.
type GenericOptions struct {
	Runtime Runtime
	// Cache is the status cache to maintain; nil for a new one.
	Cache *Cache
	// Period is how often to relist everything.
	Period time.Duration
	Clock  clock.WithTicker
	// ObserveRelist, if set, is told each successful relist's start and
	// length (for metrics).
	ObserveRelist func(start time.Time, took time.Duration)
}

// NewGeneric returns a PLEG relisting every period.
func NewGeneric(o GenericOptions) *Generic {
	if o.Cache == nil {
		o.Cache = NewCache()
	}
	return &Generic{
		runtime: o.Runtime, cache: o.Cache, clock: o.Clock, period: o.Period, observe: o.ObserveRelist,
		events:  make(chan *Event, eventCapacity),
		wake:    make(chan struct{}, 1),
		records: map[types.UID]*container.Pod{}, owner: map[string]types.UID{},
		pendingIDs: map[string]int{},
	}
}

// Watch returns the channel events arrive on.
func (g *Generic) Watch() <-chan *Event { return g.events }

// Cache is the status cache the PLEG maintains.
func (g *Generic) Cache() *Cache { return g.cache }

// Run relists every period, and reads changed pods at once when
// triggered, until ctx ends.
func (g *Generic) Run(ctx context.Context) {
	t := g.clock.NewTicker(g.period)
	defer t.Stop()
	g.Relist(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			g.Relist(ctx)
		case <-g.wake:
			g.serveTriggers(ctx)
		}
	}
}

// Trigger says the runtime reported the given containers or sandboxes
// exited: their pods are read again as soon as possible, not at the next
// relist. With no IDs (the change is not known), or for an ID no pod is
// known to have (a container started since the last relist), the whole
// runtime is relisted. Triggers coalesce while one is served.
func (g *Generic) Trigger(ids ...string) { g.trigger(0, ids) }

func (g *Generic) trigger(attempt int, ids []string) {
	g.triggerMu.Lock()
	if len(ids) == 0 {
		g.pendingAll = true
	}
	for _, id := range ids {
		g.pendingIDs[id] = max(g.pendingIDs[id], attempt)
	}
	g.triggerMu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// exitRetries bounds how often an exit the runtime reported but does not
// show yet is read again, exitRetryDelay apart (doubling, about 5 s in
// all): containerd publishes a task's exit before its CRI has recorded
// it, and on a loaded node the CRI's record lagged by more than the 0.3 s
// five retries from 10 ms covered, leaving the exit to the next relist.
const (
	exitRetries    = 8
	exitRetryDelay = 20 * time.Millisecond
)

// serveTriggers reads the pods of the exited containers, or relists when
// an exit cannot be pinned to a known pod. An exit that does not show yet
// is tried again shortly.
func (g *Generic) serveTriggers(ctx context.Context) {
	g.triggerMu.Lock()
	all, ids := g.pendingAll, g.pendingIDs
	g.pendingAll, g.pendingIDs = false, map[string]int{}
	g.triggerMu.Unlock()
	uids := map[types.UID]bool{}
	for id := range ids {
		uid, ok := g.owner[id]
		if !ok {
			all = true
			break
		}
		uids[uid] = true
	}
	if all {
		g.Relist(ctx)
	} else {
		for uid := range uids {
			g.refresh(ctx, uid)
		}
	}
	for id, attempt := range ids {
		if !g.stillRunning(id) || attempt >= exitRetries {
			continue
		}
		go func() {
			select {
			case <-ctx.Done():
			case <-g.clock.After(exitRetryDelay << attempt):
				g.trigger(attempt+1, []string{id})
			}
		}()
	}
}

// stillRunning reports whether the records show the container running.
// Sandboxes are not retried: containerd marks one not ready only once its
// network is torn down, a second after its pause process exited, and
// nodelet stops sandboxes itself anyway.
func (g *Generic) stillRunning(id string) bool {
	uid, ok := g.owner[id]
	if !ok {
		return false
	}
	for _, c := range g.records[uid].Containers {
		if c.ID.ID == id {
			return c.State == container.StateRunning
		}
	}
	return false
}

// refresh reads one known pod from the runtime and emits its events, as
// a relist would for that pod alone: one pod's calls instead of listing
// every sandbox and container on the node.
func (g *Generic) refresh(ctx context.Context, uid types.UID) {
	old := g.records[uid]
	ts := g.clock.Now()
	status, err := g.runtime.GetPodStatus(ctx, uid, old.Name, old.Namespace)
	if err != nil {
		klog.ErrorS(err, "PLEG: cannot read pod status", "pod", klog.KRef(old.Namespace, old.Name), "podUID", uid)
		return
	}
	var cur *container.Pod
	if len(status.ContainerStatuses)+len(status.SandboxStatuses) > 0 {
		p := status.ToRunningPod()
		cur = &p
	}
	events := diff(uid, old, cur)
	if cur == nil {
		g.cache.Delete(uid)
	} else {
		g.cache.Set(uid, status, nil, ts)
	}
	g.setRecord(uid, cur)
	g.emit(events)
}

// setRecord replaces a pod's record and its IDs' owner entries.
func (g *Generic) setRecord(uid types.UID, p *container.Pod) {
	if old := g.records[uid]; old != nil {
		for id := range states(old) {
			delete(g.owner, id)
		}
	}
	if p == nil {
		delete(g.records, uid)
		return
	}
	g.records[uid] = p
	for id := range states(p) {
		g.owner[id] = uid
	}
}

func (g *Generic) emit(events []*Event) {
	for _, e := range events {
		select {
		case g.events <- e:
		default:
			klog.ErrorS(nil, "PLEG: event channel is full, dropping event", "podUID", e.ID, "event", e.Type)
		}
	}
}

// Healthy returns an error when relisting has stalled.
func (g *Generic) Healthy() error {
	last := g.lastRelist.Load()
	if last == 0 {
		return nil // starting up
	}
	if since := g.clock.Since(time.Unix(0, last)); since > RelistThreshold {
		return fmt.Errorf("pleg was last seen active %v ago; threshold is %v", since.Round(time.Second), RelistThreshold)
	}
	return nil
}

// LastRelist is when the last successful relist began.
func (g *Generic) LastRelist() time.Time {
	if n := g.lastRelist.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Relist reads every pod from the runtime once, refreshes the cache for
// pods that changed and emits their events. It is not safe for concurrent
// use: Run calls it, and tests call it from one goroutine.
func (g *Generic) Relist(ctx context.Context) {
	ts := g.clock.Now()
	pods, err := g.runtime.GetPods(ctx)
	if err != nil {
		klog.ErrorS(err, "PLEG: cannot list pods from the runtime")
		return
	}
	g.listed.Store(&listing{pods: pods, at: ts})
	if g.observe != nil {
		defer func() { g.observe(ts, g.clock.Since(ts)) }()
	}
	current := make(map[types.UID]*container.Pod, len(pods))
	for _, p := range pods {
		current[p.ID] = p
	}

	var all []*Event
	for uid := range union(g.records, current) {
		old, cur := g.records[uid], current[uid]
		events := diff(uid, old, cur)
		if len(events) == 0 {
			continue
		}
		if cur == nil {
			// Gone from the runtime: nothing left to cache.
			g.cache.Delete(uid)
		} else if status, ok := g.vouched(uid, cur); ok {
			g.cache.Set(uid, status, nil, ts)
		} else {
			status, err := g.runtime.GetPodStatus(ctx, uid, cur.Name, cur.Namespace)
			if err != nil {
				klog.ErrorS(err, "PLEG: cannot read pod status", "pod", klog.KRef(cur.Namespace, cur.Name), "podUID", uid)
				// Keep the old record so the change is seen again next time.
				continue
			}
			g.cache.Set(uid, status, nil, ts)
		}
		all = append(all, events...)
		g.setRecord(uid, cur)
	}

	g.cache.MarkRelisted(ts)
	g.lastRelist.Store(ts.UnixNano())
	g.emit(all)
}

// vouched returns the cached status of a pod when it shows exactly the
// sandboxes and containers, in the same states, that the relist found:
// the worker that made the change (a start, a stop) read the pod after it
// (Refresh), and reading it again would learn nothing. A state, once
// reached, does not change its details (exit code, times), and a new
// container or sandbox is a new ID.
func (g *Generic) vouched(uid types.UID, cur *container.Pod) (*container.PodStatus, bool) {
	s, ok := g.cache.entry(uid)
	if !ok {
		return nil, false
	}
	p := s.ToRunningPod()
	return s, maps.Equal(states(&p), states(cur))
}

// RuntimePods is every pod that has a sandbox or container in the
// runtime, as the last relist found them, with each pod read since (a pod
// worker's read after it started or stopped it, a read on an exit) in
// place of what the relist found: housekeeping takes it instead of listing
// every sandbox and container again (at 5,000 pods, 8% of nodelet's CPU
// while they stop). The reads since matter: a pod whose worker stopped it
// just after the relist would otherwise still show running containers,
// with no worker left, and be stopped again as an orphan. A pod started
// since the relist is not in it (its worker owns it). When no relist
// succeeded in the last two periods, the runtime is listed afresh.
func (g *Generic) RuntimePods(ctx context.Context) ([]*container.Pod, error) {
	l := g.listed.Load()
	if l == nil || g.clock.Since(l.at) > 2*g.period {
		return g.runtime.GetPods(ctx)
	}
	out := make([]*container.Pod, 0, len(l.pods))
	for _, p := range l.pods {
		if s, ok := g.cache.readAfter(p.ID, l.at); ok {
			rp := s.ToRunningPod()
			if rp.IsEmpty() {
				continue // gone since
			}
			p = &rp
		}
		out = append(out, p)
	}
	return out, nil
}

// GetNewerThan returns a pod's status as of a time after min. When the
// cache holds nothing that new, the pod is read from the runtime there and
// then: waiting for the next relist would add up to a second to every
// transition.
func (g *Generic) GetNewerThan(ctx context.Context, uid types.UID, name, namespace string, min time.Time) (*container.PodStatus, error) {
	if s, err, ok := g.cache.getIfFresh(uid, min); ok {
		return s, err
	}
	return g.read(ctx, uid, name, namespace, false)
}

// Refresh reads back a pod that the pod worker's sync has just changed
// (its containers started, or all stopped), as that sync's last runtime
// call. The status stands for everything the sync did, so the worker's
// next sync takes it from the cache, once, however old: that next sync
// often follows within milliseconds (an update that came while the sync
// ran, or the step from terminating to terminated), and would otherwise
// read the pod again.
func (g *Generic) Refresh(ctx context.Context, uid types.UID, name, namespace string) (*container.PodStatus, error) {
	return g.read(ctx, uid, name, namespace, true)
}

// read reads one pod from the runtime into the cache now; settled marks
// it as the sync's read back (see Refresh).
func (g *Generic) read(ctx context.Context, uid types.UID, name, namespace string, settled bool) (*container.PodStatus, error) {
	ts := g.clock.Now()
	s, err := g.runtime.GetPodStatus(ctx, uid, name, namespace)
	if err != nil {
		return nil, err
	}
	g.cache.Set(uid, s, nil, ts)
	if settled {
		g.cache.settle(uid, ts)
	}
	// The stored status may be newer than ours if a relist raced us.
	return g.cache.Get(uid)
}

func union(a, b map[types.UID]*container.Pod) map[types.UID]struct{} {
	out := make(map[types.UID]struct{}, len(a)+len(b))
	for k := range a {
		out[k] = struct{}{}
	}
	for k := range b {
		out[k] = struct{}{}
	}
	return out
}

// state of a container or sandbox in one relist; "" when absent.
type state string

const (
	stRunning state = "running"
	stExited  state = "exited"
	stUnknown state = "unknown"
	stAbsent  state = ""
)

func states(p *container.Pod) map[string]state {
	out := map[string]state{}
	if p == nil {
		return out
	}
	for _, c := range p.Containers {
		switch c.State {
		case container.StateRunning:
			out[c.ID.ID] = stRunning
		case container.StateExited:
			out[c.ID.ID] = stExited
		default:
			// Created counts as unknown: it is neither running nor done.
			out[c.ID.ID] = stUnknown
		}
	}
	for _, s := range p.Sandboxes {
		if s.Ready {
			out[s.ID] = stRunning
		} else {
			out[s.ID] = stExited
		}
	}
	return out
}

// diff lists the events that turn the old view of a pod into the new one.
func diff(uid types.UID, old, cur *container.Pod) []*Event {
	before, after := states(old), states(cur)
	var events []*Event
	emit := func(t EventType, id string) { events = append(events, &Event{ID: uid, Type: t, Data: id}) }
	for id := range unionIDs(before, after) {
		o, n := before[id], after[id]
		if o == n {
			continue
		}
		switch n {
		case stRunning:
			emit(ContainerStarted, id)
		case stExited:
			emit(ContainerDied, id)
		case stUnknown:
			emit(ContainerChanged, id)
		case stAbsent:
			if o == stRunning {
				emit(ContainerDied, id)
			}
			emit(ContainerRemoved, id)
		}
	}
	sortEvents(events)
	return events
}

func unionIDs(a, b map[string]state) map[string]struct{} {
	out := make(map[string]struct{}, len(a)+len(b))
	for k := range a {
		out[k] = struct{}{}
	}
	for k := range b {
		out[k] = struct{}{}
	}
	return out
}

// Get returns a pod's cached status without reading the runtime.
func (g *Generic) Get(uid types.UID) (*container.PodStatus, error) { return g.cache.Get(uid) }
