// Package allocation keeps what nodelet granted each container
// (allocated) and what it last applied to the running container
// (actuated), for in-place pod resize. A resize asked of the API changes
// a pod's spec; nodelet grants it only if the node can fit it, and runs
// the pod with what it granted. Both survive a restart: they are written
// to one JSON file under the root directory (written whole to a temporary
// file, fsynced, then renamed, so a crash leaves the old or the new
// state; changes made together share a write).
//
//	spec resources ──admitted, or resize fits──▶ allocated ──applied to the container──▶ actuated
//	      │ resize does not fit
//	      ▼
//	pending (Deferred: retried; Infeasible: never fits the node)
package allocation

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
)

// containerState is one container's granted and applied resources.
type containerState struct {
	Allocated v1.ResourceRequirements  `json:"allocated"`
	Actuated  *v1.ResourceRequirements `json:"actuated,omitempty"`
}

// Store holds every pod's container allocations. It is safe for
// concurrent use.
//
// A change returns once the file holds it, but changes made at the same
// time share a write (group commit): pod workers recording what they
// applied to their containers in a burst would otherwise each write the
// whole file and wait for its own fsync, n writes of n pods.
type Store struct {
	path    string
	mu      sync.Mutex
	pods    map[types.UID]map[string]*containerState
	pending map[types.UID]Pending
	// encoded holds each pod's part of the file as last encoded; a
	// change to a pod drops its part (touch). A burst's commits would
	// otherwise each encode every pod: n² for n pods.
	encoded map[types.UID][]byte
	// changed counts the changes made, written how many of them the file
	// holds (both guarded by mu).
	changed, written uint64

	// writing is held by the one writer at a time.
	writing sync.Mutex
}

// Open reads the store at path; a missing file is an empty store. A file
// that does not parse is an error: nodelet would otherwise forget what it
// granted.
func Open(path string) (*Store, error) {
	s := &Store{path: path, pods: map[types.UID]map[string]*containerState{}, encoded: map[types.UID][]byte{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &s.pods); err != nil {
		return nil, fmt.Errorf("allocation state %s is corrupt: %w", path, err)
	}
	return s, nil
}

// commit returns once the file holds every change made before it was
// called: at once if a write since did, else after writing the store
// (with every change made meanwhile). Call without mu.
func (s *Store) commit() error {
	s.mu.Lock()
	want, done := s.changed, s.written >= s.changed
	s.mu.Unlock()
	if done {
		// Nothing to write: do not queue behind a write in flight (every
		// pod's sync asks).
		return nil
	}
	s.writing.Lock()
	defer s.writing.Unlock()
	s.mu.Lock()
	if s.written >= want {
		s.mu.Unlock()
		return nil
	}
	b, err := s.encode()
	covers := s.changed
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.write(b); err != nil {
		return err
	}
	s.mu.Lock()
	s.written = max(s.written, covers)
	s.mu.Unlock()
	return nil
}

// encode returns the file's content, as json.Marshal(s.pods) would (the
// pods in the order of their UIDs), encoding again only the pods touched
// since the last write. Call with mu held.
func (s *Store) encode() ([]byte, error) {
	uids := make([]types.UID, 0, len(s.pods))
	size := 2
	for uid := range s.pods {
		uids = append(uids, uid)
		size += len(uid) + 4 + len(s.encoded[uid])
	}
	slices.Sort(uids)
	b := make([]byte, 0, size)
	b = append(b, '{')
	for i, uid := range uids {
		part, ok := s.encoded[uid]
		if !ok {
			var err error
			if part, err = json.Marshal(s.pods[uid]); err != nil {
				return nil, err
			}
			s.encoded[uid] = part
		}
		key, err := json.Marshal(string(uid))
		if err != nil {
			return nil, err
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(append(append(b, key...), ':'), part...)
	}
	return append(b, '}'), nil
}

// touch marks the pod's part of the file for encoding again. Call with
// mu held, at every change of s.pods.
func (s *Store) touch(uid types.UID) {
	delete(s.encoded, uid)
	s.changed++
}

// write replaces the file with b, durably.
func (s *Store) write(b []byte) error {
	tmp := filepath.Join(filepath.Dir(s.path), "."+filepath.Base(s.path)+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, s.path)
}

// Known reports whether the pod has allocations.
func (s *Store) Known(uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.pods[uid]
	return ok
}

// Allocate grants the pod's containers (init and regular) the resources
// their spec asks for, keeping what was applied.
func (s *Store) Allocate(pod *v1.Pod) error {
	s.Stage(pod)
	return s.commit()
}

// Stage is Allocate without waiting for the file: Commit then writes
// every staged grant at once. The sync loop stages what it admits, and
// each pod's sync commits before its first container (nothing may run
// with a staged grant before Commit returns), beside its sandbox: the
// sync loop never waits for the disk, and pods admitted together share
// a write.
func (s *Store) Stage(pod *v1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.pods[pod.UID]
	cs := map[string]*containerState{}
	for _, c := range containers(pod) {
		st := &containerState{Allocated: *c.Resources.DeepCopy()}
		if prev, ok := old[c.Name]; ok {
			st.Actuated = prev.Actuated
		}
		cs[c.Name] = st
	}
	s.pods[pod.UID] = cs
	s.touch(pod.UID)
}

// Commit returns once the file holds every change made so far.
func (s *Store) Commit() error { return s.commit() }

// Allocated returns what the container was granted.
func (s *Store) Allocated(uid types.UID, name string) (v1.ResourceRequirements, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.pods[uid][name]
	if !ok {
		return v1.ResourceRequirements{}, false
	}
	return *st.Allocated.DeepCopy(), true
}

// Actuated returns what was last applied to the running container.
func (s *Store) Actuated(uid types.UID, name string) (v1.ResourceRequirements, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.pods[uid][name]
	if !ok || st.Actuated == nil {
		return v1.ResourceRequirements{}, false
	}
	return *st.Actuated.DeepCopy(), true
}

// SetActuated records what was applied to the container. It returns once
// the file holds it, or says the same without it (a first actuation of
// what was granted).
func (s *Store) SetActuated(uid types.UID, name string, r v1.ResourceRequirements) error {
	s.mu.Lock()
	st, ok := s.pods[uid][name]
	if !ok {
		// Not allocated yet (started before allocations were kept): it
		// was granted what it runs with.
		if s.pods[uid] == nil {
			s.pods[uid] = map[string]*containerState{}
		}
		st = &containerState{Allocated: *r.DeepCopy()}
		s.pods[uid][name] = st
	}
	if st.Actuated != nil && equality.Semantic.DeepEqual(*st.Actuated, r) {
		s.mu.Unlock()
		return nil
	}
	// A container's first actuation that is its grant says nothing the
	// file does not: a running container without an actuated record runs
	// with what it was granted (the resize paths read it so). The next
	// write carries it, and any change of the grant is such a write. So
	// a start does not wait for an fsync between its container's start
	// and the pod's read back.
	implied := ok && st.Actuated == nil && Equal(st.Allocated, r)
	st.Actuated = r.DeepCopy()
	s.touch(uid)
	s.mu.Unlock()
	if implied {
		return nil
	}
	return s.commit()
}

// Retain forgets every pod not in keep.
func (s *Store) Retain(keep func(types.UID) bool) error {
	s.mu.Lock()
	changed := false
	for uid := range s.pods {
		if !keep(uid) {
			delete(s.pods, uid)
			delete(s.pending, uid)
			s.touch(uid)
			changed = true
		}
	}
	if !changed {
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	return s.commit()
}

// WithAllocation returns the pod as nodelet runs it: each container's
// resources are what it was granted. The second result says whether that
// differs from the spec (a resize not granted yet).
func (s *Store) WithAllocation(pod *v1.Pod) (*v1.Pod, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs, ok := s.pods[pod.UID]
	if !ok {
		return pod, false
	}
	var out *v1.Pod
	for _, list := range []func(*v1.Pod) []v1.Container{
		func(p *v1.Pod) []v1.Container { return p.Spec.InitContainers },
		func(p *v1.Pod) []v1.Container { return p.Spec.Containers },
	} {
		for i, c := range list(pod) {
			st, ok := cs[c.Name]
			if !ok || Equal(st.Allocated, c.Resources) {
				continue
			}
			if out == nil {
				out = pod.DeepCopy()
			}
			list(out)[i].Resources = *st.Allocated.DeepCopy()
		}
	}
	if out == nil {
		return pod, false
	}
	return out, true
}

// Equal compares resources by value: 1 and 1000m are the same CPU, and
// an empty list is no list.
func Equal(a, b v1.ResourceRequirements) bool {
	return equalList(a.Requests, b.Requests) && equalList(a.Limits, b.Limits)
}

func equalList(a, b v1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for name, q := range a {
		o, ok := b[name]
		if !ok || q.Cmp(o) != 0 {
			return false
		}
	}
	return true
}

func containers(pod *v1.Pod) []v1.Container {
	return append(append([]v1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...)
}

// Pending is a resize not granted yet: why, and the spec it asks for.
type Pending struct {
	// Reason is upstream's: Deferred (may fit later) or Infeasible
	// (never fits this node).
	Reason, Message string
	Desired         *v1.Pod
}

// SetPending records a resize not granted; it is not persisted (the
// source delivers the spec again after a restart).
func (s *Store) SetPending(uid types.UID, p Pending) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		s.pending = map[types.UID]Pending{}
	}
	s.pending[uid] = p
}

// ClearPending forgets a pod's pending resize.
func (s *Store) ClearPending(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pending, uid)
}

// PendingResize returns a pod's pending resize.
func (s *Store) PendingResize(uid types.UID) (Pending, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pending[uid]
	return p, ok
}

// Deferred lists the pods whose resize may fit later.
func (s *Store) Deferred() []Pending {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Pending
	for _, p := range s.pending {
		if p.Reason == ReasonDeferred {
			out = append(out, p)
		}
	}
	return out
}

// Reasons of a pending resize, as upstream's PodResizePending condition
// gives them.
const (
	ReasonDeferred   = "Deferred"
	ReasonInfeasible = "Infeasible"
)
