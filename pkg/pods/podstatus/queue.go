package podstatus

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// writeQueue hands pods to the API writers. It is client-go's delaying
// workqueue, which never hands one pod to two writers (a pod added while a
// writer holds it comes back after Done) and delays retries, with its
// waiting pods kept in two classes (classes): urgent pods go before the
// others, each class in the order added, and a pod takes the strongest
// class it was added with since it was last handed out.
//
// Why two: in a burst, every new pod's first status (Pending) is written
// while the earliest pods already run. Taken in the order of change, the
// first pods' Running writes waited behind a hundred Pending ones, up to
// 1.7 s in a 110-pod burst on the development VM; a client waiting for
// Ready waited that long. Pending writes only say "seen"; they may wait.
type writeQueue struct {
	q       workqueue.TypedDelayingInterface[types.UID]
	classes *classes
}

func newWriteQueue(clk clock.WithTicker) *writeQueue {
	c := newClasses()
	q := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[types.UID]{
		Clock: clk,
		Queue: workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[types.UID]{Clock: clk, Queue: c}),
	})
	return &writeQueue{q: q, classes: c}
}

// Add queues uid; a waiting pod added as urgent moves to the urgent end.
func (w *writeQueue) Add(uid types.UID, urgent bool) {
	w.classes.mark(uid, urgent)
	w.q.Add(uid)
}

// AddAfter queues uid after d, unless the queue shuts down first.
func (w *writeQueue) AddAfter(uid types.UID, urgent bool, d time.Duration) {
	w.classes.mark(uid, urgent)
	w.q.AddAfter(uid, d)
}

// Get waits for a pod and hands it over, with its class; quit is set once
// the queue shut down and is empty. The caller must call Done with it.
func (w *writeQueue) Get() (uid types.UID, urgent, quit bool) {
	uid, quit = w.q.Get()
	if quit {
		return "", false, true
	}
	return uid, w.classes.handedOut(uid), false
}

// Done ends the writer's hold on uid.
func (w *writeQueue) Done(uid types.UID) { w.q.Done(uid) }

// Len is how many pods wait.
func (w *writeQueue) Len() int { return w.q.Len() }

// ShutDown makes Get say quit once the waiting pods are handed out.
func (w *writeQueue) ShutDown() { w.q.ShutDown() }

// classes is the workqueue's store of waiting pods (workqueue.Queue),
// called with the workqueue's lock held. Its own lock covers the marks,
// which Add sets before it takes the workqueue's.
//
// A pod that becomes urgent while it waits in normal is appended to
// urgent and its entry in normal left behind, to be skipped when its
// turn comes: finding it would cost a scan of normal on every such move,
// which over a burst is the square of the pods. Each entry in normal
// carries a number, and only the one inNormal names is live.
type classes struct {
	mu sync.Mutex
	// marks is the strongest class each pod was added with since it was
	// last handed out; popped is the class of each pod just handed out,
	// until Get takes it.
	marks, popped map[types.UID]bool
	urgent        []types.UID
	normal        []normalEntry
	inNormal      map[types.UID]uint64
	pushed        uint64
}

type normalEntry struct {
	uid types.UID
	n   uint64
}

func newClasses() *classes {
	return &classes{marks: map[types.UID]bool{}, popped: map[types.UID]bool{}, inNormal: map[types.UID]uint64{}}
}

func (c *classes) mark(uid types.UID, urgent bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.marks[uid] = c.marks[uid] || urgent
}

func (c *classes) Push(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.marks[uid] {
		c.urgent = append(c.urgent, uid)
		return
	}
	c.pushed++
	c.normal = append(c.normal, normalEntry{uid, c.pushed})
	c.inNormal[uid] = c.pushed
}

// Touch moves a waiting pod marked urgent since it was pushed.
func (c *classes) Touch(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.inNormal[uid]; ok && c.marks[uid] {
		c.dropNormalLocked(uid)
		c.urgent = append(c.urgent, uid)
	}
}

func (c *classes) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.urgent) + len(c.inNormal)
}

func (c *classes) Pop() types.UID {
	c.mu.Lock()
	defer c.mu.Unlock()
	var uid types.UID
	if len(c.urgent) > 0 {
		uid, c.urgent = c.urgent[0], c.urgent[1:]
	} else {
		for !c.liveLocked(c.normal[0]) {
			c.normal = c.normal[1:]
		}
		uid, c.normal = c.normal[0].uid, c.normal[1:]
		c.dropNormalLocked(uid)
	}
	c.popped[uid] = c.marks[uid]
	delete(c.marks, uid)
	return uid
}

// dropNormalLocked ends uid's live entry in normal; once none is live,
// the entries left behind go too.
func (c *classes) dropNormalLocked(uid types.UID) {
	delete(c.inNormal, uid)
	if len(c.inNormal) == 0 {
		c.normal = c.normal[:0]
	}
}

func (c *classes) liveLocked(e normalEntry) bool {
	n, ok := c.inNormal[e.uid]
	return ok && n == e.n
}

func (c *classes) handedOut(uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	urgent := c.popped[uid]
	delete(c.popped, uid)
	return urgent
}

// waiting lists the waiting pods of each class, in order.
func (c *classes) waiting() (urgent, normal []types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.normal {
		if c.liveLocked(e) {
			normal = append(normal, e.uid)
		}
	}
	return slices.Clone(c.urgent), normal
}
