//go:build integration

package standalone

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testbed"
	"github.com/nodelet/nodelet/internal/testutil"
)

// TestServingFilesReloaded: a serving certificate and a client CA file
// replaced on disk take effect without a restart, as the kubelet reloads
// them: the next handshake presents the new certificate, and a client
// whose certificate only the new CA signed is then authenticated.
func TestServingFilesReloaded(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	write := func(path string, data []byte) { testutil.Must(t, os.WriteFile(path, data, 0o600)) }
	one := testutil.NewCert(t, "serving-one", nil)
	write(certFile, one.CertPEM)
	write(keyFile, one.KeyPEM)
	write(caFile, testutil.NewCert(t, "old-ca", nil).CertPEM)
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
	newCA := testutil.NewCert(t, "new-ca", nil)
	client := testutil.NewCert(t, "admin", newCA)
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{*client.TLS}}}
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

	two := testutil.NewCert(t, "serving-two", nil)
	write(keyFile, two.KeyPEM)
	write(certFile, two.CertPEM)
	write(caFile, newCA.CertPEM)
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
