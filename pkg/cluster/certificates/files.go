package certificates

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// FileOptions name the files an administrator manages.
type FileOptions struct {
	// CertFile and KeyFile are the serving certificate and key; empty
	// for none (the serving certificate comes from elsewhere).
	CertFile, KeyFile string
	// ClientCAFile verifies client certificates; empty for none.
	ClientCAFile string
	Clock        clock.WithTicker
	// Period is how often the files are read again (default 10 s).
	Period time.Duration
	// Failed reports a change that could not be loaded (the previous
	// files stay in force).
	Failed func(err error)
}

// Files serves certificate files and reloads them when their contents
// change, as the kubelet reloads tlsCertFile and the client CA: a renewed
// certificate dropped in place takes effect without a restart. A change
// that does not load (a half-written pair, say) is reported and the
// previous files stay in force until the next good one.
type Files struct {
	o    FileOptions
	cert atomic.Pointer[tls.Certificate]
	cas  atomic.Pointer[x509.CertPool]
	// seen is the file contents last loaded, or tried.
	seenPair, seenCA []byte
}

// NewFiles loads the files; they must load at start.
func NewFiles(o FileOptions) (*Files, error) {
	if o.Period <= 0 {
		o.Period = 10 * time.Second
	}
	f := &Files{o: o}
	if err := f.reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// Certificate is the serving certificate.
func (f *Files) Certificate() *tls.Certificate { return f.cert.Load() }

// ClientCAs are the client CAs, nil when none are configured.
func (f *Files) ClientCAs() *x509.CertPool { return f.cas.Load() }

// Run reloads the files every period until ctx ends.
func (f *Files) Run(ctx context.Context) error {
	t := f.o.Clock.NewTicker(f.o.Period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			if err := f.reload(); err != nil && f.o.Failed != nil {
				f.o.Failed(err)
			}
		}
	}
}

// Reload reads the files now; tests and the loop call it.
func (f *Files) reload() error {
	if f.o.CertFile != "" {
		if err := f.reloadPair(); err != nil {
			return err
		}
	}
	if f.o.ClientCAFile != "" {
		return f.reloadCA()
	}
	return nil
}

func (f *Files) reloadPair() error {
	certPEM, err := os.ReadFile(f.o.CertFile)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(f.o.KeyFile)
	if err != nil {
		return fmt.Errorf("serving key: %w", err)
	}
	both := append(append([]byte{}, certPEM...), keyPEM...)
	if bytes.Equal(both, f.seenPair) {
		return nil
	}
	f.seenPair = both
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("serving certificate %s and key %s: %w", f.o.CertFile, f.o.KeyFile, err)
	}
	if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
		return fmt.Errorf("serving certificate %s: %w", f.o.CertFile, err)
	}
	if f.cert.Swap(&cert) != nil {
		klog.InfoS("Serving certificate reloaded", "certFile", f.o.CertFile, "notAfter", cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

func (f *Files) reloadCA() error {
	data, err := os.ReadFile(f.o.ClientCAFile)
	if err != nil {
		return fmt.Errorf("clientCAFile: %w", err)
	}
	if bytes.Equal(data, f.seenCA) {
		return nil
	}
	f.seenCA = data
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return fmt.Errorf("clientCAFile %s holds no PEM certificate", f.o.ClientCAFile)
	}
	if f.cas.Swap(pool) != nil {
		klog.InfoS("Client CA file reloaded", "clientCAFile", f.o.ClientCAFile)
	}
	return nil
}

// SelfSigned returns <certDir>/kubelet.crt and kubelet.key, creating them
// first if they do not exist, as the kubelet does without tlsCertFile: a
// self-signed CA and a serving certificate for the hostname and the
// node's addresses.
func SelfSigned(certDir, hostname string, hostIPs []string) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(certDir, "kubelet.crt"), filepath.Join(certDir, "kubelet.key")
	if ok, err := certutil.CanReadCertAndKey(certFile, keyFile); err != nil || ok {
		return certFile, keyFile, err
	}
	var ips []net.IP
	for _, ip := range hostIPs {
		if p := net.ParseIP(ip); p != nil {
			ips = append(ips, p)
		}
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(hostname, ips, nil)
	if err != nil {
		return "", "", fmt.Errorf("creating a self-signed serving certificate: %w", err)
	}
	if err := certutil.WriteCert(certFile, certPEM); err != nil {
		return "", "", err
	}
	return certFile, keyFile, keyutil.WriteKey(keyFile, keyPEM)
}
