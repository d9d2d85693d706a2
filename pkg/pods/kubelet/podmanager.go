package kubelet

import (
	"maps"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// podManager holds the desired pods: what the sources say should exist on
// the node. Mirror pods (the API server's copies of static pods) are kept
// apart and matched to their static pods by full name.
type podManager struct {
	mu           sync.RWMutex
	byUID        map[types.UID]*v1.Pod
	byFullName   map[string]*v1.Pod
	mirrorByName map[string]*v1.Pod
}

func newPodManager() *podManager {
	return &podManager{
		byUID:        map[types.UID]*v1.Pod{},
		byFullName:   map[string]*v1.Pod{},
		mirrorByName: map[string]*v1.Pod{},
	}
}

// addOrUpdate records a pod (or mirror pod) from a source.
func (m *podManager) addOrUpdate(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name := podutil.FullName(pod)
	if podutil.IsMirror(pod) {
		m.mirrorByName[name] = pod
		return
	}
	if old, ok := m.byUID[pod.UID]; ok && podutil.FullName(old) != name {
		delete(m.byFullName, podutil.FullName(old))
	}
	m.byUID[pod.UID] = pod
	m.byFullName[name] = pod
}

// remove forgets a pod (or mirror pod).
func (m *podManager) remove(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name := podutil.FullName(pod)
	if podutil.IsMirror(pod) {
		if cur, ok := m.mirrorByName[name]; ok && cur.UID == pod.UID {
			delete(m.mirrorByName, name)
		}
		return
	}
	delete(m.byUID, pod.UID)
	if cur, ok := m.byFullName[name]; ok && cur.UID == pod.UID {
		delete(m.byFullName, name)
	}
}

// pods returns every desired (non-mirror) pod.
func (m *podManager) pods() []*v1.Pod {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Collect(maps.Values(m.byUID))
}

// podByUID returns a desired pod.
func (m *podManager) podByUID(uid types.UID) (*v1.Pod, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	p, ok := m.byUID[uid]
	return p, ok
}

// mirrorPodOf returns the mirror of a static pod, if any.
func (m *podManager) mirrorPodOf(pod *v1.Pod) *v1.Pod {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.mirrorByName[podutil.FullName(pod)]
}

// podAndMirror resolves a pod from a source: for a mirror pod, the static
// pod it mirrors (nil if unknown) and the mirror; otherwise the pod and its
// mirror, if any.
func (m *podManager) podAndMirror(pod *v1.Pod) (p, mirror *v1.Pod, wasMirror bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	name := podutil.FullName(pod)
	if podutil.IsMirror(pod) {
		return m.byFullName[name], pod, true
	}
	return pod, m.mirrorByName[name], false
}

// mirrorPods returns every mirror pod.
func (m *podManager) mirrorPods() []*v1.Pod {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Collect(maps.Values(m.mirrorByName))
}
