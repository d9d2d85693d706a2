package server

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// proxyStream hands a streaming request (an upgrade to SPDY or WebSocket)
// to the runtime's streaming server, which speaks the protocols itself,
// and joins the two connections once the runtime switches protocols.
//
// It is not httputil.ReverseProxy's upgrade: that ends the session when
// either direction fails, and the runtime closes its connection as soon
// as a command exits, having written the command's last output and its
// exit status. A frame the client sends meanwhile (a window update, a
// ping) then fails to reach the runtime, and the session was torn down
// while that output was still on its way to the client: under load, an
// exec whose output and status were lost, which SPDY clients report as
// a success with no output.
func proxyStream(w http.ResponseWriter, r *http.Request, target *url.URL) {
	out := r.Clone(r.Context())
	out.URL = &url.URL{Scheme: target.Scheme, Host: target.Host, Path: target.Path, RawQuery: target.RawQuery}
	out.Host, out.RequestURI = target.Host, ""
	out.Header = outHeader(r.Header)
	res, err := streamTransport.RoundTrip(out)
	if err != nil {
		klog.ErrorS(err, "Proxying a stream to the runtime failed", "path", r.URL.Path)
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		defer res.Body.Close()
		copyHeader(w.Header(), res.Header)
		w.WriteHeader(res.StatusCode)
		io.Copy(w, res.Body) //nolint:errcheck // the client left; nothing to tell it
		return
	}
	runtimeConn, ok := res.Body.(io.ReadWriteCloser)
	if !ok {
		klog.ErrorS(nil, "The runtime switched protocols on a connection that cannot be written", "path", r.URL.Path)
		http.Error(w, "runtime switched protocols on a read-only body", http.StatusBadGateway)
		return
	}
	defer runtimeConn.Close()
	client, buffered, err := http.NewResponseController(w).Hijack()
	if err != nil {
		klog.ErrorS(err, "Taking over the client's connection for a stream failed", "path", r.URL.Path)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer client.Close()
	res.Body = nil // Write sends the 101 and its headers only
	if err := res.Write(buffered); err != nil {
		klog.ErrorS(err, "Answering a stream's upgrade failed", "path", r.URL.Path)
		return
	}
	if err := buffered.Flush(); err != nil {
		klog.ErrorS(err, "Answering a stream's upgrade failed", "path", r.URL.Path)
		return
	}
	// The reader holds what the client sent right after its request.
	join(client, buffered.Reader, runtimeConn, streamLinger)
	klog.V(4).InfoS("Stream ended", "path", r.URL.Path)
}

// streamTransport reaches the runtime's streaming server (plain HTTP on
// the loopback, or HTTPS when the runtime serves it so).
var streamTransport http.RoundTripper = http.DefaultTransport

// streamLinger bounds how long a client may keep its connection open once
// the runtime's side has ended and everything it sent was passed on.
const streamLinger = 10 * time.Second

// join copies between a client's connection and the runtime's until the
// runtime's side has ended and the client has closed its own (or linger
// has passed since), or until the client is gone. The runtime's side
// ending is the session's end: what the runtime wrote before it closed
// still reaches the client, even once it no longer takes what the client
// sends.
func join(client net.Conn, fromClient io.Reader, runtimeConn io.ReadWriteCloser, linger time.Duration) {
	var closeOnce sync.Once
	closeAll := func() {
		closeOnce.Do(func() {
			client.Close()
			runtimeConn.Close()
		})
	}
	defer closeAll()
	runtimeDone := make(chan struct{})
	go func() {
		defer close(runtimeDone)
		if _, err := io.Copy(client, runtimeConn); err != nil && !closedConn(err) {
			klog.V(4).InfoS("Copying a stream from the runtime ended", "err", err)
		}
		closeWrite(client)
	}()
	clientDone := make(chan struct{})
	go func() {
		defer close(clientDone)
		// A runtime that closed takes nothing more; the client's frames
		// are then read and dropped, so that its end is still seen.
		w := &dropAfterError{w: runtimeConn}
		if _, err := io.Copy(w, fromClient); err != nil && !closedConn(err) {
			klog.V(4).InfoS("Copying a stream from the client ended", "err", err)
		}
	}()
	select {
	case <-clientDone:
		// The client is gone: no one is left to read the runtime's side.
		closeAll()
		<-runtimeDone
	case <-runtimeDone:
		// Everything the runtime sent was passed on and the client told
		// so; it closes its side in turn.
		client.SetReadDeadline(time.Now().Add(linger)) //nolint:errcheck // a connection that cannot is closed below
		<-clientDone
	}
}

// dropAfterError writes to w until a write fails, then drops the rest.
type dropAfterError struct {
	w      io.Writer
	failed bool
}

func (d *dropAfterError) Write(p []byte) (int, error) {
	if !d.failed {
		if _, err := d.w.Write(p); err != nil {
			d.failed = true
			if !closedConn(err) {
				klog.V(4).InfoS("The runtime's side of a stream no longer takes what the client sends", "err", err)
			}
		}
	}
	return len(p), nil
}

// closeWrite tells the client that nothing more comes (TLS close_notify,
// or a TCP half-close), where its connection can say so.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite() //nolint:errcheck // the client may be gone already
	}
}

// closedConn tells an error of a connection this side closed (io.Copy
// never returns io.EOF).
func closedConn(err error) bool { return errors.Is(err, net.ErrClosed) }

// hopHeaders are the headers of one connection, which a proxy does not
// pass on (RFC 9110 section 7.6.1), but for an upgrade's own.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// outHeader is the request's header as the runtime gets it: without the
// client's credentials and its connection's headers, with its upgrade.
func outHeader(in http.Header) http.Header {
	out := in.Clone()
	for _, f := range in.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			out.Del(strings.TrimSpace(name))
		}
	}
	for _, h := range hopHeaders {
		out.Del(h)
	}
	out.Del("Authorization")
	if up := in.Get("Upgrade"); up != "" {
		out.Set("Connection", "Upgrade")
		out.Set("Upgrade", up)
	}
	return out
}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
}
