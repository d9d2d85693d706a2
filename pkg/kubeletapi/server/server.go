// Package server is nodelet's HTTP face, at the end of the pipeline where
// the status lands: the read-only port serving the pods nodelet runs with
// their current status (/pods) and its health (/healthz), and the kubelet
// API on the node's port, which the API server calls for kubectl logs,
// exec, attach and port-forward, behind authentication and authorization.
package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// PodSource lists the pods nodelet runs, with their status.
type PodSource interface {
	Pods() []*v1.Pod
}

// HealthChecker reports nodelet's health; nil means healthy.
type HealthChecker func() error

// ReadOnly is the unauthenticated read-only server: the pods, /healthz,
// and the monitoring endpoints (stats and metrics), as upstream's
// read-only port serves them.
type ReadOnly struct {
	pods    PodSource
	healthz HealthChecker
	mux     *http.ServeMux
}

// NewReadOnly returns the read-only server's handler.
func NewReadOnly(pods PodSource, healthz HealthChecker, m Monitoring) *ReadOnly {
	s := &ReadOnly{pods: pods, healthz: healthz, mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /pods", s.handlePods)
	s.mux.HandleFunc("GET /pods/", s.handlePods)
	s.mux.HandleFunc("GET /healthz", s.handleHealthz)
	m.install(s.mux)
	return s
}

func (s *ReadOnly) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *ReadOnly) handlePods(w http.ResponseWriter, r *http.Request) {
	list := v1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
	for _, p := range s.pods.Pods() {
		list.Items = append(list.Items, *p)
	}
	if list.Items == nil {
		list.Items = []v1.Pod{}
	}
	writeJSON(w, &list)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		klog.ErrorS(err, "Writing a JSON response failed")
	}
}

func (s *ReadOnly) handleHealthz(w http.ResponseWriter, r *http.Request) {
	if err := s.healthz(); err != nil {
		http.Error(w, fmt.Sprintf("unhealthy: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, "ok")
}

// Healthz serves only /healthz: upstream's plain-HTTP health endpoint on
// healthzBindAddress:healthzPort, which node health checks and
// supervisors poll.
func Healthz(check HealthChecker) http.Handler {
	s := &ReadOnly{mux: http.NewServeMux(), healthz: check}
	s.mux.HandleFunc("GET /healthz", s.handleHealthz)
	return s.mux
}

// Listener serves a handler on an address opened at Listen, so a busy
// port fails start-up rather than a running node.
type Listener struct {
	ln  net.Listener
	srv *http.Server
}

// Listen opens addr for h, over TLS unless cfg is nil.
func Listen(addr string, h http.Handler, cfg *tls.Config) (*Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", addr, err)
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	return &Listener{ln: ln, srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}, nil
}

// Addr is the address listened on.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Run serves until ctx ends, then gives requests in flight 5 s to finish.
// It returns early only when serving fails.
func (l *Listener) Run(ctx context.Context) error {
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l.srv.Shutdown(sctx) //nolint:errcheck // a server slow to stop is closed anyway
	}()
	err := l.srv.Serve(l.ln)
	if errors.Is(err, http.ErrServerClosed) {
		<-stopped
		return nil
	}
	return err
}
