package certificates

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/pods/poddirs"
)

// errNoPair: the store holds no certificate yet.
var errNoPair = errors.New("no certificate and key stored")

// pairStore keeps a certificate and its key as the kubelet's store does,
// so a node moves between the kubelet and nodelet with its certificates
// in place: each issued pair in <dir>/<prefix>-<timestamp>.pem
// (certificates, then the key; 0600), and <prefix>-current.pem a link to
// the one in use. Until there is one, the configured files
// (tlsCertFile/tlsPrivateKeyFile, or a kubeconfig's), then
// <prefix>.crt and <prefix>.key, stand in.
type pairStore struct {
	prefix, dir       string
	certFile, keyFile string
	clock             clock.PassiveClock
}

func (s pairStore) currentPath() string { return filepath.Join(s.dir, s.prefix+"-current.pem") }
func (s pairStore) updatedPath() string { return filepath.Join(s.dir, s.prefix+"-updated.pem") }

// recover finishes an update a crash interrupted: the new link was made
// but not yet renamed over the current one.
func (s pairStore) recover() error {
	if _, err := os.Stat(s.currentPath()); err == nil || !os.IsNotExist(err) {
		return err
	}
	fi, err := os.Lstat(s.updatedPath())
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSymlink == 0 {
		return fmt.Errorf("%s should be a link, but is a file", s.updatedPath())
	}
	return os.Rename(s.updatedPath(), s.currentPath())
}

// current loads the pair in use, or errNoPair.
func (s pairStore) current() (*tls.Certificate, error) {
	if exists(s.currentPath()) {
		return loadPair(s.currentPath(), s.currentPath())
	}
	if s.certFile != "" && exists(s.certFile) && exists(s.keyFile) {
		return loadPair(s.certFile, s.keyFile)
	}
	crt, key := filepath.Join(s.dir, s.prefix+".crt"), filepath.Join(s.dir, s.prefix+".key")
	if exists(crt) && exists(key) {
		return loadPair(crt, key)
	}
	return nil, fmt.Errorf("%w: none at %s, (%q, %q) or %s", errNoPair, s.currentPath(), s.certFile, s.keyFile, crt)
}

// update stores a new pair and makes it the current one. The file is
// written durably (synced, renamed into place, its directory synced)
// before the link moves to it, and the link moves by a rename, so a
// crash leaves the old pair or the new one in use, never a torn one.
func (s pairStore) update(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	data, cert, err := pairFile(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, fmt.Errorf("certificate directory: %w", err)
	}
	path := filepath.Join(s.dir, s.prefix+"-"+s.clock.Now().Format("2006-01-02-15-04-05")+".pem")
	if err := poddirs.WriteFileDurable(path, data, 0o600); err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	if err := s.link(path); err != nil {
		return nil, err
	}
	return cert, nil
}

// pairFile is the content of a pair file (the certificates, then the
// key) and the pair it holds, checked to be one.
func pairFile(certPEM, keyPEM []byte) ([]byte, *tls.Certificate, error) {
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("invalid certificate: %w", err)
	}
	keyBlock, _ := pem.Decode(keyPEM)
	if keyBlock == nil {
		return nil, nil, errors.New("invalid key: no PEM block")
	}
	var data []byte
	for _, c := range certs {
		data = append(data, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	data = append(data, pem.EncodeToMemory(keyBlock)...)
	cert, err := tls.X509KeyPair(data, data)
	if err != nil {
		return nil, nil, fmt.Errorf("the certificate and key do not make a pair: %w", err)
	}
	cert.Leaf = certs[0]
	return data, &cert, nil
}

// link makes path the current pair: a new link, renamed over the old.
func (s pairStore) link(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	if err := os.Remove(s.updatedPath()); err != nil && !os.IsNotExist(err) {
		return err
	}
	if err := os.Symlink(abs, s.updatedPath()); err != nil {
		return fmt.Errorf("linking the new certificate: %w", err)
	}
	if fi, err := os.Lstat(s.currentPath()); err == nil && fi.Mode()&os.ModeSymlink == 0 {
		return fmt.Errorf("%s should be a link, but is a file", s.currentPath())
	}
	if err := os.Rename(s.updatedPath(), s.currentPath()); err != nil {
		return fmt.Errorf("making the new certificate current: %w", err)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// loadPair loads a certificate and key, with the leaf parsed.
func loadPair(certFile, keyFile string) (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the certificate %s: %w", certFile, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("parsing the certificate %s: %w", certFile, err)
		}
	}
	return &cert, nil
}

// leafValidAt tells whether cert's leaf is valid at t.
func leafValidAt(cert *tls.Certificate, t time.Time) bool {
	return cert != nil && cert.Leaf != nil && t.Before(cert.Leaf.NotAfter)
}
