package certificates

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

// testCA signs certificates for the tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key := must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der := must(x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key))(t)
	return &testCA{cert: must(x509.ParseCertificate(der))(t), key: key}
}

// sign issues a certificate for pub valid from notBefore to notAfter.
func (ca *testCA) sign(t *testing.T, tmpl *x509.Certificate, pub any, notBefore, notAfter time.Time) []byte {
	t.Helper()
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore, tmpl.NotAfter = notBefore, notAfter
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}
	der := must(x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key))(t)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// pair is a key and a certificate for cn from ca, as PEM.
func (ca *testCA) pair(t *testing.T, cn string, notBefore, notAfter time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	key := must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))(t)
	certPEM = ca.sign(t, &x509.Certificate{Subject: pkix.Name{CommonName: cn}, DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}},
		&key.PublicKey, notBefore, notAfter)
	return certPEM, must(keyutil.MarshalPrivateKeyToPEM(key))(t)
}

func (ca *testCA) tlsCert(t *testing.T, cn string) *tls.Certificate {
	t.Helper()
	c, k := ca.pair(t, cn, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	cert := must(tls.X509KeyPair(c, k))(t)
	cert.Leaf = must(x509.ParseCertificate(cert.Certificate[0]))(t)
	return &cert
}

func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// writeKubeconfigFile writes a kubeconfig for server with the given
// client certificate (none when certPEM is nil).
func writeKubeconfigFile(t *testing.T, path, server string, certPEM, keyPEM []byte) {
	t.Helper()
	cfg := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: %s, insecure-skip-tls-verify: true}\n", server)
	if certPEM != nil {
		cfg += fmt.Sprintf("users:\n- name: u\n  user:\n    client-certificate: %s\n    client-key: %s\n", path+".crt", path+".key")
		must(0, os.WriteFile(path+".crt", certPEM, 0o600))(t)
		must(0, os.WriteFile(path+".key", keyPEM, 0o600))(t)
	} else {
		cfg += "users:\n- name: u\n  user: {token: bootstrap.secret}\n"
	}
	cfg += "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"
	must(0, os.WriteFile(path, []byte(cfg), 0o600))(t)
}

// TestBootstrapDecision: a kubeconfig with a valid certificate is used as
// it is; a missing or expired one is rewritten from the bootstrap
// kubeconfig to point at the certificate store, keeping its server.
func TestBootstrapDecision(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t)
	now := time.Now()
	kubeconfig, boot, certDir := filepath.Join(dir, "kubelet.conf"), filepath.Join(dir, "bootstrap.conf"), filepath.Join(dir, "pki")
	writeKubeconfigFile(t, boot, "https://10.0.0.1:6443", nil, nil)

	cfgs := must(loadClientConfigs(kubeconfig, boot, certDir, now))(t)
	if !cfgs.bootstrapping || cfgs.request.BearerToken != "bootstrap.secret" || cfgs.user.BearerToken != "" {
		t.Fatalf("missing kubeconfig: %+v", cfgs)
	}
	written := must(clientcmd.LoadFromFile(kubeconfig))(t)
	auth := written.AuthInfos[written.Contexts[written.CurrentContext].AuthInfo]
	if auth.ClientCertificate != filepath.Join(certDir, "kubelet-client-current.pem") || auth.ClientKey != auth.ClientCertificate ||
		written.Clusters[written.Contexts[written.CurrentContext].Cluster].Server != "https://10.0.0.1:6443" {
		t.Fatalf("written kubeconfig %+v", written)
	}

	certPEM, keyPEM := ca.pair(t, "system:node:n1", now.Add(-time.Hour), now.Add(time.Hour))
	writeKubeconfigFile(t, kubeconfig, "https://10.0.0.2:6443", certPEM, keyPEM)
	cfgs = must(loadClientConfigs(kubeconfig, boot, certDir, now))(t)
	if cfgs.bootstrapping || cfgs.user.Host != "https://10.0.0.2:6443" || cfgs.user.CertFile != kubeconfig+".crt" {
		t.Fatalf("valid kubeconfig not reused: %+v", cfgs.user)
	}

	certPEM, keyPEM = ca.pair(t, "system:node:n1", now.Add(-2*time.Hour), now.Add(-time.Hour))
	writeKubeconfigFile(t, kubeconfig, "https://10.0.0.2:6443", certPEM, keyPEM)
	if cfgs = must(loadClientConfigs(kubeconfig, boot, certDir, now))(t); !cfgs.bootstrapping {
		t.Fatal("an expired certificate was not replaced by bootstrapping")
	}
}

// TestRequestNodeCertificate: the bootstrap request is for the node's
// identity, to the kubelet client signer, named after its contents, and
// what the signer issues comes back.
func TestRequestNodeCertificate(t *testing.T) {
	client := fake.NewClientset()
	ca := newCA(t)
	is := startIssuer(t, client, ca, testingclock.NewFakeClock(time.Now()), time.Hour)
	keyPEM := must(keyutil.MakeEllipticPrivateKeyPEM())(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	certPEM := must(requestNodeCertificate(ctx, client.CertificatesV1().CertificateSigningRequests(), clock.RealClock{}, keyPEM, "worker-1"))(t)
	csr := is.lastRequest()
	block, _ := pem.Decode(csr.Spec.Request)
	req := must(x509.ParseCertificateRequest(block.Bytes))(t)
	if req.Subject.CommonName != "system:node:worker-1" || strings.Join(req.Subject.Organization, ",") != "system:nodes" ||
		csr.Spec.SignerName != "kubernetes.io/kube-apiserver-client-kubelet" || !strings.HasPrefix(csr.Name, "node-csr-") ||
		fmt.Sprint(csr.Spec.Usages) != "[digital signature client auth]" {
		t.Fatalf("request %s: subject %v, signer %s, usages %v", csr.Name, req.Subject, csr.Spec.SignerName, csr.Spec.Usages)
	}
	issued := must(tls.X509KeyPair(certPEM, keyPEM))(t)
	if len(issued.Certificate) != 1 {
		t.Fatal("no certificate came back")
	}
	// The same key asks under the same name: a restart while waiting finds
	// its request again.
	key := must(keyutil.ParsePrivateKeyPEM(keyPEM))(t).(*ecdsa.PrivateKey)
	name := must(digestedName(key.Public(), nodeSubject("worker-1"), csr.Spec.Usages))(t)
	if name != csr.Name {
		t.Fatalf("name %s, want %s", csr.Name, name)
	}
}

// TestBootstrapOnceStoresTheCertificate: without rotation, the issued
// certificate lands in the store as the kubelet's does
// (kubelet-client-<timestamp>.pem and the kubelet-client-current.pem
// link), and the temporary key is gone.
func TestBootstrapOnceStoresTheCertificate(t *testing.T) {
	dir := t.TempDir()
	client := fake.NewClientset()
	startIssuer(t, client, newCA(t), testingclock.NewFakeClock(time.Now()), time.Hour)
	c := &Client{o: ClientOptions{CertDir: dir, NodeName: "worker-1", Clock: testingclock.NewFakeClock(time.Now())}}
	c.renewErrors = newCounter()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must(0, c.requestOnce(ctx, client.CertificatesV1().CertificateSigningRequests()))(t)
	current := filepath.Join(dir, "kubelet-client-current.pem")
	target := must(os.Readlink(current))(t)
	if !strings.HasPrefix(filepath.Base(target), "kubelet-client-20") {
		t.Fatalf("current points at %s", target)
	}
	pair := must(tls.LoadX509KeyPair(current, current))(t)
	leaf := must(x509.ParseCertificate(pair.Certificate[0]))(t)
	if leaf.Subject.CommonName != "system:node:worker-1" {
		t.Fatalf("stored certificate for %s", leaf.Subject.CommonName)
	}
	if _, err := os.Stat(filepath.Join(dir, tmpKeyFile)); !os.IsNotExist(err) {
		t.Fatalf("temporary key left behind: %v", err)
	}
}

// fakeManager stands in for the rotator: the certificate it holds is
// whatever the test stores.
type fakeManager struct {
	cur              atomic.Pointer[tls.Certificate]
	healthy          atomic.Bool
	started, stopped atomic.Int32
}

func (m *fakeManager) Run(ctx context.Context) error {
	m.started.Add(1)
	<-ctx.Done()
	m.stopped.Add(1)
	return nil
}

func (m *fakeManager) Current() *tls.Certificate { return m.cur.Load() }
func (m *fakeManager) ServerHealthy() bool       { return m.healthy.Load() }

// clientCertServer answers each request with the common name of the
// client certificate its connection was made with.
func clientCertServer(t *testing.T, ca *testCA) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// rotatingTestClient is a Client over m whose API connections go to srv.
func rotatingTestClient(t *testing.T, srv *httptest.Server, m *fakeManager, clk *testingclock.FakeClock) (*Client, *http.Client, *record.FakeRecorder) {
	t.Helper()
	rec := record.NewFakeRecorder(10)
	c := &Client{o: ClientOptions{NodeName: "n1", Clock: clk, Recorder: rec, CheckPeriod: 10 * time.Second, ExitAfter: 5 * time.Minute},
		manager: m, renewErrors: newCounter(), nodeRef: &v1.ObjectReference{Kind: "Node", Name: "n1"}}
	c.dialer = connrotation.NewDialer((&net.Dialer{}).DialContext)
	c.config = must(rotatingConfig(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, m, c.dialer))(t)
	hc := must(rest.HTTPClientFor(c.config))(t)
	return c, hc, rec
}

func get(t *testing.T, hc *http.Client, url string) string {
	t.Helper()
	resp := must(hc.Get(url))(t)
	defer resp.Body.Close()
	return string(must(io.ReadAll(resp.Body))(t))
}

// TestRotationMovesEveryConnection: once the manager holds a new
// certificate, Run closes the connections made with the old one, so the
// next request presents the new certificate; without the close, the
// kept-alive connection would go on with the old one.
func TestRotationMovesEveryConnection(t *testing.T) {
	ca := newCA(t)
	srv := clientCertServer(t, ca)
	m := &fakeManager{}
	m.cur.Store(ca.tlsCert(t, "old"))
	clk := testingclock.NewFakeClock(time.Now())
	c, hc, rec := rotatingTestClient(t, srv, m, clk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	if got := get(t, hc, srv.URL); got != "old" {
		t.Fatalf("first request as %q", got)
	}
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond) // until Run has taken the certificate in use and waits
	}
	m.cur.Store(ca.tlsCert(t, "new"))
	// Before Run notices, the kept-alive connection still carries the
	// old certificate: this is what the close is for.
	if got := get(t, hc, srv.URL); got != "old" {
		t.Fatalf("a kept-alive connection presented %q: the test cannot tell whether connections are closed", got)
	}
	clk.Step(10 * time.Second)
	eventually(t, func() bool { return len(rec.Events) > 0 })
	if ev := <-rec.Events; !strings.Contains(ev, "ClientCertificateRotated") {
		t.Fatalf("event %q", ev)
	}
	if got := get(t, hc, srv.URL); got != "new" {
		t.Fatalf("after the rotation the request went out as %q", got)
	}
	cancel()
	if err := <-done; err != nil || m.started.Load() != 1 || m.stopped.Load() != 1 {
		t.Fatalf("Run: %v, started %d, stopped %d", err, m.started.Load(), m.stopped.Load())
	}
}

// TestExpiredCertificateStopsWhileTheServerAnswers: an expired
// certificate is tolerated while the API server cannot be reached, and
// after ExitAfter with the server answering Run fails, so a restart
// bootstraps again.
func TestExpiredCertificateStopsWhileTheServerAnswers(t *testing.T) {
	ca := newCA(t)
	c, k := ca.pair(t, "n1", time.Now().Add(-time.Hour), time.Now().Add(-time.Minute))
	cert := must(tls.X509KeyPair(c, k))(t)
	cert.Leaf = must(x509.ParseCertificate(cert.Certificate[0]))(t)
	m := &fakeManager{}
	m.cur.Store(&cert)
	clk := testingclock.NewFakeClock(time.Now())
	client, _, _ := rotatingTestClient(t, clientCertServer(t, ca), m, clk)
	done := make(chan error, 1)
	go func() { done <- client.Run(context.Background()) }()
	step := func(d time.Duration) {
		t.Helper()
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond) // until Run waits
		}
		clk.Step(d)
	}
	for range 40 { // 400 s, past ExitAfter, with the server unreachable
		step(10 * time.Second)
	}
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond) // Run has checked the last step and waits again
	}
	select {
	case err := <-done:
		t.Fatalf("Run stopped while the server could not be reached: %v", err)
	default:
	}
	m.healthy.Store(true)
	step(10 * time.Second)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "bootstrap again") {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run went on with an expired certificate while the server answered")
	}
}

// TestRenewalFailureIsReported: the manager's failure hook counts and
// raises a Warning event.
func TestRenewalFailureIsReported(t *testing.T) {
	rec := record.NewFakeRecorder(1)
	c := &Client{o: ClientOptions{NodeName: "n1", Recorder: rec}, renewErrors: newCounter(), nodeRef: &v1.ObjectReference{Kind: "Node", Name: "n1"}}
	c.renewErrors.Inc()
	c.renewalFailed()
	if ev := <-rec.Events; !strings.HasPrefix(ev, "Warning ClientCertificateRenewalFailed") {
		t.Fatalf("event %q", ev)
	}
}

// TestServingTemplate: the serving request names the node's hostnames
// and IPs, sorted and without repeats; without an IP there is none.
func TestServingTemplate(t *testing.T) {
	if r := servingTemplate("n1", []v1.NodeAddress{{Type: v1.NodeHostName, Address: "n1"}}); r != nil {
		t.Fatalf("request without an IP: %+v", r)
	}
	r := servingTemplate("n1", []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: "10.0.0.2"}, {Type: v1.NodeHostName, Address: "n1"}, {Type: v1.NodeExternalIP, Address: "192.0.2.1"},
		{Type: v1.NodeInternalDNS, Address: "a.internal"}, {Type: v1.NodeInternalIP, Address: "10.0.0.2"},
	})
	if r.Subject.CommonName != "system:node:n1" || fmt.Sprint(r.DNSNames) != "[a.internal n1]" || fmt.Sprint(r.IPAddresses) != "[10.0.0.2 192.0.2.1]" {
		t.Fatalf("request %+v", r)
	}
}

// TestFilesReloadWhenChanged: a new pair and CA on disk are picked up at
// the next check; a broken pair is reported and the previous one stays.
func TestFilesReloadWhenChanged(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t)
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	write := func(cn string) {
		c, k := ca.pair(t, cn, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
		must(0, os.WriteFile(certFile, c, 0o600))(t)
		must(0, os.WriteFile(keyFile, k, 0o600))(t)
	}
	write("first")
	must(0, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}), 0o600))(t)
	clk := testingclock.NewFakeClock(time.Now())
	failures := make(chan error, 1)
	f := must(NewFiles(FileOptions{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile, Clock: clk, Failed: func(err error) { failures <- err }}))(t)
	if f.Certificate().Leaf.Subject.CommonName != "first" || f.ClientCAs() == nil {
		t.Fatal("not loaded at start")
	}
	firstCAs := f.ClientCAs()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.Run(ctx) //nolint:errcheck // returns nil
	tick := func() {
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond) // until Run waits
		}
		clk.Step(10 * time.Second)
	}
	write("second")
	must(0, os.WriteFile(caFile, append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}), '\n'), 0o600))(t)
	tick()
	eventually(t, func() bool { return f.Certificate().Leaf.Subject.CommonName == "second" && f.ClientCAs() != firstCAs })
	must(0, os.WriteFile(keyFile, []byte("not a key"), 0o600))(t)
	tick()
	select {
	case err := <-failures:
		if !strings.Contains(err.Error(), keyFile) {
			t.Fatalf("failure %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a broken key was not reported")
	}
	if f.Certificate().Leaf.Subject.CommonName != "second" {
		t.Fatal("a broken pair replaced the good one")
	}
}

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
}

// TestSelfSigned: made once, for the hostname and addresses, and kept.
func TestSelfSigned(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := must2(SelfSigned(dir, "node1", []string{"192.0.2.7"}))(t)
	pair := must(tls.LoadX509KeyPair(certFile, keyFile))(t)
	leaf := must(x509.ParseCertificate(pair.Certificate[0]))(t)
	if leaf.VerifyHostname("node1") != nil || leaf.VerifyHostname("192.0.2.7") != nil || filepath.Base(certFile) != "kubelet.crt" {
		t.Fatalf("self-signed certificate %s for %v %v", certFile, leaf.DNSNames, leaf.IPAddresses)
	}
	again, _ := must2(SelfSigned(dir, "node1", nil))(t)
	if string(must(os.ReadFile(again))(t)) != string(must(os.ReadFile(certFile))(t)) {
		t.Fatal("a second start made a new certificate")
	}
}

func must2[A, B any](a A, b B, err error) func(t *testing.T) (A, B) {
	return func(t *testing.T) (A, B) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	}
}

// TestRotationStartsWithoutACertificate: a node bootstrapping with
// rotation starts before its certificate exists: the kubeconfig points
// at a store that is still empty, and the API clients are built anyway
// (their requests are anonymous until the certificate is issued).
func TestRotationStartsWithoutACertificate(t *testing.T) {
	dir := t.TempDir()
	kubeconfig, boot := filepath.Join(dir, "kubelet.conf"), filepath.Join(dir, "bootstrap.conf")
	writeKubeconfigFile(t, boot, "https://127.0.0.1:1", nil, nil)
	c, err := NewClient(context.Background(), ClientOptions{Kubeconfig: kubeconfig, BootstrapKubeconfig: boot, CertDir: filepath.Join(dir, "pki"),
		NodeName: "n1", Rotate: true, Recorder: record.NewFakeRecorder(1), Clock: testingclock.NewFakeClock(time.Now())})
	if err != nil {
		t.Fatal(err)
	}
	if c.manager.Current() != nil {
		t.Fatal("a certificate out of nowhere")
	}
	if _, err := rest.HTTPClientFor(c.Config()); err != nil {
		t.Fatalf("API clients cannot be built before the certificate exists: %v", err)
	}
}
