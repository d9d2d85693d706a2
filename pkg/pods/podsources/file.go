package podsources

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// Setter receives a source's complete set of pods.
type Setter interface {
	Set(ctx context.Context, source string, pods []*v1.Pod)
}

// FileSource reads static pod manifests from a directory (every regular,
// non-hidden file in it) or from one file. It re-reads on every inotify
// event and every period, and delivers the whole set each time; the merge
// works out what changed.
type FileSource struct {
	path     string
	static   Static
	period   time.Duration
	out      Setter
	recorder record.EventRecorder
	clock    clock.WithTicker
	nodeRef  *v1.ObjectReference

	// firstSeen orders manifests by when they appeared: of two pods with
	// one name, the one whose file appeared first keeps running.
	firstSeen map[string]uint64
	seen      uint64
	// reported holds the last error of each file, so a broken file is
	// reported when it breaks, not on every re-read.
	reported map[string]string
	// decoded caches each file's pods by identity, modification time and
	// size, so re-reading a directory only decodes what changed.
	decoded map[string]decodedFile
	// relisted, in tests, is told when a re-read has ended and been
	// timed: a test that moves its fake clock before that would make the
	// re-read look as long as the step.
	relisted func()
	// lastRelist is when the last re-read ended and how long it took.
	lastRelist struct {
		end  time.Time
		took time.Duration
	}
	// removed are the manifests removed (or renamed away) since the last
	// re-read. One put back meanwhile is delivered gone, then back, as
	// upstream's source delivers each file event: its pod is stopped and
	// started again, not left running as if nothing happened.
	removed map[string]bool
}

type decodedFile struct {
	// info identifies the file read: a symlink swapped to another file
	// of the same size and time is still a different file.
	info os.FileInfo
	pods []*v1.Pod
	err  error
}

// NewFileSource returns a source reading path every period.
func NewFileSource(path string, static Static, period time.Duration, out Setter, recorder record.EventRecorder, clk clock.WithTicker) *FileSource {
	return &FileSource{
		path: filepath.Clean(path), static: static, period: period, out: out,
		recorder: recorder, clock: clk,
		nodeRef:   &v1.ObjectReference{Kind: "Node", Name: static.NodeName, UID: "", APIVersion: "v1"},
		firstSeen: map[string]uint64{}, reported: map[string]string{}, decoded: map[string]decodedFile{},
		removed: map[string]bool{},
	}
}

// Run watches and re-reads until ctx ends.
func (s *FileSource) Run(ctx context.Context) {
	klog.InfoS("Watching static pod manifests", "path", s.path)
	w := newWatch(s.path)
	defer w.close()
	// The ticker exists before the first delivery, so whoever sees that
	// delivery can rely on the period having started.
	t := s.clock.NewTicker(s.period)
	defer t.Stop()
	w.ensure()
	s.relist(ctx)
	// paced fires when a re-read held back by pace is due.
	var paced <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			w.ensure()
			s.relist(ctx)
		case <-paced:
			paced = nil
			w.ensure()
			s.relist(ctx)
		case ev, ok := <-w.events():
			if !ok {
				w.events = func() <-chan fsnotify.Event { return nil }
				continue
			}
			if !w.relevant(ev) {
				continue
			}
			// Editors touch a file several times in a row; one re-read
			// after the burst sees the final content.
			klog.V(5).InfoS("Static pod manifests changed", "path", s.path, "event", ev.String())
			s.noteRemoval(ev)
			w.drain(func(ev fsnotify.Event) {
				if w.relevant(ev) {
					s.noteRemoval(ev)
				}
			})
			if paced != nil {
				continue // a re-read is already due
			}
			if wait := s.pace(); wait > 0 {
				paced = s.clock.After(wait)
				continue
			}
			w.ensure()
			s.relist(ctx)
		case err, ok := <-w.errors():
			if ok {
				klog.ErrorS(err, "Watching static pod manifests failed; periodic re-reading continues", "path", s.path)
			}
		}
	}
}

// paceFactor spaces re-reads caused by file events: the next may start
// no sooner than this many times the last one's length after it ended.
// Each re-read reads and merges every manifest, and a burst of writes
// sends one event per file (fsnotify hands them over one at a time, so
// draining them finds one at most): re-reading on each of n writes would
// cost n² (at 1,000 manifests, 28 s of a core). Paced, the source spends
// at most a fifth of a core however many files change, and a single
// write, after a quiet spell, is read at once.
const paceFactor = 4

// pace is how long to hold back a re-read caused by a file event.
func (s *FileSource) pace() time.Duration {
	return s.lastRelist.end.Add(paceFactor * s.lastRelist.took).Sub(s.clock.Now())
}

// noteRemoval remembers a manifest removed or renamed away.
func (s *FileSource) noteRemoval(ev fsnotify.Event) {
	if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
		// By name in the directory: the watch sees the directory a
		// symlinked path resolves to.
		s.removed[filepath.Base(ev.Name)] = true
	}
}

// relist reads every manifest and delivers the set.
func (s *FileSource) relist(ctx context.Context) {
	start := s.clock.Now()
	defer func() {
		s.lastRelist.end = s.clock.Now()
		s.lastRelist.took = s.lastRelist.end.Sub(start)
		if s.relisted != nil {
			s.relisted()
		}
	}()
	pods, from, err := s.read()
	if err != nil {
		// The path itself is unreadable: keep what was delivered last,
		// and the removals seen, for the read that succeeds.
		s.report(s.path, err)
		return
	}
	s.report(s.path, nil)
	removed := s.removed
	s.removed = map[string]bool{}
	if len(removed) > 0 {
		var without []*v1.Pod
		for i, p := range pods {
			if !removed[filepath.Base(from[i])] {
				without = append(without, p)
			}
		}
		if len(without) < len(pods) {
			klog.V(2).InfoS("Static pod manifests were removed and put back; their pods go, then come back", "path", s.path)
			s.out.Set(ctx, podutil.FileSource, without)
			// The merge owns what it was given: the full set is copied.
			for i, p := range pods {
				pods[i] = p.DeepCopy()
			}
		}
	}
	s.out.Set(ctx, podutil.FileSource, pods)
}

// read returns the pods of every manifest under the path, in the order
// their files first appeared, and the file each came from.
func (s *FileSource) read() (pods []*v1.Pod, from []string, err error) {
	fi, err := os.Stat(s.path)
	if os.IsNotExist(err) {
		// No manifests yet is a valid, empty set.
		klog.V(2).InfoS("Static pod path does not exist; no static pods", "path", s.path)
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var files []string
	if fi.IsDir() {
		entries, err := os.ReadDir(s.path)
		if err != nil {
			return nil, nil, err
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") {
				continue
			}
			files = append(files, filepath.Join(s.path, e.Name()))
		}
	} else {
		files = []string{s.path}
	}

	present := map[string]bool{}
	stats := map[string]os.FileInfo{}
	var usable []string
	for _, f := range files {
		fi, err := os.Stat(f) // follows symlinks: a link to a manifest counts
		if err != nil {
			if _, lerr := os.Lstat(f); os.IsNotExist(lerr) {
				continue // removed since the directory was listed
			}
			s.report(f, err) // e.g. a dangling symlink
			continue
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		present[f] = true
		stats[f] = fi
		if _, ok := s.firstSeen[f]; !ok {
			s.seen++
			s.firstSeen[f] = s.seen
		}
		usable = append(usable, f)
	}
	for f := range s.firstSeen {
		if !present[f] {
			delete(s.firstSeen, f)
			delete(s.reported, f)
			delete(s.decoded, f)
		}
	}
	sort.SliceStable(usable, func(i, j int) bool {
		a, b := s.firstSeen[usable[i]], s.firstSeen[usable[j]]
		if a != b {
			return a < b
		}
		return usable[i] < usable[j]
	})
	for _, f := range usable {
		fi := stats[f]
		d, ok := s.decoded[f]
		if !ok || !os.SameFile(d.info, fi) || !d.info.ModTime().Equal(fi.ModTime()) || d.info.Size() != fi.Size() {
			d = decodedFile{info: fi}
			d.pods, d.err = s.readFile(f)
			s.decoded[f] = d
		}
		s.report(f, d.err)
		// The merge takes ownership of what it is given: hand out copies.
		for _, p := range d.pods {
			pods = append(pods, p.DeepCopy())
			from = append(from, f)
		}
	}
	return pods, from, nil
}

func (s *FileSource) readFile(path string) ([]*v1.Pod, error) {
	data, err := readAtMost(path, maxManifestBytes+1)
	if err != nil {
		return nil, err
	}
	decoded, err := decodePods(data)
	if err != nil {
		return nil, err
	}
	out := make([]*v1.Pod, 0, len(decoded))
	for _, p := range decoded {
		sp, err := s.static.pod(p, path, true)
		if err != nil {
			return nil, err
		}
		out = append(out, sp)
	}
	return out, nil
}

// report logs a file's error and records a warning event, once per
// distinct error; a file that recovers is logged once too.
func (s *FileSource) report(path string, err error) {
	prev, had := s.reported[path]
	if err == nil {
		if had {
			klog.InfoS("Static pod manifest is readable again", "path", path)
			delete(s.reported, path)
		}
		return
	}
	if had && prev == err.Error() {
		return
	}
	s.reported[path] = err.Error()
	klog.ErrorS(err, "Could not process static pod manifest, ignoring it", "path", path)
	s.recorder.Eventf(s.nodeRef, v1.EventTypeWarning, "FailedValidation", "Could not process static pod manifest %s: %v", path, err)
}

// watch keeps inotify watches on the manifest directory (or the file's
// directory) and on the path's parent, re-establishing them when the path
// appears, disappears or is re-pointed by a symlink swap.
type watch struct {
	path    string
	w       *fsnotify.Watcher
	target  string // the directory whose entries we watch, resolved
	parent  string
	events  func() <-chan fsnotify.Event
	errors  func() <-chan error
	enabled bool
}

func newWatch(path string) *watch {
	w := &watch{path: path}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		klog.ErrorS(err, "Cannot watch static pod manifests; re-reading them periodically only", "path", path)
		w.events = func() <-chan fsnotify.Event { return nil }
		w.errors = func() <-chan error { return nil }
		return w
	}
	w.w, w.enabled = fw, true
	w.events = func() <-chan fsnotify.Event { return fw.Events }
	w.errors = func() <-chan error { return fw.Errors }
	return w
}

// ensure (re)adds the watches for what the path resolves to now.
func (w *watch) ensure() {
	if !w.enabled {
		return
	}
	parent := filepath.Dir(w.path)
	if w.parent != parent {
		if err := w.w.Add(parent); err == nil {
			w.parent = parent
		}
	}
	dir := w.path
	if fi, err := os.Stat(w.path); err != nil || !fi.IsDir() {
		dir = parent
	}
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		resolved = ""
	}
	if resolved == w.target {
		return
	}
	if w.target != "" && w.target != w.parent {
		w.w.Remove(w.target)
	}
	w.target = ""
	if resolved != "" {
		if err := w.w.Add(resolved); err != nil {
			klog.ErrorS(err, "Cannot watch static pod directory", "path", resolved)
			return
		}
		w.target = resolved
	}
}

// relevant reports whether an event may change the manifests.
func (w *watch) relevant(ev fsnotify.Event) bool {
	dir := filepath.Dir(ev.Name)
	switch {
	case ev.Name == w.path:
		return true
	case dir == w.target && w.target != w.parent:
		// Inside the manifest directory: hidden files are not manifests.
		return !strings.HasPrefix(filepath.Base(ev.Name), ".")
	default:
		// In the parent: only the path itself matters (single-file mode,
		// or the directory being replaced).
		return false
	}
}

// drain takes the events already queued, handing each to seen: one
// re-read covers them all.
func (w *watch) drain(seen func(fsnotify.Event)) {
	for {
		select {
		case ev, ok := <-w.events():
			if !ok {
				return
			}
			seen(ev)
		default:
			return
		}
	}
}

func (w *watch) close() {
	if w.enabled {
		w.w.Close()
	}
}

// String describes the source for logs.
func (s *FileSource) String() string { return fmt.Sprintf("file source %s", s.path) }

// readAtMost reads up to limit bytes of a file: a manifest over the
// limit is refused anyway, and a huge file must not be read into memory.
func readAtMost(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}
