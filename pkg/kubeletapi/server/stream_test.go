package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// closedRuntime is a runtime's streaming connection after the command
// exited: its last output is still to be read, and it takes nothing more.
type closedRuntime struct {
	mu      sync.Mutex
	output  []byte
	writes  chan []byte
	closed  bool
	closeCh chan struct{}
}

func newClosedRuntime(output string) *closedRuntime {
	return &closedRuntime{output: []byte(output), writes: make(chan []byte, 16), closeCh: make(chan struct{})}
}

func (r *closedRuntime) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.output) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.output)
	r.output = r.output[n:]
	return n, nil
}

func (r *closedRuntime) Write(p []byte) (int, error) {
	r.writes <- append([]byte(nil), p...)
	return 0, syscall.EPIPE
}

func (r *closedRuntime) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		close(r.closeCh)
	}
	return nil
}

func joined(client net.Conn, runtimeConn io.ReadWriteCloser, linger time.Duration) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		join(client, client, runtimeConn, linger)
	}()
	return done
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not happen within 10s", what)
	}
}

// The runtime closed its side as the command exited; a frame the client
// sends after that cannot reach it. What the runtime wrote before (the
// command's output and exit status) still reaches the client: the
// session ends once it has, not at the failed write.
func TestJoinPassesOnWhatTheRuntimeSentBeforeItClosed(t *testing.T) {
	clientEnd, proxyEnd := net.Pipe()
	rt := newClosedRuntime("session-44\nstatus: Success")
	done := joined(proxyEnd, rt, time.Minute)

	// net.Pipe is unbuffered: the output waits in the proxy until the
	// client reads, and the frame is taken as it is written.
	if _, err := clientEnd.Write([]byte("window update")); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-rt.writes:
		if string(got) != "window update" {
			t.Fatalf("the runtime was sent %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client's frame never reached the runtime's side")
	}
	// A second frame is dropped, not written to a runtime that failed.
	if _, err := clientEnd.Write([]byte("ping")); err != nil {
		t.Fatalf("the client's second frame: %v", err)
	}
	got, err := io.ReadAll(io.LimitReader(clientEnd, int64(len("session-44\nstatus: Success"))))
	if err != nil || string(got) != "session-44\nstatus: Success" {
		t.Fatalf("the client read %q (%v), want the runtime's whole output", got, err)
	}
	select {
	case w := <-rt.writes:
		t.Fatalf("written to the runtime after a write failed: %q", w)
	default:
	}
	clientEnd.Close()
	waitFor(t, done, "the session's end once the client closed")
	waitFor(t, rt.closeCh, "the runtime's connection closed")
}

// A client that leaves ends the session at once: the runtime's side is
// closed, though it would stream on (a follow, a shell).
func TestJoinEndsWhenTheClientLeaves(t *testing.T) {
	clientEnd, proxyEnd := net.Pipe()
	runtimeEnd, runtimeProxyEnd := net.Pipe()
	done := joined(proxyEnd, runtimeProxyEnd, time.Minute)
	go io.Copy(io.Discard, runtimeEnd) //nolint:errcheck // ends with the pipe
	if _, err := clientEnd.Write([]byte("stdin")); err != nil {
		t.Fatal(err)
	}
	clientEnd.Close()
	waitFor(t, done, "the session's end")
	if _, err := runtimeEnd.Write([]byte("more output")); err == nil {
		t.Fatal("the runtime's connection is still open after the client left")
	}
}

// Once the runtime's side ended and its output was passed on, a client
// that keeps its connection open is held only for the linger.
func TestJoinLingersOnlySoLongAfterTheRuntimeEnded(t *testing.T) {
	clientEnd, proxyEnd := net.Pipe()
	rt := newClosedRuntime("bye")
	done := joined(proxyEnd, rt, 50*time.Millisecond)
	got := make([]byte, 3)
	if _, err := io.ReadFull(clientEnd, got); err != nil || string(got) != "bye" {
		t.Fatalf("read %q (%v)", got, err)
	}
	waitFor(t, done, "the session's end after the linger")
	if _, err := clientEnd.Write([]byte("late")); err == nil {
		t.Fatal("the client's connection is still open after the linger")
	}
}

// Through the kubelet API's handler: the upgrade reaches the runtime
// without the client's credentials and with its own headers, the 101
// comes back, the two connections are joined both ways, and the
// runtime's last words before it closes reach the client.
func TestProxyStreamJoinsAnUpgrade(t *testing.T) {
	seen := make(chan http.Header, 1)
	runtimeSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
		brw.Flush()
		line, err := brw.ReadString('\n')
		if err != nil {
			t.Error(err)
			return
		}
		fmt.Fprintf(brw, "echo %s", line)
		brw.WriteString("exit 0\n")
		brw.Flush()
	}))
	defer runtimeSrv.Close()
	target, _ := url.Parse(runtimeSrv.URL + "/exec/abc?command=sh")
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { proxyStream(w, r, target) }))
	defer proxy.Close()

	conn, err := net.Dial("tcp", strings.TrimPrefix(proxy.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "POST /exec/ns/pod/main?command=sh HTTP/1.1\r\nHost: node\r\nAuthorization: Bearer secret\r\nConnection: Upgrade, Keep-Alive\r\nKeep-Alive: timeout=5\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\nhello\n")
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols || res.Header.Get("Upgrade") != "SPDY/3.1" {
		t.Fatalf("answer %s, Upgrade %q", res.Status, res.Header.Get("Upgrade"))
	}
	h := <-seen
	if h.Get("Authorization") != "" || h.Get("Keep-Alive") != "" || h.Get("Upgrade") != "SPDY/3.1" ||
		h.Get("Connection") != "Upgrade" || h.Get("X-Stream-Protocol-Version") != "v4.channel.k8s.io" {
		t.Fatalf("the runtime got headers %v", h)
	}
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "echo hello\nexit 0\n" {
		t.Fatalf("the client read %q (%v)", rest, err)
	}
}

// A runtime that refuses the stream answers the client itself.
func TestProxyStreamPassesOnARefusal(t *testing.T) {
	runtimeSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Reason", "gone")
		http.Error(w, "no such exec session", http.StatusNotFound)
	}))
	defer runtimeSrv.Close()
	target, _ := url.Parse(runtimeSrv.URL + "/exec/expired")
	rec := httptest.NewRecorder()
	proxyStream(rec, httptest.NewRequest(http.MethodPost, "/exec/ns/pod/main", nil), target)
	if rec.Code != http.StatusNotFound || rec.Header().Get("X-Reason") != "gone" || !strings.Contains(rec.Body.String(), "no such exec session") {
		t.Fatalf("got %d %v %q", rec.Code, rec.Header(), rec.Body.String())
	}
}

// A runtime that cannot be reached is a 502.
func TestProxyStreamUnreachableRuntime(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	target := &url.URL{Scheme: "http", Host: addr, Path: "/exec/x"}
	rec := httptest.NewRecorder()
	proxyStream(rec, httptest.NewRequest(http.MethodPost, "/exec/ns/pod/main", nil), target)
	if rec.Code != http.StatusBadGateway {
		t.Fatalf("got %d %q", rec.Code, rec.Body.String())
	}
}
