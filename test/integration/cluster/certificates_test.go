//go:build integration

package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// TestClientCertificateRotation: a node whose client certificate is past
// the point of renewal (70–90% of its lifetime) and expires 45 s from now
// renews it through the CSR API with the certificate itself (approved as
// a node renewing its own), stores the new one as the kubelet does, moves
// its API connections to it, and keeps reporting past the old one's
// expiry.
func TestClientCertificateRotation(t *testing.T) {
	const name = "node-rotation"
	if err := cl.AllowNodeCSRs(context.Background()); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certDir := filepath.Join(dir, "pki")
	expiry := time.Now().Add(45 * time.Second)
	certPEM, keyPEM, err := cl.NodeCertificate(name, time.Now().Add(-10*time.Minute), expiry)
	if err != nil {
		t.Fatal(err)
	}
	// As a bootstrapped node keeps it: a timestamped pair and the
	// current link, which the kubeconfig names.
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		t.Fatal(err)
	}
	first := filepath.Join(certDir, "kubelet-client-2026-01-01-00-00-00.pem")
	if err := os.WriteFile(first, append(certPEM, keyPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	current := filepath.Join(certDir, "kubelet-client-current.pem")
	if err := os.Symlink(first, current); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(cl.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubelet.conf")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: %s, certificate-authority-data: %s}
users:
- name: u
  user: {client-certificate: %s, client-key: %s}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`, cl.APIServer(), base64.StdEncoding.EncodeToString(ca), current, current)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cl.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting node %s: %v", name, err)
		}
	})
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{NodeName: name, Kubeconfig: kubeconfig, CgroupRoot: testbed.CgroupRoot() + "/" + name,
		Address: "0.0.0.0", Args: []string{"--cert-dir", certDir},
		ExtraConfig: fmt.Sprintf("rotateCertificates: true\nauthentication:\n  x509:\n    clientCAFile: %s\n", cl.CAFile())})
	waitNodeReady(t, name, time.Minute)

	testbed.Eventually(t, time.Minute, func() (bool, string) {
		target, err := os.Readlink(current)
		return err == nil && target != first, fmt.Sprintf("current still %s (%v)", target, err)
	})
	renewals := clientCSRs(t, name)
	if len(renewals) != 1 || renewals[0].Spec.Username != "system:node:"+name || !approved(renewals[0]) {
		t.Fatalf("want one approved renewal asked by the node itself, got %+v", renewals)
	}
	pair, err := tls.LoadX509KeyPair(current, current)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || !leaf.NotAfter.After(expiry) || leaf.Subject.CommonName != "system:node:"+name {
		t.Fatalf("new certificate %v for %s (%v)", leaf.NotAfter, leaf.Subject.CommonName, err)
	}
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		return strings.Contains(n.Log(), "Client certificate rotated"), "the rotation was not logged"
	})

	// Past the old certificate's expiry the node still renews its lease.
	lease := func() time.Time {
		l, err := cl.Client.CoordinationV1().Leases("kube-node-lease").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			return time.Time{}
		}
		return l.Spec.RenewTime.Time
	}
	testbed.Eventually(t, time.Until(expiry)+30*time.Second, func() (bool, string) {
		return lease().After(expiry.Add(time.Second)), fmt.Sprintf("lease renewed last at %v, the old certificate expires at %v", lease(), expiry)
	})
	waitNodeReady(t, name, 10*time.Second)
	if strings.Contains(n.Log(), "x509: certificate has expired") {
		t.Error("a request went out with the expired certificate")
	}
}

// TestServingCertificateFromCSR: with serverTLSBootstrap, the kubelet API
// serves nothing until its kubernetes.io/kubelet-serving request, for the
// node's name and address, is approved; then it serves the issued
// certificate, and kubectl logs works through it.
func TestServingCertificateFromCSR(t *testing.T) {
	ns := namespace(t)
	const name = "node-serving"
	n := startNode(t, name, cd, "serverTLSBootstrap: true\n")
	var csr certificatesv1.CertificateSigningRequest
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		list, err := cl.Client.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range list.Items {
			if c.Spec.SignerName == certificatesv1.KubeletServingSignerName && c.Spec.Username == "system:node:"+name {
				csr = c
				return true, ""
			}
		}
		return false, "no serving CSR"
	})
	req := parseRequest(t, csr)
	node := waitNodeReady(t, name, time.Minute)
	var internal string
	for _, a := range node.Status.Addresses {
		if a.Type == v1.NodeInternalIP {
			internal = a.Address
		}
	}
	if req.Subject.CommonName != "system:node:"+name || fmt.Sprint(req.DNSNames) != "["+name+"]" || len(req.IPAddresses) != 1 || req.IPAddresses[0].String() != internal {
		t.Fatalf("serving request for %v, DNS %v, IPs %v; want the node's name and address %s", req.Subject, req.DNSNames, req.IPAddresses, internal)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(n.APIPort))
	if _, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}); err == nil {
		t.Fatal("the kubelet API served a certificate before its request was approved")
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: v1.ConditionTrue, Reason: "TestApproved", Message: "approved by the test"})
	if _, err := cl.Client.CertificatesV1().CertificateSigningRequests().UpdateApproval(context.Background(), csr.Name, &csr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(cl.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		conn, err := tls.Dial("tcp", net.JoinHostPort(internal, strconv.Itoa(n.APIPort)), &tls.Config{RootCAs: roots, ServerName: internal})
		if err != nil {
			return false, err.Error()
		}
		defer conn.Close()
		cn := conn.ConnectionState().PeerCertificates[0].Subject.CommonName
		return cn == "system:node:"+name, "served certificate for " + cn
	})
	pod := busyboxPod("logger", name, "sh", "-c", "echo served; sleep 3600")
	if _, err := cl.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, time.Minute, ns, "logger", running)
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		out, err := cl.Kubectl(context.Background(), "logs", "-n", ns, "logger")
		return err == nil && strings.Contains(out, "served"), fmt.Sprintf("kubectl logs: %v %s", err, out)
	})
}

func parseRequest(t *testing.T, c certificatesv1.CertificateSigningRequest) *x509.CertificateRequest {
	t.Helper()
	req, err := csrRequest(c)
	if err != nil {
		t.Fatalf("CSR %s: %v", c.Name, err)
	}
	return req
}

// TestBootstrapWithoutRotation: without rotateCertificates, a node with a
// bootstrap kubeconfig waits at start for its client certificate, then
// runs with the kubeconfig it wrote; a restart reuses that certificate.
func TestBootstrapWithoutRotation(t *testing.T) {
	const name = "node-bootstrap"
	dir := t.TempDir()
	boot, err := cl.BootstrapKubeconfig(context.Background(), "bootstrap-"+name+".conf")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubelet.conf")
	t.Cleanup(func() {
		if err := cl.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting node %s: %v", name, err)
		}
	})
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{NodeName: name, Kubeconfig: kubeconfig, CgroupRoot: testbed.CgroupRoot() + "/" + name,
		Address: "0.0.0.0", Args: []string{"--bootstrap-kubeconfig", boot, "--cert-dir", filepath.Join(dir, "pki")},
		ExtraConfig: fmt.Sprintf("authentication:\n  x509:\n    clientCAFile: %s\n", cl.CAFile())})
	waitNodeReady(t, name, time.Minute)
	if csrs := clientCSRs(t, name); len(csrs) != 1 || !approved(csrs[0]) {
		t.Fatalf("want one approved bootstrap request, got %+v", csrs)
	}
	written, err := os.ReadFile(kubeconfig)
	if err != nil || !strings.Contains(string(written), filepath.Join(dir, "pki", "kubelet-client-current.pem")) {
		t.Fatalf("kubeconfig (%v):\n%s", err, written)
	}
	n.Stop()
	n.Start()
	waitNodeReady(t, name, time.Minute)
	if csrs := clientCSRs(t, name); len(csrs) != 1 {
		t.Fatalf("the restart asked for another certificate: %d requests", len(csrs))
	}
}
