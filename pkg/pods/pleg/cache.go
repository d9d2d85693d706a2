package pleg

import (
	"errors"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// Cache holds the newest runtime status of every pod, with the time it was
// read. The PLEG writes it after each relist; the pod workers read it.
//
// An entry is fresh as of max(its own time, the last relist's time): a
// relist that found no change for a pod vouches for its older entry.
type Cache struct {
	mu      sync.RWMutex
	entries map[types.UID]*cacheEntry
	// relisted is when the last complete relist began.
	relisted time.Time
}

type cacheEntry struct {
	status   *container.PodStatus
	err      error
	modified time.Time
	// settled: read back by the pod worker's sync after its last change
	// to the pod, and not handed to the worker since: fresh for its next
	// sync, whatever that sync's minimum time.
	settled bool
}

// NewCache returns an empty cache.
func NewCache() *Cache { return &Cache{entries: map[types.UID]*cacheEntry{}} }

// Get returns the cached status of a pod; an unknown pod has an empty
// status, once a relist vouches that it has nothing in the runtime.
func (c *Cache) Get(uid types.UID) (*container.PodStatus, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if e, ok := c.entries[uid]; ok {
		return e.status, e.err
	}
	if c.relisted.IsZero() {
		// Before the first complete relist an unknown pod may simply not
		// be read yet: an empty status would say it has nothing running
		// (a pod worker would then take a running pod for finished).
		return &container.PodStatus{ID: uid}, ErrNotRelisted
	}
	return &container.PodStatus{ID: uid}, nil
}

// ErrNotRelisted says the cache cannot answer for a pod yet: the first
// relist has not completed.
var ErrNotRelisted = errors.New("the pod lifecycle event generator has not completed its first relist")

// getIfFresh returns the entry when it is known to be at least as new as
// min, and reports whether it is.
func (c *Cache) getIfFresh(uid types.UID, min time.Time) (*container.PodStatus, error, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[uid]
	switch {
	case ok && (e.settled || e.modified.After(min) || c.relisted.After(min)):
		// Handed to the worker: if this sync changes the pod, the next
		// one must read it again.
		e.settled = false
		return e.status, e.err, true
	case !ok && c.relisted.After(min):
		return &container.PodStatus{ID: uid}, nil, true
	}
	return nil, nil, false
}

// Set stores a status read at ts, unless a newer one is already there:
// an on-demand read and a relist may finish out of order.
//
// A pod whose sandboxes have all stopped keeps the IPs it had, as
// upstream's PLEG keeps them: the runtime reports a stopped sandbox
// without its address, and a pod that ended still reports the address it
// ran with (node e2e: "Pod IPs when pod gets terminated").
func (c *Cache) Set(uid types.UID, status *container.PodStatus, err error, ts time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[uid]
	if ok && e.modified.After(ts) {
		return
	}
	if ok && e.status != nil && status != nil && err == nil && len(status.IPs) == 0 && status.ReadySandboxes() == 0 {
		status.IPs = append([]string(nil), e.status.IPs...)
	}
	c.entries[uid] = &cacheEntry{status: status, err: err, modified: ts}
}

// settle marks the entry read at ts as the pod worker's read back (see
// Generic.Refresh), unless a newer read replaced it.
func (c *Cache) settle(uid types.UID, ts time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[uid]; ok && e.err == nil && e.modified.Equal(ts) {
		e.settled = true
	}
}

// entry returns a pod's cached status, if one was read without error.
func (c *Cache) entry(uid types.UID) (*container.PodStatus, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.entries[uid]
	if !ok || e.err != nil || e.status == nil {
		return nil, false
	}
	return e.status, true
}

// readAfter returns a pod's status if it was read, without error, after t
// (a relist only vouching for it does not count).
func (c *Cache) readAfter(uid types.UID, t time.Time) (*container.PodStatus, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.entries[uid]
	if !ok || e.err != nil || e.status == nil || !e.modified.After(t) {
		return nil, false
	}
	return e.status, true
}

// Delete forgets a pod.
func (c *Cache) Delete(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, uid)
}

// MarkRelisted records that every pod's entry was checked as of ts.
func (c *Cache) MarkRelisted(ts time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ts.After(c.relisted) {
		c.relisted = ts
	}
}
