package podstatus

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// writeQueue hands pods to the API writers. Like client-go's workqueue it
// never hands one pod to two writers at once (a pod added while it is
// being written is handed out again after Done), but it has two classes:
// urgent pods go before the others, each class in the order added.
//
// Why two: in a burst, every new pod's first status (Pending) is written
// while the earliest pods already run. Taken in the order of change, the
// first pods' Running writes waited behind a hundred Pending ones, up to
// 1.7 s in a 110-pod burst on the development VM; a client waiting for
// Ready waited that long. Pending writes only say "seen"; they may wait.
type writeQueue struct {
	clock clock.Clock

	mu   sync.Mutex
	cond *sync.Cond
	// urgent and normal are the pods waiting, in order; class says which
	// list holds each.
	urgent, normal []types.UID
	class          map[types.UID]bool
	// processing holds the pods a writer has; again those added since,
	// with their class.
	processing map[types.UID]bool
	again      map[types.UID]bool
	down       bool
	stop       chan struct{}
}

func newWriteQueue(clk clock.Clock) *writeQueue {
	q := &writeQueue{clock: clk, class: map[types.UID]bool{}, processing: map[types.UID]bool{},
		again: map[types.UID]bool{}, stop: make(chan struct{})}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// Add queues uid unless it waits already; a waiting pod that becomes
// urgent moves to the urgent list's end.
func (q *writeQueue) Add(uid types.UID, urgent bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.addLocked(uid, urgent)
}

func (q *writeQueue) addLocked(uid types.UID, urgent bool) {
	if q.down {
		return
	}
	if q.processing[uid] {
		q.again[uid] = q.again[uid] || urgent
		return
	}
	if was, ok := q.class[uid]; ok {
		if !urgent || was {
			return
		}
		q.normal = slices.DeleteFunc(q.normal, func(u types.UID) bool { return u == uid })
	}
	q.class[uid] = urgent
	if urgent {
		q.urgent = append(q.urgent, uid)
	} else {
		q.normal = append(q.normal, uid)
	}
	q.cond.Signal()
}

// AddAfter queues uid after d, unless the queue shuts down first.
func (q *writeQueue) AddAfter(uid types.UID, urgent bool, d time.Duration) {
	go func() {
		select {
		case <-q.clock.After(d):
			q.Add(uid, urgent)
		case <-q.stop:
		}
	}()
}

// Get waits for a pod and hands it over, with its class; quit is set once
// the queue shuts down. The caller must call Done with it.
func (q *writeQueue) Get() (uid types.UID, urgent, quit bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.urgent) == 0 && len(q.normal) == 0 && !q.down {
		q.cond.Wait()
	}
	if q.down {
		return "", false, true
	}
	list := &q.normal
	if len(q.urgent) > 0 {
		list = &q.urgent
	}
	uid = (*list)[0]
	*list = (*list)[1:]
	urgent = q.class[uid]
	delete(q.class, uid)
	q.processing[uid] = true
	return uid, urgent, false
}

// Done ends the writer's hold on uid, queueing it again if it was added
// meanwhile.
func (q *writeQueue) Done(uid types.UID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, uid)
	if urgent, ok := q.again[uid]; ok {
		delete(q.again, uid)
		q.addLocked(uid, urgent)
	}
}

// ShutDown wakes every waiting Get with quit; pods being written are
// finished by their writers.
func (q *writeQueue) ShutDown() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.down {
		q.down = true
		close(q.stop)
	}
	q.cond.Broadcast()
}
