package podworkers

import "k8s.io/apimachinery/pkg/types"

// staticPods lines up static pods that share a full name (a manifest
// edited, so a new UID for the same pod): one runs at a time, in the
// order they arrived, as two would fight over the same host ports and
// files. Guarded by the PodWorkers' mutex.
type staticPods struct {
	// started is the UID running under each full name.
	started map[string]types.UID
	// waiting are the UIDs waiting for each full name, oldest first.
	waiting map[string][]types.UID
}

func newStaticPods() staticPods {
	return staticPods{started: map[string]types.UID{}, waiting: map[string][]types.UID{}}
}

// wait puts a new static pod in line for its full name.
func (q *staticPods) wait(fullname string, uid types.UID) {
	q.waiting[fullname] = append(q.waiting[fullname], uid)
}

// allowStart lets uid start when no other pod with its full name runs and
// it is first in line, skipping pods that will never start (blocked: gone
// or terminating).
func (q *staticPods) allowStart(fullname string, uid types.UID, blocked func(types.UID) bool) bool {
	if started, ok := q.started[fullname]; ok {
		return started == uid
	}
	waiting := q.waiting[fullname]
	for i, w := range waiting {
		if blocked(w) {
			continue
		}
		if w != uid {
			q.waiting[fullname] = waiting[i:]
			return false
		}
		waiting = waiting[i+1:]
		break
	}
	if len(waiting) > 0 {
		q.waiting[fullname] = waiting
	} else {
		delete(q.waiting, fullname)
	}
	q.started[fullname] = uid
	return true
}

// release frees the full name if uid holds it, and wakes the first pod
// waiting for it that has an update to start with. Call with the workers'
// lock held: statuses are theirs.
func (q *staticPods) release(fullname string, uid types.UID, statuses map[types.UID]*podSyncStatus, wake func(types.UID)) {
	if q.started[fullname] != uid {
		return
	}
	delete(q.started, fullname)
	for _, w := range q.waiting[fullname] {
		if s, ok := statuses[w]; ok && s.pendingUpdate != nil && !s.IsTerminationRequested() {
			wake(w)
			return
		}
	}
}
