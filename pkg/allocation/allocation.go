// Package allocation keeps what nodelet granted each container
// (allocated) and what it last applied to the running container
// (actuated), for in-place pod resize. A resize asked of the API changes
// a pod's spec; nodelet grants it only if the node can fit it, and runs
// the pod with what it granted. Both survive a restart: they are written
// to one JSON file under the root directory (written whole to a temporary
// file, then renamed, so a crash leaves the old or the new state).
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
type Store struct {
	path    string
	mu      sync.Mutex
	pods    map[types.UID]map[string]*containerState
	pending map[types.UID]Pending
}

// Open reads the store at path; a missing file is an empty store. A file
// that does not parse is an error: nodelet would otherwise forget what it
// granted.
func Open(path string) (*Store, error) {
	s := &Store{path: path, pods: map[types.UID]map[string]*containerState{}}
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

// save writes the store; mu is held.
func (s *Store) save() error {
	b, err := json.Marshal(s.pods)
	if err != nil {
		return err
	}
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
	return s.save()
}

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

// SetActuated records what was applied to the container.
func (s *Store) SetActuated(uid types.UID, name string, r v1.ResourceRequirements) error {
	s.mu.Lock()
	defer s.mu.Unlock()
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
		return nil
	}
	st.Actuated = r.DeepCopy()
	return s.save()
}

// Retain forgets every pod not in keep.
func (s *Store) Retain(keep func(types.UID) bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for uid := range s.pods {
		if !keep(uid) {
			delete(s.pods, uid)
			delete(s.pending, uid)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return s.save()
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
