package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"testing"
	"time"
)

// Cert is a test certificate: a key pair for a common name, valid for an
// hour either side of now, for server and client use, for localhost and
// 127.0.0.1.
type Cert struct {
	CertPEM, KeyPEM []byte
	TLS             *tls.Certificate
}

// NewCert makes a certificate for cn signed by parent, or self-signed
// (and then a CA) when parent is nil.
func NewCert(t testing.TB, cn string, parent *Cert) *Cert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	Must(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	signer, signerKey := tmpl, any(key)
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	} else {
		signer, signerKey = parent.TLS.Leaf, parent.TLS.PrivateKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	Must(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	Must(t, err)
	c := &Cert{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})}
	pair, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
	Must(t, err)
	pair.Leaf, err = x509.ParseCertificate(der)
	Must(t, err)
	c.TLS = &pair
	return c
}
