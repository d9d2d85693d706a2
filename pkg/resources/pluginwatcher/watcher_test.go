package pluginwatcher

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testutil"
)

// plugin answers the registration handshake on a socket.
type plugin struct {
	registerapi.UnimplementedRegistrationServer
	name string
	srv  *grpc.Server
}

func (p *plugin) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.DevicePlugin, Name: p.name, Endpoint: "/x.sock", SupportedVersions: []string{"v1beta1"}}, nil
}

func (p *plugin) NotifyRegistrationStatus(context.Context, *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	return &registerapi.RegistrationStatusResponse{}, nil
}

// serve answers as plugin name on dir/name.sock. It listens on a hidden
// name first and renames it into place, as a careful plugin does: the
// socket then appears already listening.
func serve(t *testing.T, dir, name string) *plugin {
	t.Helper()
	hidden, sock := filepath.Join(dir, "."+name+".sock"), filepath.Join(dir, name+".sock")
	l, err := net.Listen("unix", hidden)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	p := &plugin{name: name, srv: grpc.NewServer()}
	registerapi.RegisterRegistrationServer(p.srv, p)
	go p.srv.Serve(l)
	t.Cleanup(p.srv.Stop)
	if err := os.Rename(hidden, sock); err != nil {
		t.Fatal(err)
	}
	return p
}

// handler records the plugins registered now.
type handler struct {
	mu      sync.Mutex
	plugins map[string]bool
}

func (h *handler) Register(_ context.Context, p Plugin) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.plugins[p.Name] = true
	return nil
}

func (h *handler) Deregister(_ context.Context, p Plugin) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.plugins, p.Name)
}

func (h *handler) has(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.plugins[name]
}

// runWatcher runs a watcher with a device-plugin handler over a new root
// directory until the test ends, its clock standing still; it returns
// once the watcher runs (its poll ticker exists).
func runWatcher(t *testing.T) (*Watcher, *testingclock.FakeClock, *handler) {
	t.Helper()
	root, err := os.MkdirTemp("/tmp", "pw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	clk := testingclock.NewFakeClock(time.Now())
	h := &handler{plugins: map[string]bool{}}
	w := New(Options{RootDir: root, Clock: clk, Handlers: map[string]Handler{registerapi.DevicePlugin: h}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	testutil.WaitFor(t, "the watcher's poll ticker", func() bool { return clk.HasWaiters() })
	return w, clk, h
}

// TestSocketsAreSeenWithoutWaitingForThePoll: a socket made in the
// directory, or in a subdirectory made after the watcher started, is
// registered, and one removed is deregistered, while the clock stands
// still (the poll never fires): inotify woke the watcher.
func TestSocketsAreSeenWithoutWaitingForThePoll(t *testing.T) {
	w, _, h := runWatcher(t)

	p := serve(t, w.Dir(), "a")
	testutil.WaitFor(t, "plugin a registered", func() bool { return h.has("a") })

	sub := filepath.Join(w.Dir(), "vendor")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	// The subdirectory is watched once a read found it; a socket made
	// before that is found by the same read.
	serve(t, sub, "b")
	testutil.WaitFor(t, "plugin b, in a new subdirectory, registered", func() bool { return h.has("b") })

	p.srv.Stop()
	if err := os.Remove(filepath.Join(w.Dir(), "a.sock")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "plugin a deregistered", func() bool { return !h.has("a") })
	if !h.has("b") {
		t.Error("plugin b was deregistered with a")
	}
}

// TestWithoutInotifyTheDirectoryIsReadEverySecond: on a node out of
// inotify instances the watcher reads the directory every second, so a
// plugin is registered within one, not at the 10 s poll.
func TestWithoutInotifyTheDirectoryIsReadEverySecond(t *testing.T) {
	var tried atomic.Int32
	newFSWatcher = func() (*fsnotify.Watcher, error) {
		tried.Add(1)
		return nil, syscall.EMFILE
	}
	t.Cleanup(func() { newFSWatcher = fsnotify.NewWatcher })
	w, clk, h := runWatcher(t)
	if tried.Load() != 1 {
		t.Fatalf("the watcher asked for an inotify watcher %d times, want 1", tried.Load())
	}
	serve(t, w.Dir(), "a")
	// Nothing but the poll can wake the watcher now (no file events, no
	// retry due): a second is enough.
	clk.Step(time.Second)
	testutil.WaitFor(t, "plugin a registered at the 1 s poll", func() bool { return h.has("a") })
}

// TestASocketNotYetListeningIsRetriedSoon: a plugin's socket appears at
// its bind, a moment before it listens; the handshake refused then is
// tried again a second later (not at the 10 s poll), and the waits double
// while it keeps failing.
func TestASocketNotYetListeningIsRetriedSoon(t *testing.T) {
	w, clk, h := runWatcher(t)
	// Bound, not listening: connecting is refused.
	sock := filepath.Join(w.Dir(), "late.sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	delay := func() time.Duration {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.failed[sock].delay
	}
	// Retried at 1, 3 and 7 s: before the 10 s poll, with no file event.
	for _, want := range []time.Duration{firstRetry, 2 * firstRetry, 4 * firstRetry, 8 * firstRetry} {
		testutil.WaitFor(t, fmt.Sprintf("a failure with a retry in %s", want), func() bool { return delay() == want })
		if want < 8*firstRetry {
			clk.Step(want)
		}
	}
	// It listens now, on the same socket (no file event).
	if err := syscall.Listen(fd, 8); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), sock)
	l, err := net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	p := &plugin{name: "late", srv: grpc.NewServer()}
	registerapi.RegisterRegistrationServer(p.srv, p)
	go p.srv.Serve(l)
	defer p.srv.Stop()
	clk.Step(8 * firstRetry)
	testutil.WaitFor(t, "plugin late registered at its retry", func() bool { return h.has("late") })
}

// A retry that fell due before the loop came to wait fires at once: the
// fake clock, like a quiet node, may not move again before the poll.
func TestARetryAlreadyDueFiresAtOnce(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	w := New(Options{RootDir: t.TempDir(), Clock: clk})
	w.failed["a.sock"] = failure{socketID: "1", at: clk.Now(), delay: firstRetry}
	pending := w.nextRetry()
	select {
	case <-pending:
		t.Fatal("a retry fired before it was due")
	default:
	}
	clk.Step(firstRetry) // due now; the loop has not come to wait yet
	select {
	case <-w.nextRetry():
	default:
		t.Fatal("a retry already due did not fire")
	}
	<-pending // and the one armed before fires too
}
