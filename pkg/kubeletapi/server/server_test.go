package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/websocket"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/observe/timeline"
	"github.com/nodelet/nodelet/pkg/runtime/streaming"
)

type pods []*v1.Pod

func (p pods) Pods() []*v1.Pod { return p }

func TestPods(t *testing.T) {
	p := &v1.Pod{}
	p.Name, p.Namespace, p.UID = "web-node1", "default", "uid"
	p.Status.Phase, p.Status.PodIP = v1.PodRunning, "10.0.0.2"
	srv := httptest.NewServer(NewReadOnly(pods{p}, func() error { return nil }, Monitoring{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/pods")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list v1.PodList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	if list.Kind != "PodList" || list.APIVersion != "v1" || len(list.Items) != 1 ||
		list.Items[0].Name != "web-node1" || list.Items[0].Status.PodIP != "10.0.0.2" {
		t.Fatalf("list %+v", list)
	}
	empty := httptest.NewServer(NewReadOnly(pods{}, func() error { return nil }, Monitoring{}))
	defer empty.Close()
	resp2, _ := http.Get(empty.URL + "/pods")
	b, _ := io.ReadAll(resp2.Body)
	if !json.Valid(b) || !contains(string(b), `"items":[]`) {
		t.Fatalf("empty list %s", b)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// httpGet returns a GET's status code and body.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestHealthz(t *testing.T) {
	var health error
	srv := httptest.NewServer(NewReadOnly(pods{}, func() error { return health }, Monitoring{}))
	defer srv.Close()
	get := func() (int, string) { return httpGet(t, srv.URL+"/healthz") }
	if code, body := get(); code != 200 || body != "ok" {
		t.Fatalf("healthy: %d %q", code, body)
	}
	health = errors.New("pleg was last seen active 4m0s ago")
	if code, body := get(); code != 500 || !contains(body, "pleg") {
		t.Fatalf("unhealthy: %d %q", code, body)
	}
	resp, err := http.Post(srv.URL+"/pods", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST /pods: %d", resp.StatusCode)
	}
}

// TestHealthzServesOnlyHealthz: the plain-HTTP health port answers
// /healthz from the checker, and nothing else (no pods leak there).
func TestHealthzServesOnlyHealthz(t *testing.T) {
	health := errors.New("sync loop last completed an iteration 31s ago")
	srv := httptest.NewServer(Healthz(func() error { return health }))
	defer srv.Close()
	for path, want := range map[string]int{"/healthz": http.StatusInternalServerError, "/pods": http.StatusNotFound} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	health = nil
	resp, err := http.Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("healthy: %d", resp.StatusCode)
	}
}

func TestListenFailsOnABusyPort(t *testing.T) {
	l, err := Listen("127.0.0.1:0", http.NotFoundHandler(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(l.Addr().String(), http.NotFoundHandler(), nil); err == nil {
		t.Fatal("second listener on the same port succeeded")
	}
}

// TestListenerServesUntilCancelled: Run serves, and returns nil once ctx
// ends and the server has shut down.
func TestListenerServesUntilCancelled(t *testing.T) {
	l, err := Listen("127.0.0.1:0", NewReadOnly(pods{}, func() error { return nil }, Monitoring{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	resp, err := http.Get("http://" + l.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %d", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	if _, err := http.Get("http://" + l.Addr().String() + "/healthz"); err == nil {
		t.Fatal("still serving after Run returned")
	}
}

type stubStats struct{ onlyCPUAndMemory *bool }

func (s stubStats) Summary(_ context.Context, only bool) (*statsapi.Summary, error) {
	*s.onlyCPUAndMemory = only
	if only {
		return nil, errors.New("runtime unavailable")
	}
	return &statsapi.Summary{Node: statsapi.NodeStats{NodeName: "n1"}}, nil
}

func TestStatsSummary(t *testing.T) {
	var only bool
	srv := httptest.NewServer(NewAPI(APISources{Pods: pods{}, Healthz: func() error { return nil }, Monitoring: Monitoring{Stats: stubStats{&only}}}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/stats/summary")
	if err != nil {
		t.Fatal(err)
	}
	var s statsapi.Summary
	err = json.NewDecoder(resp.Body).Decode(&s)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || s.Node.NodeName != "n1" || only {
		t.Fatalf("status %d, summary %+v, err %v, only %v", resp.StatusCode, s, err, only)
	}
	resp, err = http.Get(srv.URL + "/stats/summary?only_cpu_and_memory=true")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || !only || !strings.Contains(string(body), "runtime unavailable") {
		t.Fatalf("status %d %q, only %v", resp.StatusCode, body, only)
	}
}

// /configz serves the node's configuration as upstream does, wrapped in
// "kubeletconfig" (upstream's node e2e suite decodes exactly that), and
// not at all when there is none to serve.
func TestConfigz(t *testing.T) {
	cfg := &kubeletv1beta1.KubeletConfiguration{StaticPodPath: "/etc/kubernetes/manifests", KubeletCgroups: "/kubelet", ReadOnlyPort: 10255}
	srv := httptest.NewServer(NewAPI(APISources{Pods: pods{}, Healthz: func() error { return nil }, Configz: cfg}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/configz")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Config kubeletv1beta1.KubeletConfiguration `json:"kubeletconfig"`
	}
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || got.Config.StaticPodPath != cfg.StaticPodPath ||
		got.Config.KubeletCgroups != "/kubelet" || got.Config.ReadOnlyPort != 10255 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d (%s), config %+v, err %v", resp.StatusCode, resp.Header.Get("Content-Type"), got.Config, err)
	}

	none := httptest.NewServer(NewAPI(APISources{Pods: pods{}, Healthz: func() error { return nil }}))
	defer none.Close()
	resp, err = http.Get(none.URL + "/configz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/configz without a configuration: status %d, want 404", resp.StatusCode)
	}
}

// The read-only port serves what upstream's does without authentication:
// the pods, /healthz, /stats/summary and the metrics (the node e2e
// suite's summary spec reads /stats/summary there); the rest of the
// kubelet API (logs, exec, configz) is not on it.
func TestReadOnlyServesMonitoring(t *testing.T) {
	var only bool
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "# metrics "+r.URL.Path) })
	srv := httptest.NewServer(NewReadOnly(pods{}, func() error { return nil }, Monitoring{Stats: stubStats{&only}, Metrics: metrics, MetricsResource: metrics}))
	defer srv.Close()
	for path, want := range map[string]int{"/pods": 200, "/healthz": 200, "/stats/summary": 200, "/metrics": 200, "/metrics/resource": 200,
		"/metrics/probes": 404, "/configz": 404, "/containerLogs/ns/p/c": 404} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: status %d, want %d (%s)", path, resp.StatusCode, want, body)
		}
		if path == "/stats/summary" && !strings.Contains(string(body), `"nodeName":"n1"`) {
			t.Errorf("summary %s", body)
		}
	}
}

// logRuntime serves a fixed log.
type logRuntime struct {
	Runtime
	log string
}

func (r logRuntime) ContainerLogs(ctx context.Context, ns, pod, c string, opts streaming.LogOptions, w io.Writer) error {
	_, err := io.WriteString(w, fmt.Sprintf("%s/%s/%s: %s", ns, pod, c, r.log))
	return err
}

// containerLogs also serves WebSocket clients, in binary or base64 frames
// as they ask, as the API server serves pods/log.
func TestContainerLogsOverWebSocket(t *testing.T) {
	srv := httptest.NewServer(NewAPI(APISources{Pods: pods{}, Healthz: func() error { return nil }, Runtime: logRuntime{log: "hello\n"}}))
	defer srv.Close()
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/containerLogs/ns/p/c"
	for _, tc := range []struct{ protocol, want string }{
		{"base64.binary.k8s.io", base64.StdEncoding.EncodeToString([]byte("ns/p/c: hello\n"))},
		{"binary.k8s.io", "ns/p/c: hello\n"},
	} {
		cfg, err := websocket.NewConfig(url, srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Protocol = []string{tc.protocol}
		conn, err := websocket.DialConfig(cfg)
		if err != nil {
			t.Fatalf("%s: %v", tc.protocol, err)
		}
		var got []byte
		for {
			var frame []byte
			if err := websocket.Message.Receive(conn, &frame); err != nil {
				break // the server closes the stream at the log's end
			}
			got = append(got, frame...)
		}
		conn.Close()
		if string(got) != tc.want {
			t.Errorf("%s: got %q, want %q", tc.protocol, got, tc.want)
		}
	}
	// A plain GET still gets the log as text.
	resp, err := http.Get(srv.URL + "/containerLogs/ns/p/c")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ns/p/c: hello\n" {
		t.Errorf("plain GET: %q", body)
	}
}

// TestLogsReachTheAPIServersWebSocket: the API server serves pods/log to
// a WebSocket client by reading nodelet's plain log response and copying
// it into frames (wsstream, as its StreamObject does). A log sent whole
// over HTTP/1.1 with a Content-Length reached that copy as its bytes and
// io.EOF in one read, and the copy dropped them: the client got nothing.
// The kubelet API speaks HTTP/2, as the kubelet does.
func TestLogsReachTheAPIServersWebSocket(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cert := testutil.NewCert(t, "node", nil).TLS
	h := NewAPI(APISources{Pods: pods{}, Healthz: func() error { return nil }, Runtime: logRuntime{log: "container is alive\n"}})
	l, err := Listen("127.0.0.1:0", h, TLSConfig(TLSOptions{Certificate: func() *tls.Certificate { return cert }}))
	testutil.Must(t, err)
	go l.Run(ctx) //nolint:errcheck // ends with the test
	node := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}}

	var proto atomic.Value
	apiserver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := node.Get("https://" + l.Addr().String() + "/containerLogs/ns/p/c")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		proto.Store(resp.Proto)
		if err := wsstream.NewReader(resp.Body, true, wsstream.NewDefaultReaderProtocols()).Copy(w, r); err != nil {
			t.Errorf("copy: %v", err)
		}
	}))
	defer apiserver.Close()

	cfg, err := websocket.NewConfig("ws"+strings.TrimPrefix(apiserver.URL, "http")+"/log", apiserver.URL)
	testutil.Must(t, err)
	cfg.Protocol = []string{"binary.k8s.io"}
	conn, err := websocket.DialConfig(cfg)
	testutil.Must(t, err)
	defer conn.Close()
	var got []byte
	for {
		var frame []byte
		if err := websocket.Message.Receive(conn, &frame); err != nil {
			break // the stream ends with the log
		}
		got = append(got, frame...)
	}
	if string(got) != "ns/p/c: container is alive\n" {
		t.Fatalf("the WebSocket client got %q (node answered over %v)", got, proto.Load())
	}
	if p := proto.Load(); p != "HTTP/2.0" {
		t.Errorf("the node answered over %v, want HTTP/2.0", p)
	}
}

// TestTLSConfigReadsItsSourcesAtEachHandshake: a certificate or client
// CA changed after the server started is used by the next handshake, and
// no certificate fails the handshake.
func TestTLSConfigReadsItsSourcesAtEachHandshake(t *testing.T) {
	var cert atomic.Pointer[tls.Certificate]
	var cas atomic.Pointer[x509.CertPool]
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.VerifiedChains) > 0 {
			fmt.Fprint(w, r.TLS.VerifiedChains[0][0].Subject.CommonName)
		}
	}))
	srv.TLS = TLSConfig(TLSOptions{Certificate: cert.Load, ClientCAs: cas.Load})
	srv.StartTLS()
	defer srv.Close()
	get := func(client *tls.Certificate) (string, *x509.Certificate, error) {
		cfg := &tls.Config{InsecureSkipVerify: true}
		if client != nil {
			cfg.Certificates = []tls.Certificate{*client}
		}
		tr := &http.Transport{TLSClientConfig: cfg}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
		if err != nil {
			return "", nil, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body), resp.TLS.PeerCertificates[0], nil
	}
	if _, _, err := get(nil); err == nil {
		t.Fatal("a handshake without a serving certificate succeeded")
	}
	first, second := testutil.NewCert(t, "first", nil).TLS, testutil.NewCert(t, "second", nil).TLS
	cert.Store(first)
	if _, peer, err := get(nil); err != nil || peer.Subject.CommonName != "first" {
		t.Fatalf("first certificate: %v %v", peer, err)
	}
	cert.Store(second)
	if _, peer, err := get(nil); err != nil || peer.Subject.CommonName != "second" {
		t.Fatalf("after the swap: %v %v", peer, err)
	}
	caCert := testutil.NewCert(t, "ca", nil)
	ca, client := caCert.TLS, testutil.NewCert(t, "system:node:x", caCert).TLS
	if user, _, err := get(client); err != nil || user != "" {
		t.Fatalf("without client CAs a client certificate must not verify: %q %v", user, err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Leaf)
	cas.Store(pool)
	if user, _, err := get(client); err != nil || user != "system:node:x" {
		t.Fatalf("with the CA added: %q %v", user, err)
	}
}

// FuzzContainerLogsQuery sends arbitrary query strings to containerLogs:
// a bad parameter is a 400 naming it, a good one reaches the runtime
// with the options it says; nothing panics.
func FuzzContainerLogsQuery(f *testing.F) {
	for _, q := range []string{"", "follow=true&tailLines=10", "tailLines=-1", "limitBytes=99999999999999999999",
		"sinceSeconds=5&timestamps=true", "sinceTime=2026-11-23T10:00:00Z", "sinceTime=yesterday", "previous=true&%zz", "tailLines=1&tailLines=x"} {
		f.Add(q)
	}
	h := NewAPI(APISources{Pods: pods{}, Healthz: func() error { return nil }, Runtime: logRuntime{log: "hello\n"}})
	f.Fuzz(func(t *testing.T, query string) {
		r := httptest.NewRequest(http.MethodGet, "/containerLogs/ns/p/c", nil)
		r.URL.RawQuery = query
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch w.Code {
		case http.StatusOK:
			if w.Body.String() != "ns/p/c: hello\n" {
				t.Fatalf("query %q: body %q", query, w.Body.String())
			}
		case http.StatusBadRequest:
			if !strings.Contains(w.Body.String(), "=") {
				t.Fatalf("query %q: a 400 that names no parameter: %q", query, w.Body.String())
			}
		default:
			t.Fatalf("query %q: HTTP %d %q", query, w.Code, w.Body.String())
		}
	})
}

// A pod's timeline is served by namespace and name or by UID, as JSON or
// as text; an unknown pod is a 404 and an unknown format a 400.
func TestTimeline(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC))
	rec := timeline.New(timeline.Options{Clock: clk})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "u1"}}
	rec.Add(pod, timeline.Step{Kind: instrument.KindSource, Name: "seen", Start: clk.Now(), End: clk.Now(), Outcome: "ok"})
	srv := httptest.NewServer(NewAPI(APISources{Pods: pods{}, Healthz: func() error { return nil }, Timelines: rec}))
	defer srv.Close()
	get := func(path string) (int, string) { return httpGet(t, srv.URL+path) }
	code, body := get("/debug/pods/ns/web/timeline")
	var tl timeline.Timeline
	if code != http.StatusOK || json.Unmarshal([]byte(body), &tl) != nil || tl.UID != "u1" || len(tl.Steps) != 1 || tl.Steps[0].Name != "seen" {
		t.Fatalf("by name: %d %s", code, body)
	}
	if code, body := get("/debug/pods/u1/timeline?format=text"); code != http.StatusOK || !strings.Contains(body, "pod ns/web (uid u1)") {
		t.Fatalf("by uid, text: %d %s", code, body)
	}
	if code, _ := get("/debug/pods/ns/other/timeline"); code != http.StatusNotFound {
		t.Fatalf("unknown pod: %d", code)
	}
	if code, body := get("/debug/pods/u1/timeline?format=yaml"); code != http.StatusBadRequest || !strings.Contains(body, "json or text") {
		t.Fatalf("bad format: %d %s", code, body)
	}
}
