// Package config is where pods enter nodelet: the "source → merge" boxes
// of the pipeline. Each source (a manifest directory, an HTTP URL, the API
// server) delivers its complete set of pods whenever it changes; the merge
// keeps what each source last delivered, diffs the new set against it and
// sends the sync loop incremental updates: ADD, UPDATE, DELETE, REMOVE and
// RECONCILE (seed 004).
package podsources

import (
	"context"
	"reflect"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// Op is the kind of a pod update.
type Op int

const (
	// SET is a source's complete set of pods. Only sources send it.
	SET Op = iota
	// ADD carries pods seen for the first time.
	ADD
	// UPDATE carries pods whose spec, labels or annotations changed.
	UPDATE
	// DELETE carries pods that were marked for graceful deletion.
	DELETE
	// REMOVE carries pods that disappeared from their source.
	REMOVE
	// RECONCILE carries pods whose status alone changed.
	RECONCILE
)

func (o Op) String() string {
	switch o {
	case SET:
		return "SET"
	case ADD:
		return "ADD"
	case UPDATE:
		return "UPDATE"
	case DELETE:
		return "DELETE"
	case REMOVE:
		return "REMOVE"
	case RECONCILE:
		return "RECONCILE"
	default:
		return "UNKNOWN"
	}
}

// PodUpdate is one batch of pods of one kind from one source.
type PodUpdate struct {
	Op     Op
	Pods   []*v1.Pod
	Source string
	// Restored marks pods the node journal kept, delivered because their
	// source has not reported since a restart: the source does not count
	// as ready for them.
	Restored bool
}

// updatesBuffer lets sources run a little ahead of a busy sync loop.
const updatesBuffer = 50

// PodConfig merges the sources into one stream of incremental updates.
type PodConfig struct {
	recorder record.EventRecorder
	clock    clock.PassiveClock
	updates  chan PodUpdate
	// steps, if set, records merge operations in pods' timelines.
	steps instrument.StepRecorder
	// journal, if set, keeps the sources' pods across restarts.
	journal Journal

	// mu guards the merge state. It is never held while sending on
	// updates: the sync loop, which may be behind, reads Sources (through
	// SourcesReady) while handling an update, and a send under the lock
	// would wait for a loop that waits for the lock.
	mu      sync.Mutex
	sources map[string]bool
	seen    map[string]bool
	pods    map[string]map[types.UID]*v1.Pod
}

// Journal keeps the pods the sources delivered across restarts. Its
// methods must not block.
type Journal interface {
	PutPod(source string, pod *v1.Pod)
	ForgetPod(uid types.UID)
}

// Option configures a PodConfig.
type Option func(*PodConfig)

// WithSteps records each pod's merge operations (ADD, UPDATE, DELETE,
// REMOVE; not the status-only RECONCILE) in its timeline.
func WithSteps(r instrument.StepRecorder) Option { return func(c *PodConfig) { c.steps = r } }

// WithJournal keeps each source's pods in the node journal: every pod
// added or changed, and the removal of every pod that left its source.
func WithJournal(j Journal) Option { return func(c *PodConfig) { c.journal = j } }

// New returns a PodConfig with no sources yet.
func New(recorder record.EventRecorder, clk clock.PassiveClock, opts ...Option) *PodConfig {
	c := &PodConfig{
		recorder: recorder,
		clock:    clk,
		updates:  make(chan PodUpdate, updatesBuffer),
		sources:  map[string]bool{},
		seen:     map[string]bool{},
		pods:     map[string]map[types.UID]*v1.Pod{},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Updates is the stream the sync loop consumes.
func (c *PodConfig) Updates() <-chan PodUpdate { return c.updates }

// Register declares a source, so readiness waits for it.
func (c *PodConfig) Register(source string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sources[source] = true
}

// Sources lists the registered sources.
func (c *PodConfig) Sources() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.sources))
	for s := range c.sources {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Set delivers a source's complete set of pods. The merge only reads them
// (it copies what it keeps), and the caller must not change them while Set
// runs. It blocks while
// the sync loop is behind, until ctx ends, holding no lock meanwhile.
//
// A source calls Set from one goroutine: its updates then reach the sync
// loop in the order its sets were merged, because the next merge of that
// source starts only after the previous one's updates were sent.
func (c *PodConfig) Set(ctx context.Context, source string, pods []*v1.Pod) {
	c.send(ctx, c.mergeSet(source, pods, false))
}

// Restore delivers a source's pods as the node journal kept them, if the
// source has not reported since nodelet started (its pods are then
// unknown, the API server being unreachable, say). The source does not
// count as ready: nothing is cleaned up on the journal's word. Once the
// source reports, its set is merged against these as usual: a pod
// deleted meanwhile is removed then. Restore reports whether it stood in
// for the source (false: the source had reported).
func (c *PodConfig) Restore(ctx context.Context, source string, pods []*v1.Pod) bool {
	updates := c.mergeSet(source, pods, true)
	c.send(ctx, updates)
	return len(updates) > 0
}

func (c *PodConfig) send(ctx context.Context, updates []PodUpdate) {
	for _, u := range updates {
		c.recordSteps(u)
		c.keep(u)
		select {
		case c.updates <- u:
		case <-ctx.Done():
			return
		}
	}
}

// keep records the update in the journal, before the sync loop acts on
// it.
func (c *PodConfig) keep(u PodUpdate) {
	if c.journal == nil || u.Restored {
		return
	}
	for _, p := range u.Pods {
		switch {
		case u.Op == REMOVE:
			c.journal.ForgetPod(p.UID)
		case u.Op == RECONCILE && !podutil.IsTerminal(p.Status.Phase):
			// A status-only change the core does not act on (mostly
			// nodelet's own status writes coming back): the journal has
			// the status nodelet holds, so this is not worth a write.
		default:
			c.journal.PutPod(u.Source, p)
		}
	}
}

// recordSteps puts the update's operation in each pod's timeline.
func (c *PodConfig) recordSteps(u PodUpdate) {
	if c.steps == nil || u.Op == RECONCILE {
		return
	}
	from := "from source " + u.Source
	if u.Restored {
		from = "from the node journal (source " + u.Source + " not heard from since the restart)"
	}
	for _, p := range u.Pods {
		c.steps.Begin(p, instrument.KindMerge, u.Op.String())(nil, from)
	}
}

// mergeSet merges a source's set under the lock and returns the updates
// to send, in order, with pods copied so the sync loop owns them. A
// restored set is merged only while the source has not reported.
func (c *PodConfig) mergeSet(source string, pods []*v1.Pod, restored bool) []PodUpdate {
	c.mu.Lock()
	defer c.mu.Unlock()
	firstSet := !c.seen[source]
	if restored && !firstSet {
		return nil
	}
	if !restored {
		c.seen[source] = true
	}
	adds, updates, deletes, removes, reconciles := c.merge(source, pods)

	var out []PodUpdate
	add := func(op Op, pods []*v1.Pod) {
		out = append(out, PodUpdate{Op: op, Pods: copyPods(pods), Source: source, Restored: restored})
	}
	// Order matters: a removed pod frees its name before an added pod with
	// the same name arrives.
	for _, u := range []struct {
		op   Op
		pods []*v1.Pod
	}{{REMOVE, removes}, {ADD, adds}, {UPDATE, updates}, {DELETE, deletes}} {
		if len(u.pods) > 0 {
			add(u.op, u.pods)
		}
	}
	if firstSet && len(adds) == 0 && len(updates) == 0 && len(deletes) == 0 {
		// An empty ADD tells the sync loop the source has reported (or
		// the journal, which kept no pods of it, has stood in).
		add(ADD, nil)
	}
	if len(reconciles) > 0 {
		add(RECONCILE, reconciles)
	}
	return out
}

// merge diffs a source's new set against what it had.
func (c *PodConfig) merge(source string, newPods []*v1.Pod) (adds, updates, deletes, removes, reconciles []*v1.Pod) {
	old := c.pods[source]
	cur := make(map[types.UID]*v1.Pod, len(newPods))
	for _, in := range filterDuplicateNames(newPods, source, c.recorder) {
		if existing, ok := old[in.UID]; ok && existing.ResourceVersion != "" && existing.ResourceVersion == in.ResourceVersion {
			// The API server's version says nothing changed: no copy, no
			// comparison (the API source delivers every pod on every event).
			cur[in.UID] = existing
			continue
		}
		// The merge never changes what the source handed it (the API
		// source's objects are its cache's): it keeps copies.
		ref := in.DeepCopy()
		if ref.Annotations == nil {
			ref.Annotations = map[string]string{}
		}
		ref.Annotations[podutil.ConfigSourceAnnotationKey] = source
		if existing, ok := old[ref.UID]; ok {
			cur[ref.UID] = existing
			needUpdate, needReconcile, needGracefulDelete := checkAndUpdatePod(existing, ref)
			switch {
			case needUpdate:
				updates = append(updates, existing)
			case needReconcile:
				reconciles = append(reconciles, existing)
			case needGracefulDelete:
				deletes = append(deletes, existing)
			}
			continue
		}
		if _, dup := cur[ref.UID]; dup {
			klog.InfoS("Pod has the same UID as another pod from the source, ignoring", "pod", klog.KObj(ref), "podUID", ref.UID, "source", source)
			continue
		}
		ref.Annotations[podutil.ConfigFirstSeenAnnotationKey] = c.clock.Now().Format(time.RFC3339Nano)
		cur[ref.UID] = ref
		adds = append(adds, ref)
	}
	for uid, existing := range old {
		if _, ok := cur[uid]; !ok {
			removes = append(removes, existing)
		}
	}
	sortByName(removes)
	c.pods[source] = cur
	return adds, updates, deletes, removes, reconciles
}

// filterDuplicateNames keeps the first pod of each full name: two pods
// with one name cannot both run on a node.
func filterDuplicateNames(pods []*v1.Pod, source string, recorder record.EventRecorder) []*v1.Pod {
	names := map[string]bool{}
	out := make([]*v1.Pod, 0, len(pods))
	for _, pod := range pods {
		name := podutil.FullName(pod)
		if names[name] {
			klog.InfoS("Pod failed validation due to duplicate pod name, ignoring", "pod", klog.KObj(pod), "podUID", pod.UID, "source", source)
			recorder.Eventf(pod, v1.EventTypeWarning, "FailedValidation", "Error validating pod %s from %s due to duplicate pod name %q, ignoring", podutil.Ref(pod), source, pod.Name)
			continue
		}
		names[name] = true
		out = append(out, pod)
	}
	return out
}

// checkAndUpdatePod compares a pod from a new set with the stored one and
// updates the stored one in place. A change to spec, labels, annotations,
// deletion timestamp or deletion grace period is an update (a graceful
// delete when the deletion timestamp is set); a change to status alone is
// a reconcile.
func checkAndUpdatePod(existing, ref *v1.Pod) (needUpdate, needReconcile, needGracefulDelete bool) {
	if existing.ResourceVersion != "" && existing.ResourceVersion == ref.ResourceVersion {
		// The API server's version says nothing changed. The API source
		// delivers every pod on every event, so this keeps a burst of n
		// pods from costing n² deep comparisons.
		return
	}
	defer func() { existing.ResourceVersion = ref.ResourceVersion }()
	if !podsDifferSemantically(existing, ref) {
		if !apiequality.Semantic.DeepEqual(existing.Status, ref.Status) {
			// nodelet owns the status; a changed one must be reconciled.
			existing.Status = ref.Status
			needReconcile = true
		}
		return
	}
	// The first-seen time is ours, not the source's: keep it.
	ref.Annotations[podutil.ConfigFirstSeenAnnotationKey] = existing.Annotations[podutil.ConfigFirstSeenAnnotationKey]
	existing.Spec = ref.Spec
	existing.Labels = ref.Labels
	existing.DeletionTimestamp = ref.DeletionTimestamp
	existing.DeletionGracePeriodSeconds = ref.DeletionGracePeriodSeconds
	existing.Generation = ref.Generation
	existing.Status = ref.Status
	updateAnnotations(existing, ref)
	if ref.DeletionTimestamp != nil {
		needGracefulDelete = true
	} else {
		needUpdate = true
	}
	return
}

// localAnnotations are set by nodelet itself and never count as a change.
var localAnnotations = map[string]bool{
	podutil.ConfigSourceAnnotationKey:    true,
	podutil.ConfigMirrorAnnotationKey:    true,
	podutil.ConfigFirstSeenAnnotationKey: true,
}

func podsDifferSemantically(existing, ref *v1.Pod) bool {
	return !(apiequality.Semantic.DeepEqual(existing.Spec, ref.Spec) &&
		reflect.DeepEqual(existing.Labels, ref.Labels) &&
		apiequality.Semantic.DeepEqual(existing.DeletionTimestamp, ref.DeletionTimestamp) &&
		reflect.DeepEqual(existing.DeletionGracePeriodSeconds, ref.DeletionGracePeriodSeconds) &&
		annotationsEqual(existing.Annotations, ref.Annotations))
}

func annotationsEqual(a, b map[string]string) bool {
	count := 0
	for k, v := range a {
		if localAnnotations[k] {
			continue
		}
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
		count++
	}
	for k := range b {
		if !localAnnotations[k] {
			count--
		}
	}
	return count == 0
}

// updateAnnotations replaces existing's annotations with ref's, keeping
// nodelet's local ones.
func updateAnnotations(existing, ref *v1.Pod) {
	a := make(map[string]string, len(ref.Annotations)+len(localAnnotations))
	for k, v := range ref.Annotations {
		a[k] = v
	}
	for k := range localAnnotations {
		if v, ok := existing.Annotations[k]; ok {
			a[k] = v
		}
	}
	existing.Annotations = a
}

func copyPods(pods []*v1.Pod) []*v1.Pod {
	out := make([]*v1.Pod, len(pods))
	for i, p := range pods {
		out[i] = p.DeepCopy()
	}
	return out
}

func sortByName(pods []*v1.Pod) {
	sort.Slice(pods, func(i, j int) bool { return podutil.FullName(pods[i]) < podutil.FullName(pods[j]) })
}

// SourcesReady tracks which configured sources have delivered at least
// once. Until all have, nodelet must not clean anything up: a pod missing
// from a silent source is not a pod that was deleted.
//
// It also tracks when the node's pods are known: once every source has
// delivered, or the node journal stood in for it. Readers of the active
// pods (the pod-resources API) wait for that rather than answer with a
// half-known set after a restart.
type SourcesReady struct {
	configured func() []string
	mu         sync.RWMutex
	seen       map[string]bool
	restored   map[string]bool
	known      chan struct{}
}

// NewSourcesReady tracks the sources configured returns.
func NewSourcesReady(configured func() []string) *SourcesReady {
	return &SourcesReady{configured: configured, seen: map[string]bool{}, restored: map[string]bool{}, known: make(chan struct{})}
}

// AddSource records that a source delivered.
func (s *SourcesReady) AddSource(source string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen[source] = true
	s.checkKnown()
}

// AddRestored records that the node journal delivered a source's pods
// (possibly none) in its stead. It does not make the source ready.
func (s *SourcesReady) AddRestored(source string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.restored[source] = true
	s.checkKnown()
}

// Known is closed once every configured source delivered or was restored
// (at once when none is configured: nothing will ever deliver).
func (s *SourcesReady) Known() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkKnown()
	return s.known
}

// checkKnown closes known if every source is accounted for; s.mu is held.
func (s *SourcesReady) checkKnown() {
	select {
	case <-s.known:
		return
	default:
	}
	for _, src := range s.configured() {
		if !s.seen[src] && !s.restored[src] {
			return
		}
	}
	close(s.known)
}

func (s *SourcesReady) AllReady() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, src := range s.configured() {
		if !s.seen[src] {
			return false
		}
	}
	return true
}
