// Package pluginwatcher is the kubelet's plugin watcher: node plugins
// (CSI drivers, DRA drivers, device plugins) put a registration socket
// under <root-dir>/plugins_registry that answers pluginregistration.v1
// GetInfo; the watcher hands each plugin to the handler of its type
// (CSIPlugin, DRAPlugin, DevicePlugin), tells the plugin the outcome
// (NotifyRegistrationStatus), and tells the handler when the socket goes.
//
//	socket appears ─▶ GetInfo ─▶ handler.Register ─▶ NotifyRegistrationStatus(ok or why not)
//	socket goes    ─▶ handler.Deregister
//
// Like upstream's it looks through subdirectories too, and passes over
// names starting with a dot (a plugin's files in the making). A socket
// that failed is retried after 1 s, then 2, 4, 8 and every 10 s (a
// plugin's socket exists from its bind, a moment before it listens); one
// made again at the same path (a plugin restarted) registers again.
//
// The directory is read again when inotify says something in it changed,
// and every Poll (10 s) besides: the retries are due then, and the poll
// catches what a lost event (a queue overflow) would hide. An idle node
// reads it six times a minute, not sixty.
package pluginwatcher

import (
	"cmp"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/clock"
)

// RegistryDir is where plugins put their registration sockets, under the
// root directory.
const RegistryDir = "plugins_registry"

// Dir is the registration directory of a root directory.
func Dir(rootDir string) string { return filepath.Join(rootDir, RegistryDir) }

// Plugin is what a plugin said it is, and the socket it said it through.
type Plugin struct {
	Type, Name, Endpoint string
	Versions             []string
	Socket               string
}

// Handler takes the plugins of one type.
type Handler interface {
	// Register checks the plugin and starts using it. Its error is the
	// plugin's answer.
	Register(ctx context.Context, p Plugin) error
	// Deregister: the plugin's registration socket went.
	Deregister(ctx context.Context, p Plugin)
}

// Options configure a Watcher.
type Options struct {
	RootDir string
	Clock   clock.WithTicker
	// Handlers by plugin type (registerapi.CSIPlugin, DRAPlugin,
	// DevicePlugin).
	Handlers map[string]Handler
	// Poll is how often the directory is read without an event; 0 is
	// retryAfter (a second when inotify is not available).
	Poll time.Duration
	// Timeout bounds each call to a plugin; 0 is a minute.
	Timeout time.Duration
}

// Watcher watches the registration directory.
type Watcher struct {
	o Options

	mu sync.Mutex
	// registered are the plugins registered, by socket path.
	registered map[string]registered
	// failed remembers sockets that failed, with when, so a broken plugin
	// is retried, not hammered.
	failed map[string]failure
}

type registered struct {
	plugin   Plugin
	socketID string
}

type failure struct {
	socketID string
	// at is when it failed; it is tried again delay later.
	at    time.Time
	delay time.Duration
}

func (f failure) due() time.Time { return f.at.Add(f.delay) }

// firstRetry and retryAfter bound the wait of a socket that failed to
// register: it doubles from the first to the second.
const (
	firstRetry = time.Second
	retryAfter = 10 * time.Second
)

// newFSWatcher is fsnotify.NewWatcher; a test makes it fail as it fails
// on a node out of inotify instances (fs.inotify.max_user_instances).
var newFSWatcher = fsnotify.NewWatcher

// New returns a watcher; Run watches.
func New(o Options) *Watcher {
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	return &Watcher{o: o, registered: map[string]registered{}, failed: map[string]failure{}}
}

// Dir is the registration directory.
func (w *Watcher) Dir() string { return Dir(w.o.RootDir) }

// Run watches the directory until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	if err := os.MkdirAll(w.Dir(), 0o750); err != nil {
		return fmt.Errorf("creating %s: %w", w.Dir(), err)
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	poll := cmp.Or(w.o.Poll, retryAfter)
	fsw, err := newFSWatcher()
	if err != nil {
		klog.ErrorS(err, "Watching the plugin registration directory with inotify failed; reading it every second", "dir", w.Dir())
		fsw, poll = nil, cmp.Or(w.o.Poll, time.Second)
	} else {
		defer fsw.Close()
		events, errs = fsw.Events, fsw.Errors
	}
	tick := w.o.Clock.NewTicker(poll)
	defer tick.Stop()
	for {
		w.scan(ctx, fsw)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
		case <-w.nextRetry():
		case <-events:
			drain(events) // one read covers a burst of changes
		case err := <-errs:
			klog.ErrorS(err, "Watching the plugin registration directory", "dir", w.Dir())
		}
	}
}

// nextRetry fires when the first failed socket is due again; nil (never)
// when none failed.
func (w *Watcher) nextRetry() <-chan time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first time.Time
	for _, f := range w.failed {
		if first.IsZero() || f.due().Before(first) {
			first = f.due()
		}
	}
	if first.IsZero() {
		return nil
	}
	now := w.o.Clock.Now()
	if !now.Before(first) {
		// Already due (the scan took that long, or the clock moved
		// meanwhile): now, not at the next tick of a clock that may not
		// tick again before the poll.
		due := make(chan time.Time, 1)
		due <- now
		return due
	}
	return w.o.Clock.After(first.Sub(now))
}

func drain(events <-chan fsnotify.Event) {
	for {
		select {
		case <-events:
		default:
			return
		}
	}
}

// scan reads the directory and its subdirectories, registers the new
// sockets and forgets the gone ones; each directory read is watched (fsw
// may be nil), so a subdirectory made later is seen too.
func (w *Watcher) scan(ctx context.Context, fsw *fsnotify.Watcher) {
	present := map[string]bool{}
	err := filepath.WalkDir(w.Dir(), func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != w.Dir() && strings.HasPrefix(e.Name(), ".") {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e.IsDir() && fsw != nil {
			if err := fsw.Add(path); err != nil {
				klog.ErrorS(err, "Watching a plugin registration directory; it is read every poll", "dir", path)
			}
		}
		if e.Type()&os.ModeSocket != 0 {
			present[path] = true
			w.registerNew(ctx, path, fileID(e))
		}
		return nil
	})
	if err != nil {
		// Forgetting plugins on a partial scan could drop live ones.
		klog.ErrorS(err, "Reading the plugin registration directory", "dir", w.Dir())
		return
	}
	w.forgetGone(ctx, present)
}

// fileID names a file by its inode and modification time (a socket's
// creation), which differ for a socket made again at the same path even
// when the inode number is reused; "" if it is gone.
func fileID(e fs.DirEntry) string {
	fi, err := e.Info()
	if err != nil {
		return ""
	}
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	return fmt.Sprintf("%d@%d", ino, fi.ModTime().UnixNano())
}

func (w *Watcher) registerNew(ctx context.Context, sock, id string) {
	w.mu.Lock()
	r, ok := w.registered[sock]
	f, failed := w.failed[sock]
	w.mu.Unlock()
	if (ok && r.socketID == id) || (failed && f.socketID == id && w.o.Clock.Now().Before(f.due())) {
		return
	}
	// The same path with a new socket is the plugin started again: its
	// handler replaces the former registration, or drops it if the new
	// one fails.
	p, err := w.register(ctx, sock)
	if err != nil && ok {
		w.deregister(ctx, sock, r.plugin)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		delay := firstRetry
		if failed && f.socketID == id {
			delay = min(2*f.delay, retryAfter)
		}
		klog.ErrorS(err, "Plugin registration failed; retrying", "socket", sock, "retryIn", delay)
		w.failed[sock] = failure{socketID: id, at: w.o.Clock.Now(), delay: delay}
		return
	}
	delete(w.failed, sock)
	w.registered[sock] = registered{plugin: p, socketID: id}
}

// register runs the registration handshake with one socket.
func (w *Watcher) register(ctx context.Context, sock string) (Plugin, error) {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return Plugin{}, err
	}
	defer conn.Close()
	reg := registerapi.NewRegistrationClient(conn)
	cctx, cancel := context.WithTimeout(ctx, w.o.Timeout)
	defer cancel()
	info, err := reg.GetInfo(cctx, &registerapi.InfoRequest{})
	if err != nil {
		return Plugin{}, fmt.Errorf("GetInfo: %w", err)
	}
	p := Plugin{Type: info.Type, Name: info.Name, Endpoint: info.Endpoint, Versions: info.SupportedVersions, Socket: sock}
	h, ok := w.o.Handlers[info.Type]
	switch {
	case !ok:
		err = fmt.Errorf("plugin %q is of type %q; nodelet takes %s plugins", info.Name, info.Type, strings.Join(w.types(), ", "))
	case info.Name == "":
		err = fmt.Errorf("plugin of type %s has no name", info.Type)
	default:
		err = h.Register(cctx, p)
	}
	status := &registerapi.RegistrationStatus{PluginRegistered: err == nil}
	if err != nil {
		status.Error = err.Error()
	}
	if _, nerr := reg.NotifyRegistrationStatus(cctx, status); nerr != nil {
		klog.ErrorS(nerr, "NotifyRegistrationStatus", "socket", sock)
	}
	return p, err
}

func (w *Watcher) types() []string {
	out := make([]string, 0, len(w.o.Handlers))
	for t := range w.o.Handlers {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

func (w *Watcher) deregister(ctx context.Context, sock string, p Plugin) {
	w.mu.Lock()
	delete(w.registered, sock)
	w.mu.Unlock()
	if h, ok := w.o.Handlers[p.Type]; ok {
		h.Deregister(ctx, p)
	}
}

// forgetGone deregisters the plugins whose registration socket is gone.
func (w *Watcher) forgetGone(ctx context.Context, present map[string]bool) {
	w.mu.Lock()
	var gone []string
	for sock := range w.registered {
		if !present[sock] {
			gone = append(gone, sock)
		}
	}
	for sock := range w.failed {
		if !present[sock] {
			delete(w.failed, sock)
		}
	}
	regs := make([]registered, len(gone))
	for i, sock := range gone {
		regs[i] = w.registered[sock]
	}
	w.mu.Unlock()
	for i, sock := range gone {
		klog.InfoS("Plugin deregistered: its registration socket is gone", "type", regs[i].plugin.Type, "name", regs[i].plugin.Name, "socket", sock)
		w.deregister(ctx, sock, regs[i].plugin)
	}
}
