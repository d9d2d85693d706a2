package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"net/url"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/observe/timeline"
	"github.com/nodelet/nodelet/pkg/runtime/streaming"
)

// Runtime is what the kubelet API asks of the container runtime.
type Runtime interface {
	ContainerLogs(ctx context.Context, namespace, pod, container string, opts streaming.LogOptions, w io.Writer) error
	GetExec(ctx context.Context, namespace, pod, uid, container string, cmd []string, stdin, stdout, stderr, tty bool) (*url.URL, error)
	GetAttach(ctx context.Context, namespace, pod, uid, container string, stdin, stdout, stderr, tty bool) (*url.URL, error)
	GetPortForward(ctx context.Context, namespace, pod, uid string, ports []int32) (*url.URL, error)
	RunInContainer(ctx context.Context, namespace, pod, uid, container string, cmd []string) ([]byte, error)
}

// Stats summarizes the node's and its pods' resource usage.
type Stats interface {
	Summary(ctx context.Context, onlyCPUAndMemory bool) (*statsapi.Summary, error)
}

// Timelines are the pods' lifecycle timelines.
type Timelines interface {
	Get(uid types.UID) (timeline.Timeline, bool)
	Lookup(namespace, name string) (timeline.Timeline, bool)
}

// Monitoring are the endpoints monitoring reads, served on the kubelet
// API and, without authentication, on the read-only port, as upstream
// serves them: Stats serves /stats/summary; Metrics serves /metrics, and
// the others its subpaths /metrics/resource (what metrics-server reads),
// /metrics/cadvisor and /metrics/probes. Any may be nil.
type Monitoring struct {
	Stats           Stats
	Metrics         http.Handler
	MetricsResource http.Handler
	MetricsCadvisor http.Handler
	MetricsProbes   http.Handler
}

func (m Monitoring) install(mux *http.ServeMux) {
	for path, h := range map[string]http.Handler{"/metrics": m.Metrics, "/metrics/resource": m.MetricsResource,
		"/metrics/cadvisor": m.MetricsCadvisor, "/metrics/probes": m.MetricsProbes} {
		if h != nil {
			mux.Handle("GET "+path, h)
		}
	}
	if m.Stats != nil {
		mux.HandleFunc("GET /stats/summary", func(w http.ResponseWriter, r *http.Request) { serveSummary(m.Stats, w, r) })
	}
}

// APISources are what the kubelet API serves from.
type APISources struct {
	Pods    PodSource
	Healthz HealthChecker
	Runtime Runtime
	Monitoring
	// Profiling serves Go's profiles under /debug/pprof/ (upstream's
	// enableProfilingHandler).
	Profiling bool
	// Timelines serves /debug/pods/.../timeline; it may be nil.
	Timelines Timelines
	// Configz is the effective KubeletConfiguration (v1beta1: the file,
	// its drop-ins and the flags laid over it, defaulted), served at
	// /configz as upstream serves it: {"kubeletconfig": {...}}. Tools and
	// upstream's node e2e suite read a node's settings there. Nil serves
	// nothing.
	Configz any
}

// API is the kubelet API the API server talks to on the node's port
// (10250): the read-only endpoints, container logs, and exec, attach and
// port-forward sessions, which are proxied to the runtime's streaming
// server. Authentication and authorization wrap it (WithAuth).
type API struct {
	*ReadOnly
	runtime   Runtime
	timelines Timelines
}

// NewAPI returns the kubelet API's handler.
func NewAPI(src APISources) *API {
	s := &API{ReadOnly: NewReadOnly(src.Pods, src.Healthz, src.Monitoring), runtime: src.Runtime, timelines: src.Timelines}
	if src.Timelines != nil {
		s.mux.HandleFunc("GET /debug/pods/{ns}/{pod}/timeline", s.handleTimeline)
		s.mux.HandleFunc("GET /debug/pods/{uid}/timeline", s.handleTimeline)
	}
	if src.Configz != nil {
		s.mux.Handle("GET /configz", configz(src.Configz))
	}
	if src.Profiling {
		s.mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		s.mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		s.mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		s.mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		s.mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	s.mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", s.handleLogs)
	for _, p := range []string{"/exec/{ns}/{pod}/{container}", "/exec/{ns}/{pod}/{uid}/{container}"} {
		s.mux.HandleFunc(p, s.handleExec)
	}
	for _, p := range []string{"/attach/{ns}/{pod}/{container}", "/attach/{ns}/{pod}/{uid}/{container}"} {
		s.mux.HandleFunc(p, s.handleAttach)
	}
	for _, p := range []string{"/portForward/{ns}/{pod}", "/portForward/{ns}/{pod}/{uid}"} {
		s.mux.HandleFunc(p, s.handlePortForward)
	}
	for _, p := range []string{"POST /run/{ns}/{pod}/{container}", "POST /run/{ns}/{pod}/{uid}/{container}"} {
		s.mux.HandleFunc(p, s.handleRun)
	}
	return s
}

// handleTimeline serves a pod's timeline, by namespace and name (the
// newest pod of that name) or by UID: JSON, or with format=text a table
// with a waterfall.
func (s *API) handleTimeline(w http.ResponseWriter, r *http.Request) {
	var (
		t  timeline.Timeline
		ok bool
	)
	if uid := r.PathValue("uid"); uid != "" {
		t, ok = s.timelines.Get(types.UID(uid))
	} else {
		t, ok = s.timelines.Lookup(r.PathValue("ns"), r.PathValue("pod"))
	}
	if !ok {
		http.Error(w, "no timeline for this pod: it is not known to this node, or finished long ago", http.StatusNotFound)
		return
	}
	switch f := r.URL.Query().Get("format"); f {
	case "text":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := timeline.WriteText(w, t); err != nil {
			klog.V(4).InfoS("Writing a timeline failed", "err", err)
		}
	case "", "json":
		writeJSON(w, t)
	default:
		http.Error(w, fmt.Sprintf("format %q: want json or text", f), http.StatusBadRequest)
	}
}

func (s *API) handleLogs(w http.ResponseWriter, r *http.Request) {
	klog.V(4).InfoS("Serving a container log", "url", r.URL.String(), "webSocket", wsstream.IsWebSocketRequest(r))
	q := r.URL.Query()
	opts := streaming.LogOptions{
		Follow: q.Get("follow") == "true", Previous: q.Get("previous") == "true", Timestamps: q.Get("timestamps") == "true",
		TailLines: -1,
	}
	var err error
	intParam := func(name string, dst *int64) {
		if v := q.Get(name); v != "" && err == nil {
			if *dst, err = strconv.ParseInt(v, 10, 64); err != nil || *dst < 0 {
				err = fmt.Errorf("%s=%q must be a non-negative integer", name, v)
			}
		}
	}
	var since int64
	intParam("tailLines", &opts.TailLines)
	intParam("limitBytes", &opts.LimitBytes)
	intParam("sinceSeconds", &since)
	if v := q.Get("sinceTime"); v != "" && err == nil {
		t, perr := time.Parse(time.RFC3339, v)
		if perr != nil {
			err = fmt.Errorf("sinceTime=%q must be an RFC 3339 time such as 2006-01-02T15:04:05Z", v)
		}
		opts.SinceTime = &t
	}
	if since > 0 {
		t := time.Now().Add(-time.Duration(since) * time.Second)
		opts.SinceTime = &t
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if wsstream.IsWebSocketRequest(r) {
		s.logsOverWebSocket(w, r, opts)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	f, ok := w.(http.Flusher)
	if ok && opts.Follow {
		// A following stream of a quiet container must not hold its
		// headers (and an API server's WebSocket upgrade) until the first
		// line. Only then: committing 200 early would hide a missing
		// container's 404 from a plain read.
		w.WriteHeader(http.StatusOK)
		f.Flush()
	}
	out := io.Writer(w)
	if ok {
		// Each write goes out at once, as the kubelet sends logs. Over
		// HTTP/1.1, a log sent whole with a Content-Length reaches a Go
		// reader as its last bytes and io.EOF in one read, which the API
		// server's WebSocket copy of pods/log drops.
		out = flushWriter{w: w, f: f}
	}
	err = s.runtime.ContainerLogs(r.Context(), r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container"), opts, out)
	writeError(w, err)
}

// flushWriter flushes every write.
type flushWriter struct {
	w io.Writer
	f http.Flusher
}

func (fw flushWriter) Write(p []byte) (int, error) {
	n, err := fw.w.Write(p)
	fw.f.Flush()
	return n, err
}

func (fw flushWriter) Flush() { fw.f.Flush() }

// logsOverWebSocket serves a container's log to a WebSocket client, in
// binary frames (binary.k8s.io, or no subprotocol) or base64 text frames
// (base64.binary.k8s.io), as the API server serves pods/log.
func (s *API) logsOverWebSocket(w http.ResponseWriter, r *http.Request, opts streaming.LogOptions) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	pr, pw := io.Pipe()
	defer pr.Close() // a client gone stops the log reader's writes
	go func() {
		err := s.runtime.ContainerLogs(ctx, r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container"), opts, pw)
		if err != nil {
			klog.V(2).InfoS("Container log over WebSocket ended", "pod", klog.KRef(r.PathValue("ns"), r.PathValue("pod")), "container", r.PathValue("container"), "err", err)
		}
		pw.CloseWithError(err)
	}()
	if err := wsstream.NewReader(pr, true, wsstream.NewDefaultReaderProtocols()).Copy(w, r); err != nil {
		klog.V(4).InfoS("WebSocket log stream closed", "err", err)
	}
}

// handleSummary serves the stats summary; only_cpu_and_memory=true is
// metrics-server's cheaper request.
func serveSummary(stats Stats, w http.ResponseWriter, r *http.Request) {
	sum, err := stats.Summary(r.Context(), r.URL.Query().Get("only_cpu_and_memory") == "true")
	if err != nil {
		klog.ErrorS(err, "Summarizing node and pod stats failed")
		writeError(w, err)
		return
	}
	writeJSON(w, sum)
}

// streamFlags reads the stream options the API server passes.
func streamFlags(q url.Values) (stdin, stdout, stderr, tty bool) {
	on := func(k string) bool { return q.Get(k) == "1" || q.Get(k) == "true" }
	return on("input"), on("output"), on("error"), on("tty")
}

func (s *API) handleExec(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	stdin, stdout, stderr, tty := streamFlags(q)
	target, err := s.runtime.GetExec(r.Context(), r.PathValue("ns"), r.PathValue("pod"), r.PathValue("uid"), r.PathValue("container"),
		q["command"], stdin, stdout, stderr, tty)
	if err != nil {
		writeError(w, err)
		return
	}
	proxyStream(w, r, target)
}

func (s *API) handleAttach(w http.ResponseWriter, r *http.Request) {
	stdin, stdout, stderr, tty := streamFlags(r.URL.Query())
	target, err := s.runtime.GetAttach(r.Context(), r.PathValue("ns"), r.PathValue("pod"), r.PathValue("uid"), r.PathValue("container"),
		stdin, stdout, stderr, tty)
	if err != nil {
		writeError(w, err)
		return
	}
	proxyStream(w, r, target)
}

func (s *API) handlePortForward(w http.ResponseWriter, r *http.Request) {
	var ports []int32
	for _, p := range r.URL.Query()["port"] {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			http.Error(w, fmt.Sprintf("invalid port %q", p), http.StatusBadRequest)
			return
		}
		ports = append(ports, int32(n))
	}
	target, err := s.runtime.GetPortForward(r.Context(), r.PathValue("ns"), r.PathValue("pod"), r.PathValue("uid"), ports)
	if err != nil {
		writeError(w, err)
		return
	}
	proxyStream(w, r, target)
}

func (s *API) handleRun(w http.ResponseWriter, r *http.Request) {
	cmd := r.URL.Query()["cmd"]
	if len(cmd) == 0 {
		http.Error(w, "missing cmd", http.StatusBadRequest)
		return
	}
	out, err := s.runtime.RunInContainer(r.Context(), r.PathValue("ns"), r.PathValue("pod"), r.PathValue("uid"), r.PathValue("container"), cmd)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Write(out)
}

// writeError answers a failed request: 404 for what the runtime does not
// have, 500 otherwise. Nothing is written when the request succeeded.
func writeError(w http.ResponseWriter, err error) {
	switch {
	case err == nil:
	case errors.Is(err, streaming.ErrNotFound):
		http.Error(w, err.Error(), http.StatusNotFound)
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// TLSOptions are where the kubelet API's TLS material comes from, read
// at every handshake so a renewed certificate or CA takes effect at once.
type TLSOptions struct {
	// Certificate is the serving certificate; nil fails the handshake
	// (a serving certificate not yet issued).
	Certificate func() *tls.Certificate
	// ClientCAs verify client certificates; nil accepts none.
	ClientCAs    func() *x509.CertPool
	MinVersion   uint16
	CipherSuites []uint16
}

// errNoServingCertificate fails a handshake while the serving certificate
// has not been issued.
var errNoServingCertificate = errors.New("no serving certificate available for the kubelet")

// TLSConfig is the kubelet API's TLS configuration: client certificates
// are asked for and, when one is given, verified against the client CAs
// of the moment.
func TLSConfig(o TLSOptions) *tls.Config {
	minVersion := o.MinVersion
	if minVersion == 0 {
		minVersion = tls.VersionTLS12
	}
	// HTTP/2 as the kubelet serves it: the API server reads pods/log
	// over it, and its WebSocket copy of a log relies on a body's last
	// bytes coming before its end, which an HTTP/1.1 body with a length
	// does not give. Upgrades (exec, attach, port-forward, WebSockets)
	// negotiate http/1.1, as their clients ask for it.
	nextProtos := []string{"h2", "http/1.1"}
	base := &tls.Config{MinVersion: minVersion, CipherSuites: o.CipherSuites, NextProtos: nextProtos}
	base.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		if cert := o.Certificate(); cert != nil {
			return cert, nil
		}
		return nil, errNoServingCertificate
	}
	return &tls.Config{
		MinVersion: minVersion,
		NextProtos: nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cfg := base.Clone()
			if o.ClientCAs != nil {
				if pool := o.ClientCAs(); pool != nil {
					cfg.ClientCAs, cfg.ClientAuth = pool, tls.VerifyClientCertIfGiven
				}
			}
			return cfg, nil
		},
	}
}

// configz serves the node's configuration under the name upstream gives
// it ("kubeletconfig"): read-only, fixed at start.
func configz(cfg any) http.Handler {
	body := map[string]any{"kubeletconfig": cfg}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeJSON(w, body) })
}
