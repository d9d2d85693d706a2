package certificates

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/keyutil"
	testingclock "k8s.io/utils/clock/testing"

	dto "github.com/prometheus/client_model/go"
)

// issuer approves and signs every CSR created in client, as the
// controller manager would, for lifetime from the fake clock's now; it
// counts the requests and keeps the last.
type issuer struct {
	requests atomic.Int32
	mu       sync.Mutex
	last     *certificatesv1.CertificateSigningRequest
}

func startIssuer(t *testing.T, client *fake.Clientset, ca *testCA, clk *testingclock.FakeClock, lifetime time.Duration) *issuer {
	t.Helper()
	is := &issuer{}
	generateNames(client)
	w := must(client.CertificatesV1().CertificateSigningRequests().Watch(context.Background(), metav1.ListOptions{}))(t)
	t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			csr, ok := ev.Object.(*certificatesv1.CertificateSigningRequest)
			if !ok || ev.Type != watch.Added {
				continue
			}
			block, _ := pem.Decode(csr.Spec.Request)
			req, err := x509.ParseCertificateRequest(block.Bytes)
			if err != nil {
				t.Errorf("request %s: %v", csr.Name, err)
				continue
			}
			is.mu.Lock()
			is.last = csr.DeepCopy()
			is.mu.Unlock()
			now := clk.Now()
			csr.Status.Certificate = ca.sign(t, &x509.Certificate{Subject: req.Subject, DNSNames: req.DNSNames, IPAddresses: req.IPAddresses},
				req.PublicKey, now, now.Add(lifetime))
			csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: v1.ConditionTrue}}
			if _, err := client.CertificatesV1().CertificateSigningRequests().UpdateStatus(context.Background(), csr, metav1.UpdateOptions{}); err != nil {
				t.Errorf("signing: %v", err)
			}
			is.requests.Add(1)
		}
	}()
	return is
}

// generateNames names created requests from their generateName, as the
// API server does and the fake clientset does not.
func generateNames(client *fake.Clientset) {
	var n atomic.Int32
	client.PrependReactor("create", "certificatesigningrequests", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if csr := a.(clienttesting.CreateAction).GetObject().(*certificatesv1.CertificateSigningRequest); csr.Name == "" {
			csr.Name = fmt.Sprintf("%s%d", csr.GenerateName, n.Add(1))
		}
		return false, nil, nil
	})
}

func (is *issuer) lastRequest() *certificatesv1.CertificateSigningRequest {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.last
}

// waitIdle waits until the rotator waits on the fake clock.
func waitIdle(t *testing.T, clk *testingclock.FakeClock) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the rotator never waited on its clock")
		}
		time.Sleep(time.Millisecond)
	}
}

// stepUntil steps the fake clock a second at a time, whenever something
// waits on it, until cond holds: the rotator's goroutines (its loop, the
// watch of a template) wait on the clock in no fixed order.
func stepUntil(t *testing.T, clk *testingclock.FakeClock, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		if clk.HasWaiters() {
			clk.Step(time.Second)
		}
		time.Sleep(time.Millisecond)
	}
}

func clientRotator(t *testing.T, dir string, client *fake.Clientset, clk *testingclock.FakeClock, o func(*rotatorOptions)) *rotator {
	t.Helper()
	opts := rotatorOptions{
		Name: "kubelet-client", Store: pairStore{prefix: clientPairPrefix, dir: dir, clock: clk},
		Template: func() *x509.CertificateRequest { return &x509.CertificateRequest{Subject: nodeSubject("n1")} },
		Signer:   ClientSignerName, Auth: certificatesv1.UsageClientAuth,
		CSRs:   func(*tls.Certificate) (CSRs, error) { return client.CertificatesV1().CertificateSigningRequests(), nil },
		Failed: func(error) {}, Clock: clk,
	}
	if o != nil {
		o(&opts)
	}
	return must(newRotator(opts))(t)
}

func runRotator(t *testing.T, r *rotator) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// TestRotatorRenewsInTheJitteredWindow: a certificate is kept until 70%
// of its lifetime, and renewed by 90%: the new one is stored (a new
// <prefix>-<timestamp>.pem, the current link moved) and served.
func TestRotatorRenewsInTheJitteredWindow(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t)
	clk := testingclock.NewFakeClock(time.Now())
	client := fake.NewClientset()
	is := startIssuer(t, client, ca, clk, 100*time.Hour)
	key := must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))(t)
	certPEM := ca.sign(t, &x509.Certificate{Subject: nodeSubject("n1")}, &key.PublicKey, clk.Now(), clk.Now().Add(100*time.Hour))
	keyPEM := must(keyutil.MarshalPrivateKeyToPEM(key))(t)
	store := pairStore{prefix: clientPairPrefix, dir: dir, clock: clk}
	first := must(store.update(certPEM, keyPEM))(t)
	r := clientRotator(t, dir, client, clk, nil)
	if r.Current().Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) != 0 {
		t.Fatal("the stored certificate is not the one in use")
	}
	runRotator(t, r)
	for range 69 { // an hour at a time, up to 69% of the lifetime
		waitIdle(t, clk)
		clk.Step(time.Hour)
	}
	waitIdle(t, clk) // the rotator has looked at 69 h and waits again
	if n := is.requests.Load(); n != 0 {
		t.Fatalf("%d requests before 70%% of the lifetime", n)
	}
	for range 21 { // up to 90%
		waitIdle(t, clk)
		clk.Step(time.Hour)
	}
	eventually(t, func() bool {
		cur := r.Current()
		return cur != nil && cur.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) != 0
	})
	if n := is.requests.Load(); n != 1 {
		t.Fatalf("%d requests by 90%% of the lifetime, want 1", n)
	}
	req := is.lastRequest()
	if req.Spec.SignerName != ClientSignerName || fmt.Sprint(req.Spec.Usages) != "[digital signature client auth]" || !strings.HasPrefix(req.GenerateName, "csr-") {
		t.Fatalf("request: signer %s, usages %v, generateName %q", req.Spec.SignerName, req.Spec.Usages, req.GenerateName)
	}
	stored := must(store.current())(t)
	if stored.Leaf.SerialNumber.Cmp(r.Current().Leaf.SerialNumber) != 0 {
		t.Fatal("the renewed certificate is not the stored one")
	}
	if target := must(os.Readlink(store.currentPath()))(t); !filepath.IsAbs(target) || !strings.HasPrefix(filepath.Base(target), "kubelet-client-20") {
		t.Fatalf("current link points at %s", target)
	}
}

// TestRotatorRotatesABootstrapPairAtOnce: a kubeconfig's embedded pair
// (kubeadm's) goes into the empty store and is used, and replaced at once
// through a request made with it.
func TestRotatorRotatesABootstrapPairAtOnce(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t)
	clk := testingclock.NewFakeClock(time.Now())
	client := fake.NewClientset()
	is := startIssuer(t, client, ca, clk, time.Hour)
	bootCert, bootKey := ca.pair(t, "system:node:n1", clk.Now().Add(-time.Minute), clk.Now().Add(365*24*time.Hour))
	var usedWith atomic.Pointer[tls.Certificate]
	r := clientRotator(t, dir, client, clk, func(o *rotatorOptions) {
		o.BootstrapCert, o.BootstrapKey = bootCert, bootKey
		o.CSRs = func(cur *tls.Certificate) (CSRs, error) {
			usedWith.Store(cur)
			return client.CertificatesV1().CertificateSigningRequests(), nil
		}
	})
	boot := r.Current()
	if boot == nil || !exists(filepath.Join(dir, "kubelet-client-current.pem")) {
		t.Fatal("the bootstrap pair is neither in use nor stored")
	}
	runRotator(t, r)
	eventually(t, func() bool { return is.requests.Load() == 1 })
	eventually(t, func() bool { return r.Current().Leaf.SerialNumber.Cmp(boot.Leaf.SerialNumber) != 0 })
	if usedWith.Load() != boot {
		t.Fatal("the request was not made with the bootstrap pair")
	}
}

// TestRotatorBacksOff: a failed request is reported, and retried after 2
// s, then 4 s; the API server's answer says whether it is up.
func TestRotatorBacksOff(t *testing.T) {
	ca := newCA(t)
	clk := testingclock.NewFakeClock(time.Now())
	client := fake.NewClientset()
	type result struct{ err error }
	var answer atomic.Pointer[result] // what creates are answered
	answer.Store(&result{apierrors.NewInternalError(errors.New("etcd is away"))})
	var attempts atomic.Int32
	client.PrependReactor("create", "certificatesigningrequests", func(clienttesting.Action) (bool, runtime.Object, error) {
		attempts.Add(1)
		if err := answer.Load().err; err != nil {
			return true, nil, err
		}
		return false, nil, nil
	})
	startIssuer(t, client, ca, clk, time.Hour)
	var failures atomic.Int32
	r := clientRotator(t, t.TempDir(), client, clk, func(o *rotatorOptions) { o.Failed = func(error) { failures.Add(1) } })
	runRotator(t, r)
	eventually(t, func() bool { return failures.Load() == 1 })
	if r.ServerHealthy() {
		t.Fatal("an internal error counted as a healthy API server")
	}
	waitIdle(t, clk)
	clk.Step(1900 * time.Millisecond) // short of the first back-off (2 s, jitter up)
	waitIdle(t, clk)
	if n := attempts.Load(); n != 1 {
		t.Fatalf("%d attempts within the first back-off", n)
	}
	answer.Store(&result{apierrors.NewForbidden(certificatesv1.Resource("certificatesigningrequests"), "", errors.New("no"))})
	clk.Step(400 * time.Millisecond)
	eventually(t, func() bool { return failures.Load() == 2 })
	if !r.ServerHealthy() {
		t.Fatal("a refusal counted as an API server down")
	}
	waitIdle(t, clk)
	clk.Step(3 * time.Second) // short of the second (4 s)
	waitIdle(t, clk)
	if n := attempts.Load(); n != 2 {
		t.Fatalf("%d attempts within the second back-off", n)
	}
	answer.Store(&result{})
	clk.Step(2 * time.Second)
	eventually(t, func() bool { return r.Current() != nil })
	if attempts.Load() != 3 || failures.Load() != 2 {
		t.Fatalf("%d attempts, %d failures", attempts.Load(), failures.Load())
	}
}

// TestServingRotatorFollowsTheTemplate: nothing is requested while the
// node has no address; a certificate for its addresses is; a new address
// brings a new request at once, long before the renewal deadline.
func TestServingRotatorFollowsTheTemplate(t *testing.T) {
	ca := newCA(t)
	clk := testingclock.NewFakeClock(time.Now())
	client := fake.NewClientset()
	is := startIssuer(t, client, ca, clk, 100*time.Hour)
	var addrs atomic.Pointer[[]v1.NodeAddress]
	addrs.Store(&[]v1.NodeAddress{{Type: v1.NodeHostName, Address: "n1"}})
	s := must(NewServing(ServingOptions{CSRs: client.CertificatesV1().CertificateSigningRequests(), NodeName: "n1", CertDir: t.TempDir(),
		Addresses: func() []v1.NodeAddress { return *addrs.Load() }, Clock: clk}))(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for range 5 {
		waitIdle(t, clk)
		clk.Step(time.Second)
	}
	waitIdle(t, clk)
	if n := is.requests.Load(); n != 0 || s.Current() != nil {
		t.Fatalf("%d requests without an address", n)
	}
	addrs.Store(&[]v1.NodeAddress{{Type: v1.NodeHostName, Address: "n1"}, {Type: v1.NodeInternalIP, Address: "10.0.0.1"}})
	stepUntil(t, clk, func() bool { return s.Current() != nil })
	if got := s.Current().Leaf; fmt.Sprint(got.DNSNames, got.IPAddresses) != "[n1] [10.0.0.1]" {
		t.Fatalf("certificate for %v %v", got.DNSNames, got.IPAddresses)
	}
	if req := is.lastRequest(); req.Spec.SignerName != certificatesv1.KubeletServingSignerName || fmt.Sprint(req.Spec.Usages) != "[digital signature server auth]" {
		t.Fatalf("request: signer %s, usages %v", req.Spec.SignerName, req.Spec.Usages)
	}
	addrs.Store(&[]v1.NodeAddress{{Type: v1.NodeHostName, Address: "n1"}, {Type: v1.NodeInternalIP, Address: "10.0.0.2"}})
	stepUntil(t, clk, func() bool { return fmt.Sprint(s.Current().Leaf.IPAddresses) == "[10.0.0.2]" })
	if n := is.requests.Load(); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
}

// TestServingRequestFollowsAChangedTemplate: a request still waiting for
// approval when the node's addresses change is given up, and one for the
// new addresses made at once; that is not a failure.
func TestServingRequestFollowsAChangedTemplate(t *testing.T) {
	ca := newCA(t)
	clk := testingclock.NewFakeClock(time.Now())
	client := fake.NewClientset()
	generateNames(client)
	csrs := client.CertificatesV1().CertificateSigningRequests()
	var addrs atomic.Pointer[[]v1.NodeAddress]
	addrs.Store(&[]v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}})
	s := must(NewServing(ServingOptions{CSRs: csrs, NodeName: "n1", CertDir: t.TempDir(),
		Addresses: func() []v1.NodeAddress { return *addrs.Load() }, Clock: clk}))(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	requests := func() []certificatesv1.CertificateSigningRequest {
		return must(csrs.List(context.Background(), metav1.ListOptions{}))(t).Items
	}
	eventually(t, func() bool { return len(requests()) == 1 })
	addrs.Store(&[]v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.2"}})
	stepUntil(t, clk, func() bool { return len(requests()) == 2 })
	var second certificatesv1.CertificateSigningRequest
	for _, r := range requests() {
		if r.Name == "csr-2" {
			second = r
		}
	}
	req := must(parseCSR(second.Spec.Request))(t)
	if fmt.Sprint(req.IPAddresses) != "[10.0.0.2]" {
		t.Fatalf("the new request asks for %v", req.IPAddresses)
	}
	second.Status.Certificate = ca.sign(t, &x509.Certificate{Subject: req.Subject, IPAddresses: req.IPAddresses}, req.PublicKey, clk.Now(), clk.Now().Add(time.Hour))
	second.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: v1.ConditionTrue}}
	must(csrs.UpdateStatus(context.Background(), &second, metav1.UpdateOptions{}))(t)
	eventually(t, func() bool { return s.Current() != nil })
	if got := fmt.Sprint(s.Current().Leaf.IPAddresses); got != "[10.0.0.2]" {
		t.Fatalf("certificate for %s", got)
	}
	var m dto.Metric
	if err := s.renewErrors.Write(&m); err != nil || m.GetCounter().GetValue() != 0 {
		t.Fatalf("%v renewal errors counted for a changed template (%v)", m.GetCounter().GetValue(), err)
	}
}

// TestAwaitCertificateEnds: a denied, deleted or replaced request ends
// the wait with the reason.
func TestAwaitCertificateEnds(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		change     func(api CSRs, client *fake.Clientset, csr *certificatesv1.CertificateSigningRequest)
	}{
		{"denied", "was denied: Policy: not this node", func(_ CSRs, client *fake.Clientset, csr *certificatesv1.CertificateSigningRequest) {
			csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateDenied, Reason: "Policy", Message: "not this node"}}
			must(client.CertificatesV1().CertificateSigningRequests().UpdateStatus(context.Background(), csr, metav1.UpdateOptions{}))(t)
		}},
		{"deleted", "was deleted", func(_ CSRs, client *fake.Clientset, csr *certificatesv1.CertificateSigningRequest) {
			must(0, client.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), csr.Name, metav1.DeleteOptions{}))(t)
		}},
		{"replaced", "replaced by another", func(_ CSRs, client *fake.Clientset, csr *certificatesv1.CertificateSigningRequest) {
			csr.UID = "another"
			must(client.CertificatesV1().CertificateSigningRequests().Update(context.Background(), csr, metav1.UpdateOptions{}))(t)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			api := client.CertificatesV1().CertificateSigningRequests()
			csr := must(api.Create(context.Background(), &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "r1", UID: "u1"}}, metav1.CreateOptions{}))(t)
			errs := make(chan error, 1)
			go func() {
				_, err := awaitCertificate(context.Background(), api, testingclock.NewFakeClock(time.Now()), "r1", "u1")
				errs <- err
			}()
			tc.change(api, client, csr)
			select {
			case err := <-errs:
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("wait ended with %v, want %q", err, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the wait did not end")
			}
		})
	}
}

// TestStoreFallsBackAndRecovers: the current link wins over the
// configured files, which win over <prefix>.crt/.key; an empty store
// says so; a link a crash left as -updated.pem becomes the current one.
func TestStoreFallsBackAndRecovers(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t)
	clk := testingclock.NewFakeClock(time.Now())
	s := pairStore{prefix: "kubelet-server", dir: dir, certFile: filepath.Join(dir, "tls.crt"), keyFile: filepath.Join(dir, "tls.key"), clock: clk}
	if _, err := s.current(); !errors.Is(err, errNoPair) {
		t.Fatalf("empty store: %v", err)
	}
	write := func(name string, data []byte) { must(0, os.WriteFile(filepath.Join(dir, name), data, 0o600))(t) }
	c, k := ca.pair(t, "dir-pair", clk.Now(), clk.Now().Add(time.Hour))
	write("kubelet-server.crt", c)
	write("kubelet-server.key", k)
	cn := func() string { return must(s.current())(t).Leaf.Subject.CommonName }
	if got := cn(); got != "dir-pair" {
		t.Fatalf("loaded %s", got)
	}
	c, k = ca.pair(t, "configured", clk.Now(), clk.Now().Add(time.Hour))
	write("tls.crt", c)
	write("tls.key", k)
	if got := cn(); got != "configured" {
		t.Fatalf("loaded %s", got)
	}
	c, k = ca.pair(t, "issued", clk.Now(), clk.Now().Add(time.Hour))
	stored := must(s.update(c, k))(t)
	if got := cn(); got != "issued" || stored.Leaf.Subject.CommonName != "issued" {
		t.Fatalf("loaded %s", got)
	}
	if fi := must(os.Stat(must(os.Readlink(s.currentPath()))(t)))(t); fi.Mode().Perm() != 0o600 {
		t.Fatalf("pair file mode %v", fi.Mode())
	}
	if _, err := s.update(c, []byte("not a key")); err == nil {
		t.Fatal("a pair without a key was stored")
	}
	// A crash between making the new link and renaming it.
	target := must(os.Readlink(s.currentPath()))(t)
	must(0, os.Remove(s.currentPath()))(t)
	must(0, os.Symlink(target, s.updatedPath()))(t)
	must(0, s.recover())(t)
	if got := cn(); got != "issued" {
		t.Fatalf("after recovery loaded %s", got)
	}
}

// TestCSRClientSpeaksTheAPI: the narrow CSR client calls the API
// server's paths and decodes what it answers, watch events included.
func TestCSRClientSpeaksTheAPI(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	obj := func(name string) map[string]any {
		return map[string]any{"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
			"metadata": map[string]any{"name": name, "uid": "u-" + name, "resourceVersion": "7"},
			"spec":     map[string]any{"signerName": ClientSignerName, "request": []byte("x")}}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.RequestURI())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Query().Get("watch") == "true":
			enc := json.NewEncoder(w)
			must(0, enc.Encode(map[string]any{"type": "MODIFIED", "object": obj("r1")}))(t)
		case r.Method == http.MethodPost:
			w.WriteHeader(http.StatusCreated)
			must(0, json.NewEncoder(w).Encode(obj("csr-abcde")))(t)
		default:
			must(0, json.NewEncoder(w).Encode(obj("r1")))(t)
		}
	}))
	defer srv.Close()
	api := must(newCSRClient(&rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/vnd.kubernetes.protobuf"}}))(t)
	ctx := context.Background()
	created := must(api.Create(ctx, &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: "csr-"}}, metav1.CreateOptions{}))(t)
	got := must(api.Get(ctx, "r1", metav1.GetOptions{}))(t)
	w := must(api.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=r1"}))(t)
	ev := <-w.ResultChan()
	w.Stop()
	if created.Name != "csr-abcde" || got.UID != "u-r1" || got.Spec.SignerName != ClientSignerName || ev.Type != watch.Modified ||
		ev.Object.(*certificatesv1.CertificateSigningRequest).Name != "r1" {
		t.Fatalf("created %s, got %s/%s, event %s %T", created.Name, got.Name, got.UID, ev.Type, ev.Object)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{
		"POST /apis/certificates.k8s.io/v1/certificatesigningrequests",
		"GET /apis/certificates.k8s.io/v1/certificatesigningrequests/r1",
		"GET /apis/certificates.k8s.io/v1/certificatesigningrequests?fieldSelector=metadata.name%3Dr1&watch=true",
	}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("calls:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}
