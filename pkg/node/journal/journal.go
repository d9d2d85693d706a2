// Package journal is the node journal: what nodelet must not forget when
// it restarts while the API server is unreachable. The upstream kubelet
// keeps none of it; after such a restart it no longer knows which pods
// it admitted or rejected, which ones finished, or what their configMaps
// held.
//
// One bbolt file under the root directory holds, per pod, the pod as its
// source last delivered it, the admission decision and the newest status
// (with whether the pod finished); the configMaps, secrets and service
// account tokens pods refer to; and the timelines of the last finished
// pods. The schema, its write rules and its bounds are in docs/design.md.
//
// Writers never wait for the disk: a change is encoded at once and queued,
// and Run commits the queue, one transaction (and fsync) per batch, newest
// value of each key winning; in a burst, commits are commitWindow apart.
// A record is sealed with a CRC-32C, so a damaged one is detected and
// skipped on load, never half-applied; a file bbolt cannot open or check
// is moved aside and a new one started.
package journal

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/infra/failpoint"
)

// The buckets. Pod buckets are keyed by pod UID.
const (
	bucketMeta      = "meta"      // "schema": the schema version
	bucketPods      = "pods"      // the pod as its source delivered it
	bucketDecisions = "decisions" // the admission decision
	bucketStatuses  = "statuses"  // the newest status, and whether the pod finished
	bucketObjects   = "objects"   // kind/namespace/name: a configMap or secret
	bucketTokens    = "tokens"    // a service account token request's key: the token
	bucketTimelines = "timelines" // finish time/uid: a finished pod's timeline
	bucketProbes    = "probes"    // uid/container name/probe: a container's last probe result
)

var buckets = []string{bucketMeta, bucketPods, bucketDecisions, bucketStatuses, bucketObjects, bucketTokens, bucketTimelines, bucketProbes}

// schema is the version of the layout above; a file of another version is
// moved aside rather than misread.
const schema = "1"

// sealVersion is the first byte of every sealed record.
const sealVersion = 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrDamaged marks a record or file that failed its checks.
var ErrDamaged = errors.New("journal damaged")

// seal prefixes a record with its version and checksum.
func seal(payload []byte) []byte {
	out := make([]byte, 5+len(payload))
	out[0] = sealVersion
	binary.BigEndian.PutUint32(out[1:5], crc32.Checksum(payload, castagnoli))
	copy(out[5:], payload)
	return out
}

// unseal checks a record and returns its payload.
func unseal(b []byte) ([]byte, error) {
	if len(b) < 5 || b[0] != sealVersion {
		return nil, fmt.Errorf("%w: record too short or of unknown version", ErrDamaged)
	}
	payload := b[5:]
	if crc32.Checksum(payload, castagnoli) != binary.BigEndian.Uint32(b[1:5]) {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrDamaged)
	}
	return payload, nil
}

// Options configure a Journal.
type Options struct {
	// Path is the journal file.
	Path  string
	Clock clock.WithTicker
	// KeepTimelines is how many finished pods' timelines are kept.
	KeepTimelines int
	// Retention, if set, prunes finished pods' records that old, for
	// nodes whose sources never say a pod is gone for good (standalone).
	Retention time.Duration
	// PruneEvery is how often Run prunes; 0 is ten minutes.
	PruneEvery time.Duration
	// LockTimeout bounds the wait for the file lock; 0 is a second.
	LockTimeout time.Duration
}

type bkey struct{ bucket, key string }

// op is a queued change: a sealed value, or a delete.
type op struct {
	value []byte
	del   bool
}

// Journal is the node journal. It is safe for concurrent use.
type Journal struct {
	o  Options
	db *bolt.DB

	mu      sync.Mutex
	pending map[bkey]op
	// committing is the batch being committed: still readable, as the
	// file may not have it yet.
	committing map[bkey]op
	// queued counts the changes queued, committed those on disk.
	queued, committed uint64
	// flushed is closed, and replaced, after each commit.
	flushed   chan struct{}
	decisions map[types.UID]Decision
	// versions are the resource versions of the objects last recorded,
	// so an unchanged object is not written again.
	versions map[string]string
	wake     chan struct{}
	// urgent asks Run to commit now, within the commit window (Flush).
	urgent chan struct{}
	// failing is set while commits fail, so the error is logged once.
	failing bool
}

// Open opens (or creates) the journal and loads what it holds. A file
// that fails bbolt's checks is moved aside, with the reason in the
// returned State, and a new one started; a file another process holds
// is an error.
func Open(o Options) (*Journal, *State, error) {
	if o.LockTimeout == 0 {
		o.LockTimeout = time.Second
	}
	if o.PruneEvery == 0 {
		o.PruneEvery = 10 * time.Minute
	}
	db, state, err := openChecked(o.Path, o.LockTimeout)
	if errors.Is(err, ErrDamaged) {
		aside := fmt.Sprintf("%s.damaged-%d", o.Path, o.Clock.Now().Unix())
		klog.ErrorS(err, "The node journal is damaged: moving it aside and starting a new one", "path", o.Path, "movedTo", aside)
		if rerr := os.Rename(o.Path, aside); rerr != nil {
			return nil, nil, fmt.Errorf("moving the damaged journal aside: %w", rerr)
		}
		db, state, err = openChecked(o.Path, o.LockTimeout)
		if state != nil {
			state.MovedAside = aside
			state.MovedAsideReason = err2string(err)
		}
	}
	if err != nil {
		return nil, nil, err
	}
	j := &Journal{o: o, db: db, pending: map[bkey]op{}, flushed: make(chan struct{}), decisions: map[types.UID]Decision{}, versions: map[string]string{}, wake: make(chan struct{}, 1), urgent: make(chan struct{}, 1)}
	for _, p := range state.Pods {
		if p.Decision != nil {
			j.decisions[p.UID] = *p.Decision
		}
	}
	return j, state, nil
}

func err2string(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// openChecked opens the file, makes the buckets, checks every page and
// loads the records.
func openChecked(path string, lockTimeout time.Duration) (db *bolt.DB, state *State, err error) {
	// Without a freelist to write, a commit writes a page or more less
	// (as etcd runs bbolt); bbolt rebuilds it on open by a scan, which a
	// file of a few MB makes cheap.
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return nil, nil, fmt.Errorf("node journal %s is locked: is another nodelet running with this root directory? %w", path, err)
	case err != nil:
		return nil, nil, fmt.Errorf("%w: opening %s: %v", ErrDamaged, path, err)
	}
	defer func() {
		// bbolt panics on some damaged pages rather than failing.
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: reading %s: %v", ErrDamaged, path, r)
		}
		if err != nil {
			db.Close()
			db, state = nil, nil
		}
	}()
	if err = db.Update(initBuckets); err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrDamaged, path, err)
	}
	if err = db.View(func(tx *bolt.Tx) error {
		for cerr := range tx.Check() {
			return cerr
		}
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("%w: checking %s: %v", ErrDamaged, path, err)
	}
	state, err = load(db)
	return db, state, err
}

// initBuckets makes the buckets and refuses a file of another schema.
func initBuckets(tx *bolt.Tx) error {
	for _, name := range buckets {
		if _, err := tx.CreateBucketIfNotExists([]byte(name)); err != nil {
			return err
		}
	}
	meta := tx.Bucket([]byte(bucketMeta))
	switch v := meta.Get([]byte("schema")); {
	case v == nil:
		return meta.Put([]byte("schema"), []byte(schema))
	case string(v) != schema:
		return fmt.Errorf("schema %q, want %q", v, schema)
	}
	return nil
}

// Run commits queued changes until ctx ends, pruning now and then; it
// commits what is left and closes the file before it returns.
func (j *Journal) Run(ctx context.Context) error {
	prune := j.o.Clock.NewTicker(j.o.PruneEvery)
	defer prune.Stop()
	defer j.db.Close()
	j.prune()
	backOff := time.Duration(0)
	var last time.Time
	for {
		var retry <-chan time.Time
		if backOff > 0 {
			retry = j.o.Clock.After(backOff)
		}
		select {
		case <-ctx.Done():
			j.commit()
			return nil
		case <-j.wake:
			if !j.waitWindow(ctx, last) {
				j.commit()
				return nil
			}
		case <-j.urgent:
		case <-retry:
		case <-prune.C():
			j.prune()
		}
		last = j.o.Clock.Now()
		if j.commit() {
			backOff = 0
		} else {
			backOff = min(max(2*backOff, 100*time.Millisecond), 10*time.Second)
		}
	}
}

// commitWindow is the least time between two commits while changes keep
// coming. Each bbolt commit rewrites every page it touches and the meta
// page, about 25 KB for the two or three records a pod's step writes, and
// syncs twice: committing each step at once wrote 23 MB and made 1,484
// fdatasyncs in one burst of 110 pods started and deleted. A change after
// a quiet spell is committed at once; in a burst, one more window's
// changes could be lost in a crash.
const commitWindow = 100 * time.Millisecond

// waitWindow holds a commit until commitWindow after the last one, or a
// Flush; it reports false when ctx ended.
func (j *Journal) waitWindow(ctx context.Context, last time.Time) bool {
	wait := commitWindow - j.o.Clock.Since(last)
	if last.IsZero() || wait <= 0 {
		return true
	}
	t := j.o.Clock.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C():
	case <-j.urgent:
	case <-ctx.Done():
		return false
	}
	return true
}

// commit writes the queue in one transaction and reports whether it
// succeeded; on failure the changes stay queued (unless newer ones came).
func (j *Journal) commit() bool {
	j.mu.Lock()
	batch, seq := j.pending, j.queued
	j.pending, j.committing = map[bkey]op{}, batch
	j.mu.Unlock()
	defer func() {
		j.mu.Lock()
		j.committing = nil
		j.mu.Unlock()
	}()
	if len(batch) == 0 {
		j.markCommitted(seq)
		return true
	}
	err := j.db.Update(func(tx *bolt.Tx) error {
		for k, o := range batch {
			b := tx.Bucket([]byte(k.bucket))
			var err error
			if o.del {
				err = b.Delete([]byte(k.key))
			} else {
				err = b.Put([]byte(k.key), o.value)
			}
			if err != nil {
				return fmt.Errorf("%s/%s: %w", k.bucket, k.key, err)
			}
		}
		// Written into the transaction, not yet on disk: a crash here
		// must leave the journal as it was before the batch.
		failpoint.Inject("journal-tx-written")
		return nil
	})
	if err != nil {
		j.requeue(batch, err)
		return false
	}
	failpoint.Inject("journal-committed")
	j.mu.Lock()
	if j.failing {
		klog.InfoS("The node journal is written again")
		j.failing = false
	}
	j.mu.Unlock()
	j.markCommitted(seq)
	return true
}

// requeue puts a failed batch back under any newer changes.
func (j *Journal) requeue(batch map[bkey]op, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.failing {
		klog.ErrorS(err, "Cannot write the node journal; retrying (pods are unaffected, but a restart now would forget the latest changes)", "path", j.o.Path)
		j.failing = true
	}
	for k, o := range batch {
		if _, newer := j.pending[k]; !newer {
			j.pending[k] = o
		}
	}
}

func (j *Journal) markCommitted(seq uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if seq > j.committed {
		j.committed = seq
	}
	close(j.flushed)
	j.flushed = make(chan struct{})
}

// Flush waits until every change queued before it is on disk.
func (j *Journal) Flush(ctx context.Context) error {
	j.mu.Lock()
	target := j.queued
	j.mu.Unlock()
	for {
		j.mu.Lock()
		done, ch := j.committed >= target, j.flushed
		j.mu.Unlock()
		if done {
			return nil
		}
		signal(j.urgent)
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("flushing the node journal: %w", ctx.Err())
		}
	}
}

// signal leaves one wake-up on ch (buffered, of one) without waiting.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// queue records changes to be committed.
func (j *Journal) queue(changes map[bkey]op) {
	j.mu.Lock()
	for k, o := range changes {
		j.pending[k] = o
	}
	j.queued++
	j.mu.Unlock()
	signal(j.wake)
}

// put queues one record, encoded as JSON.
func (j *Journal) put(bucket, key string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		klog.ErrorS(err, "Cannot encode a node journal record", "bucket", bucket, "key", key)
		return
	}
	j.queue(map[bkey]op{{bucket, key}: {value: seal(b)}})
}

// get reads one record: the queued value if there is one, else the
// file's.
func (j *Journal) get(bucket, key string, v any) (bool, error) {
	j.mu.Lock()
	o, ok := j.pending[bkey{bucket, key}]
	if !ok {
		o, ok = j.committing[bkey{bucket, key}]
	}
	j.mu.Unlock()
	var sealed []byte
	switch {
	case ok && o.del:
		return false, nil
	case ok:
		sealed = o.value
	default:
		if err := j.db.View(func(tx *bolt.Tx) error {
			if b := tx.Bucket([]byte(bucket)).Get([]byte(key)); b != nil {
				sealed = append([]byte(nil), b...)
			}
			return nil
		}); err != nil {
			return false, err
		}
	}
	if sealed == nil {
		return false, nil
	}
	payload, err := unseal(sealed)
	if err != nil {
		return false, fmt.Errorf("%s/%s: %w", bucket, key, err)
	}
	return true, json.Unmarshal(payload, v)
}

// File, in the root directory, is the node journal.
const File = "nodelet_journal.db"
