package certificates

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	mathrand "math/rand/v2"
	"net"
	"reflect"
	"slices"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// retryBackoff is the kubelet's certificate manager's: 2 s, doubling to
// 32 s, then every 32 s (each with up to 10% jitter).
func retryBackoff() wait.Backoff {
	return wait.Backoff{Duration: 2 * time.Second, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: 32 * time.Second}
}

// errTemplateChanged ends the wait for a request that no longer asks for
// what is wanted.
var errTemplateChanged = errors.New("the certificate template changed")

// rotatorOptions configure a rotator.
type rotatorOptions struct {
	// Name is for the logs: kubelet-client or kubelet-serving.
	Name  string
	Store pairStore
	// Template is the request to make; nil while none can be made (a
	// serving certificate before the node has an address). Dynamic: a
	// certificate that no longer covers it is replaced at once.
	Template func() *x509.CertificateRequest
	Dynamic  bool
	// Signer and Auth: the signer asked, and client or server auth.
	Signer string
	Auth   certificatesv1.KeyUsage
	// CSRs is the API requests go to, given the certificate in use (nil
	// before there is one: the bootstrap credentials).
	CSRs func(current *tls.Certificate) (CSRs, error)
	// BootstrapCert and BootstrapKey (a kubeconfig's embedded pair) are
	// stored and used when the store is empty, and rotated out at once.
	BootstrapCert, BootstrapKey []byte
	// Failed is told of each failed attempt.
	Failed func(err error)
	Clock  clock.Clock
}

// rotator obtains a certificate through the CSR API and renews it at 70
// to 90% of its lifetime (a jittered point, so nodes that joined
// together do not renew together), as the kubelet's certificate manager
// does. A failed attempt is retried after 2 s, doubling five times, then
// every 32 s.
//
//	  no certificate / expired / template not covered / forced
//	waiting ─────────────────────────────────────────────────▶ requesting
//	   ▲  deadline reached                                        │ issued: stored, current
//	   └──────────────────────────────────────────────────────────┘ failed: back off, request again
type rotator struct {
	o rotatorOptions

	mu       sync.RWMutex
	cert     *tls.Certificate
	deadline time.Time // when cert is due for renewal
	healthy  bool      // what the last request said of the API server
	force    bool      // renew at once: the certificate is a bootstrap one
	lastAsk  *x509.CertificateRequest
}

func newRotator(o rotatorOptions) (*rotator, error) {
	if err := o.Store.recover(); err != nil {
		return nil, fmt.Errorf("%s certificate store: %w", o.Name, err)
	}
	r := &rotator{o: o}
	cert, err := o.Store.current()
	switch {
	case err == nil && leafValidAt(cert, o.Clock.Now()):
		r.setCert(cert)
		return r, nil
	case err != nil && !errors.Is(err, errNoPair):
		return nil, fmt.Errorf("%s certificate store: %w", o.Name, err)
	}
	r.force = true
	if o.BootstrapCert == nil || o.BootstrapKey == nil {
		return r, nil
	}
	if cert, err = o.Store.update(o.BootstrapCert, o.BootstrapKey); err != nil {
		return nil, fmt.Errorf("storing the %s bootstrap certificate: %w", o.Name, err)
	}
	r.setCert(cert)
	return r, nil
}

// Current is the certificate in use; nil before one is issued and once
// it has expired.
func (r *rotator) Current() *tls.Certificate {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.cert != nil && !leafValidAt(r.cert, r.o.Clock.Now()) {
		return nil
	}
	return r.cert
}

// ServerHealthy is whether the API server answered the last request as a
// working API server would (an authorization refusal counts as one).
func (r *rotator) ServerHealthy() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.healthy
}

func (r *rotator) setCert(cert *tls.Certificate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cert = cert
	total := cert.Leaf.NotAfter.Sub(cert.Leaf.NotBefore)
	r.deadline = cert.Leaf.NotBefore.Add(time.Duration(float64(total) * (0.7 + 0.2*mathrand.Float64())))
}

// Run renews the certificate until ctx ends.
func (r *rotator) Run(ctx context.Context) error {
	for {
		if r.due() {
			r.renew(ctx)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.o.Clock.After(r.nextLook()):
		}
	}
}

// due tells whether a certificate must be requested now.
func (r *rotator) due() bool {
	t := r.o.Template()
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case t == nil:
		return false
	case r.force:
		r.force = false
		return true
	case r.cert == nil || !covers(r.cert.Leaf, t):
		return !reflect.DeepEqual(t, r.lastAsk) || r.cert == nil
	}
	return !r.o.Clock.Now().Before(r.deadline)
}

// nextLook is how long to wait before due is asked again: a second while
// there is no certificate (nothing to request yet: the serving template
// waits for the node's addresses), else until the deadline, but at most
// a second when the template may change.
func (r *rotator) nextLook() time.Duration {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.cert == nil {
		return time.Second
	}
	d := r.deadline.Sub(r.o.Clock.Now())
	if r.o.Dynamic {
		d = min(d, time.Second)
	}
	return max(d, 0)
}

// renew requests a certificate until one is issued or ctx ends, backing
// off as the kubelet does.
func (r *rotator) renew(ctx context.Context) {
	backoff := retryBackoff()
	for ctx.Err() == nil {
		err := r.requestOnce(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		if errors.Is(err, errTemplateChanged) {
			continue // not a failure: ask for what is wanted now
		}
		klog.ErrorS(err, "Requesting a certificate failed; retrying", "certificate", r.o.Name)
		r.o.Failed(err)
		select {
		case <-ctx.Done():
		case <-r.o.Clock.After(backoff.Step()):
		}
	}
}

// requestOnce makes one request with a new key and waits for it (at most
// 15 minutes, and, for a dynamic template, only while the template stays
// what was asked).
func (r *rotator) requestOnce(ctx context.Context) error {
	tmpl := r.o.Template()
	if tmpl == nil {
		return errors.New("nothing to request yet")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating a key: %w", err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	csrPEM, err := certutil.MakeCSRFromTemplate(key, tmpl)
	if err != nil {
		return fmt.Errorf("making the request: %w", err)
	}
	api, err := r.o.CSRs(r.Current())
	if err != nil {
		return fmt.Errorf("CSR API client: %w", err)
	}
	name, uid, err := submit(ctx, api, csrRequest{signer: r.o.Signer, csrPEM: csrPEM, usages: keyUsages(key, r.o.Auth), key: key})
	r.noteServer(err)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctx, stop := context.WithTimeout(ctx, 15*time.Minute)
	defer stop()
	r.mu.Lock()
	r.lastAsk = tmpl
	r.mu.Unlock()
	if r.o.Dynamic {
		go r.cancelOnChange(ctx, cancel, tmpl)
	}
	certPEM, err := awaitCertificate(ctx, api, r.o.Clock, name, uid)
	if errors.Is(context.Cause(ctx), errTemplateChanged) {
		return errTemplateChanged
	}
	if err != nil {
		return err
	}
	cert, err := r.o.Store.update(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("storing the certificate: %w", err)
	}
	r.setCert(cert)
	r.mu.Lock()
	r.healthy = true
	r.mu.Unlock()
	klog.InfoS("Certificate issued", "certificate", r.o.Name, "csr", name, "notAfter", cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	return nil
}

// cancelOnChange stops waiting for a request whose template is no longer
// what is wanted (the node's addresses changed meanwhile).
func (r *rotator) cancelOnChange(ctx context.Context, cancel context.CancelCauseFunc, asked *x509.CertificateRequest) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.o.Clock.After(time.Second):
		}
		if t := r.o.Template(); t != nil && !reflect.DeepEqual(t, asked) {
			klog.V(2).InfoS("The certificate template changed while a request waited; requesting anew", "certificate", r.o.Name)
			cancel(errTemplateChanged)
			return
		}
	}
}

// noteServer infers from a request's answer whether the API server is
// up: refusals (unauthorized, forbidden, not found) come from a working
// one; an unexpected error, or none at all, from a proxy or nothing.
func (r *rotator) noteServer(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil, apierrors.IsUnauthorized(err), apierrors.IsForbidden(err), apierrors.IsNotFound(err):
		r.healthy = true
	default:
		r.healthy = false
	}
}

// covers tells whether cert has every name, address and organisation
// the template asks for, and its common name; more is fine.
func covers(cert *x509.Certificate, t *x509.CertificateRequest) bool {
	if cert.Subject.CommonName != t.Subject.CommonName {
		return false
	}
	for _, o := range t.Subject.Organization {
		if !slices.Contains(cert.Subject.Organization, o) {
			return false
		}
	}
	for _, d := range t.DNSNames {
		if !slices.Contains(cert.DNSNames, d) {
			return false
		}
	}
	for _, ip := range t.IPAddresses {
		if !slices.ContainsFunc(cert.IPAddresses, func(c net.IP) bool { return c.Equal(ip) }) {
			return false
		}
	}
	return true
}
