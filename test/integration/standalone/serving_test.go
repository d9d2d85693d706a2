//go:build integration

package standalone

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testbed"
	"github.com/nodelet/nodelet/internal/testutil"
)

// pemPair makes a key and a certificate for cn signed by parent (itself,
// and then a CA, when parent is nil), as PEM, and the parsed pair.
func pemPair(t *testing.T, cn string, parent *tls.Certificate) (certPEM, keyPEM []byte, pair *tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	testutil.Must(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	signer, signerKey := tmpl, any(key)
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	} else {
		signer, signerKey = parent.Leaf, parent.PrivateKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	testutil.Must(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	testutil.Must(t, err)
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	p, err := tls.X509KeyPair(certPEM, keyPEM)
	testutil.Must(t, err)
	p.Leaf, err = x509.ParseCertificate(der)
	testutil.Must(t, err)
	return certPEM, keyPEM, &p
}

// TestServingFilesReloaded: a serving certificate and a client CA file
// replaced on disk take effect without a restart, as the kubelet reloads
// them: the next handshake presents the new certificate, and a client
// whose certificate only the new CA signed is then authenticated.
func TestServingFilesReloaded(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	write := func(path string, data []byte) { testutil.Must(t, os.WriteFile(path, data, 0o600)) }
	c1, k1, _ := pemPair(t, "serving-one", nil)
	write(certFile, c1)
	write(keyFile, k1)
	oldCA, _, _ := pemPair(t, "old-ca", nil)
	write(caFile, oldCA)
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{ExtraConfig: fmt.Sprintf(`tlsCertFile: %s
tlsPrivateKeyFile: %s
authentication:
  x509: {clientCAFile: %s}
authorization: {mode: AlwaysAllow}
`, certFile, keyFile, caFile)})
	addr := fmt.Sprintf("127.0.0.1:%d", n.APIPort)
	served := func() string {
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			return err.Error()
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if cn := served(); cn != "serving-one" {
		t.Fatalf("served %q", cn)
	}
	newCAPEM, _, newCA := pemPair(t, "new-ca", nil)
	clientPEM, clientKey, _ := pemPair(t, "admin", newCA)
	client, err := tls.X509KeyPair(clientPEM, clientKey)
	testutil.Must(t, err)
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{client}}}
	defer tr.CloseIdleConnections()
	status := func() int {
		tr.CloseIdleConnections() // a new handshake each time
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + addr + "/pods")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := status(); s != http.StatusUnauthorized {
		t.Fatalf("a client the configured CA did not sign got %d", s)
	}

	c2, k2, _ := pemPair(t, "serving-two", nil)
	write(keyFile, k2)
	write(certFile, c2)
	write(caFile, newCAPEM)
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		cn := served()
		return cn == "serving-two", "still serving " + cn
	})
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		s := status()
		return s == http.StatusOK, fmt.Sprintf("HTTP %d", s)
	})
	// A broken file is reported, and the good certificate stays.
	write(certFile, []byte("not a certificate"))
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		return strings.Contains(n.Log(), "CertificateFileInvalid"), "a broken certificate file was not reported"
	})
	if cn := served(); cn != "serving-two" {
		t.Fatalf("after a broken file: %q", cn)
	}
}

// TestJSONLogging: logging.format json (component-base's JSON logger)
// makes every log line a JSON object.
func TestJSONLogging(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{ExtraConfig: "logging:\n  format: json\n"})
	var found bool
	for _, line := range strings.Split(strings.TrimSpace(n.Log()), "\n") {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		if entry["msg"] == "Starting nodelet" {
			found = entry["node"] == n.NodeName
		}
	}
	if !found {
		t.Fatalf("no JSON \"Starting nodelet\" entry naming the node:\n%s", n.LogTail(10))
	}
}
