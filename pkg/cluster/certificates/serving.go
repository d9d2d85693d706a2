package certificates

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// ServingOptions configure the serving certificate from the CSR API.
type ServingOptions struct {
	// CSRs is the CSR API, with the node's own credentials.
	CSRs     CSRs
	NodeName string
	// Addresses are the node's addresses as last reported; the
	// certificate names its hostnames and IPs, and is requested again
	// when they change. Until there is an IP, nothing is requested.
	Addresses func() []v1.NodeAddress
	CertDir   string
	// CertFile and KeyFile (tlsCertFile, tlsPrivateKeyFile), when set,
	// serve until a certificate is issued, as the kubelet's store falls
	// back to them.
	CertFile, KeyFile string
	Clock             clock.Clock
}

// Serving is the kubelet API's certificate from a kubernetes.io/kubelet-serving
// CSR (serverTLSBootstrap). Such requests are not approved automatically:
// until an administrator (or an approver the cluster runs) approves one,
// TLS handshakes fail for want of a certificate, as the kubelet's do.
type Serving struct {
	manager     *rotator
	renewErrors prometheus.Counter
	ttl         prometheus.GaugeFunc
}

// NewServing sets up the serving certificate manager over the store
// <cert-dir>/kubelet-server-current.pem.
func NewServing(o ServingOptions) (*Serving, error) {
	s := &Serving{renewErrors: prometheus.NewCounter(prometheus.CounterOpts{
		Subsystem: "kubelet", Name: "server_expiration_renew_errors", Help: "Counter of certificate renewal errors.",
	})}
	var err error
	s.manager, err = newRotator(rotatorOptions{
		Name:     "kubelet-serving",
		Store:    pairStore{prefix: servingPairPrefix, dir: o.CertDir, certFile: o.CertFile, keyFile: o.KeyFile, clock: o.Clock},
		Template: func() *x509.CertificateRequest { return servingTemplate(o.NodeName, o.Addresses()) },
		Dynamic:  true,
		Signer:   certificatesv1.KubeletServingSignerName, Auth: certificatesv1.UsageServerAuth,
		CSRs:   func(*tls.Certificate) (CSRs, error) { return o.CSRs, nil },
		Failed: func(error) { s.renewErrors.Inc() },
		Clock:  o.Clock,
	})
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	s.ttl = ttlGauge("server", o.Clock, s.manager.Current)
	return s, nil
}

// Current is the serving certificate, nil until one is issued.
func (s *Serving) Current() *tls.Certificate { return s.manager.Current() }

// Collectors are the serving certificate's metrics.
func (s *Serving) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.renewErrors, s.ttl}
}

// Run requests and renews the certificate until ctx ends.
func (s *Serving) Run(ctx context.Context) error { return s.manager.Run(ctx) }

// servingTemplate is the request for the node's serving certificate: its
// hostnames as DNS names and its IPs, sorted, or nil while it has no IP.
func servingTemplate(nodeName string, addrs []v1.NodeAddress) *x509.CertificateRequest {
	var dns []string
	var ips []net.IP
	seen := map[string]bool{}
	for _, a := range addrs {
		if a.Address == "" || seen[a.Address] {
			continue
		}
		seen[a.Address] = true
		ip := net.ParseIP(a.Address)
		switch {
		case ip != nil && (a.Type == v1.NodeHostName || a.Type == v1.NodeInternalIP || a.Type == v1.NodeExternalIP):
			ips = append(ips, ip)
		case ip == nil && (a.Type == v1.NodeHostName || a.Type == v1.NodeInternalDNS || a.Type == v1.NodeExternalDNS):
			dns = append(dns, a.Address)
		}
	}
	if len(ips) == 0 {
		return nil
	}
	slices.Sort(dns)
	slices.SortFunc(ips, func(a, b net.IP) int { return strings.Compare(a.String(), b.String()) })
	return &x509.CertificateRequest{Subject: nodeSubject(nodeName), DNSNames: dns, IPAddresses: ips}
}
