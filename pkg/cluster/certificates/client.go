package certificates

import (
	"context"
	"crypto"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// ClientOptions configure the node's API credentials.
type ClientOptions struct {
	// Kubeconfig is --kubeconfig; with BootstrapKubeconfig it is written
	// when it is missing or its certificate has expired.
	Kubeconfig          string
	BootstrapKubeconfig string
	// CertDir holds kubelet-client-*.pem.
	CertDir  string
	NodeName string
	// Rotate is rotateCertificates: renew the client certificate before
	// it expires. Without it a bootstrap certificate is requested once, at
	// start, and waited for.
	Rotate bool
	// Recorder raises the node's certificate events (its sink may be
	// attached later: events wait in the broadcaster).
	Recorder record.EventRecorder
	Clock    clock.WithTicker
	// CheckPeriod is how often the certificate in use is compared with
	// the manager's (upstream: 10 s); ExitAfter how long an expired or
	// missing certificate is tolerated while the API server answers
	// before Run fails, so a restart bootstraps again (upstream: 5 min).
	CheckPeriod, ExitAfter time.Duration
}

// Client holds the node's API credentials: the client configuration
// every API client is built from, and, with rotation, the manager that
// renews its certificate and the dialer whose connections are closed when
// it changes.
type Client struct {
	o       ClientOptions
	config  *rest.Config
	manager certSource // nil without rotation
	dialer  *connrotation.Dialer
	nodeRef *v1.ObjectReference

	renewErrors prometheus.Counter
	ttl         prometheus.GaugeFunc
}

// NewClient works out the node's credentials. Without rotation, a node
// that must bootstrap requests its certificate now and waits for it
// (ctx bounds the wait); with rotation, the request goes out from Run,
// and API calls fail as unauthorized until the certificate is issued, as
// the kubelet's do.
func NewClient(ctx context.Context, o ClientOptions) (*Client, error) {
	if o.CheckPeriod <= 0 {
		o.CheckPeriod = 10 * time.Second
	}
	if o.ExitAfter <= 0 {
		o.ExitAfter = 5 * time.Minute
	}
	cfgs, err := loadClientConfigs(o.Kubeconfig, o.BootstrapKubeconfig, o.CertDir, o.Clock.Now())
	if err != nil {
		return nil, err
	}
	c := &Client{o: o, nodeRef: &v1.ObjectReference{Kind: "Node", Name: o.NodeName, UID: types.UID(o.NodeName), APIVersion: "v1"}}
	c.renewErrors = newCounter()
	if !o.Rotate {
		if cfgs.bootstrapping {
			client, err := newCSRClient(cfgs.request)
			if err != nil {
				return nil, err
			}
			if err := c.requestOnce(ctx, client); err != nil {
				return nil, err
			}
		}
		c.config = cfgs.user
		c.ttl = ttlGauge("client", o.Clock, func() *tls.Certificate { return nil })
		return c, nil
	}
	if err := c.startRotation(cfgs); err != nil {
		return nil, err
	}
	return c, nil
}

// Config is the client configuration API clients are built from (a
// copy: callers set their own rates).
func (c *Client) Config() *rest.Config { return rest.CopyConfig(c.config) }

// Collectors are the certificate metrics, under the kubelet's names.
func (c *Client) Collectors() []prometheus.Collector {
	return []prometheus.Collector{c.renewErrors, c.ttl}
}

// certSource is the certificate Run watches: the rotator, or a test's
// stand-in.
type certSource interface {
	Run(ctx context.Context) error
	Current() *tls.Certificate
	ServerHealthy() bool
}

// startRotation builds the rotator over the store in the certificate
// directory (or the kubeconfig's own certificate, which is copied into
// the store and rotated out at once, as the kubelet does with kubeadm's
// embedded one) and a transport that presents whichever certificate the
// rotator holds.
func (c *Client) startRotation(cfgs clientConfigs) error {
	user := cfgs.user
	m, err := newRotator(rotatorOptions{
		Name:  "kubelet-client",
		Store: pairStore{prefix: clientPairPrefix, dir: c.o.CertDir, certFile: user.CertFile, keyFile: user.KeyFile, clock: c.o.Clock},
		Template: func() *x509.CertificateRequest {
			return &x509.CertificateRequest{Subject: nodeSubject(c.o.NodeName)}
		},
		Signer: ClientSignerName, Auth: certificatesv1.UsageClientAuth,
		CSRs: func(current *tls.Certificate) (CSRs, error) {
			// With a certificate, renew with it; without one, with the
			// bootstrap credentials.
			if current != nil {
				return newCSRClient(c.Config())
			}
			return newCSRClient(cfgs.request)
		},
		BootstrapCert: user.CertData, BootstrapKey: user.KeyData,
		Failed: func(error) { c.renewErrors.Inc(); c.renewalFailed() },
		Clock:  c.o.Clock,
	})
	if err != nil {
		return fmt.Errorf("client certificate: %w", err)
	}
	c.manager = m
	c.ttl = ttlGauge("client", c.o.Clock, m.Current)
	c.dialer = connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	c.config, err = rotatingConfig(user, m, c.dialer)
	return err
}

// rotatingConfig is cfg without its credentials, over a transport that
// presents the manager's current certificate at every handshake and
// dials through d, whose connections are closed when it changes.
func rotatingConfig(cfg *rest.Config, m certSource, d *connrotation.Dialer) (*rest.Config, error) {
	// Without its credentials: the certificate files may not exist yet.
	out := rest.AnonymousClientConfig(cfg)
	tlsConfig, err := rest.TLSConfigFor(out)
	if err != nil {
		return nil, fmt.Errorf("TLS configuration for the API server: %w", err)
	}
	if tlsConfig == nil {
		tlsConfig = &tls.Config{}
	}
	tlsConfig.Certificates = nil
	tlsConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if cert := m.Current(); cert != nil {
			return cert, nil
		}
		return &tls.Certificate{}, nil // none yet: the server sees an anonymous client
	}
	out.Transport = utilnet.SetTransportDefaults(&http.Transport{
		Proxy: http.ProxyFromEnvironment, TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig: tlsConfig, MaxIdleConnsPerHost: 25, DialContext: d.DialContext,
	})
	// The transport enforces TLS itself.
	out.CAData, out.CAFile, out.Insecure, out.NextProtos = nil, "", false, nil
	return out, nil
}

// Run renews the certificate until ctx ends (with rotation), closing every
// API connection when the certificate changes, so requests go out with
// the new one at once. It fails when the certificate has expired (or
// vanished) for ExitAfter while the API server answers: a restart then
// bootstraps again, as the kubelet exits to do.
func (c *Client) Run(ctx context.Context) error {
	if c.manager == nil {
		<-ctx.Done()
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	rotation := make(chan error, 1)
	go func() { rotation <- c.manager.Run(ctx) }()
	defer func() { cancel(); <-rotation }()
	last := c.manager.Current()
	lastGood := c.o.Clock.Now()
	for {
		period := c.o.CheckPeriod
		if last == nil {
			period = time.Second // until the first certificate, look often
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.o.Clock.After(period):
		}
		cur := c.manager.Current()
		now := c.o.Clock.Now()
		if cur != nil && now.Before(cur.Leaf.NotAfter) {
			lastGood = now
		} else if now.Sub(lastGood) > c.o.ExitAfter && c.manager.ServerHealthy() {
			return fmt.Errorf("no valid client certificate for %v while the API server answers: restart to bootstrap again", c.o.ExitAfter)
		}
		if cur != nil && cur != last {
			last = cur
			c.rotated(cur)
		}
	}
}

// rotated moves the API clients to the new certificate.
func (c *Client) rotated(cur *tls.Certificate) {
	klog.InfoS("Client certificate rotated: closing the API connections that use the old one", "node", c.o.NodeName,
		"notAfter", cur.Leaf.NotAfter.UTC().Format(time.RFC3339))
	c.dialer.CloseAll()
	c.o.Recorder.Eventf(c.nodeRef, v1.EventTypeNormal, "ClientCertificateRotated",
		"Node %s now authenticates with a new client certificate, valid until %s", c.o.NodeName, cur.Leaf.NotAfter.UTC().Format(time.RFC3339))
}

func (c *Client) renewalFailed() {
	klog.ErrorS(nil, "Renewing the node's client certificate failed; retrying with back-off", "node", c.o.NodeName)
	c.o.Recorder.Eventf(c.nodeRef, v1.EventTypeWarning, "ClientCertificateRenewalFailed",
		"Renewing the client certificate of node %s through the CSR API failed; retrying with back-off (nodelet's log has the reason)", c.o.NodeName)
}

func ttlGauge(which string, clk clock.PassiveClock, current func() *tls.Certificate) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Subsystem: "kubelet", Name: "certificate_manager_" + which + "_ttl_seconds",
		Help: "Seconds until the " + which + " certificate expires (negative once expired); +Inf when there is none or it is not managed.",
	}, func() float64 {
		if cert := current(); cert != nil && cert.Leaf != nil {
			return math.Trunc(cert.Leaf.NotAfter.Sub(clk.Now()).Seconds())
		}
		return math.Inf(1)
	})
}

func newCounter() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "kubelet", Subsystem: "certificate_manager", Name: "client_expiration_renew_errors",
		Help: "Counter of certificate renewal errors.",
	})
}

func nodeSubject(nodeName string) pkix.Name {
	return pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}}
}

// tmpKeyFile keeps a bootstrap request's key until its certificate is
// issued, so a restart while waiting asks again with the same key (and
// finds the same request).
const tmpKeyFile = "kubelet-client.key.tmp"

// requestOnce obtains the client certificate with the bootstrap
// credentials and stores it, retrying with back-off until ctx ends.
func (c *Client) requestOnce(ctx context.Context, client CSRs) error {
	keyPath := filepath.Join(c.o.CertDir, tmpKeyFile)
	keyPEM, _, err := keyutil.LoadOrGenerateKeyFile(keyPath)
	if err != nil {
		return fmt.Errorf("bootstrap key: %w", err)
	}
	backoff := retryBackoff()
	var certPEM []byte
	for {
		if certPEM, err = requestNodeCertificate(ctx, client, c.o.Clock, keyPEM, c.o.NodeName); err == nil {
			break
		}
		c.renewErrors.Inc()
		klog.ErrorS(err, "Requesting the node's client certificate failed; retrying", "node", c.o.NodeName)
		select {
		case <-ctx.Done():
			return fmt.Errorf("bootstrapping the client certificate: %w", err)
		case <-c.o.Clock.After(backoff.Step()):
		}
	}
	store := pairStore{prefix: clientPairPrefix, dir: c.o.CertDir, clock: c.o.Clock}
	if _, err := store.update(certPEM, keyPEM); err != nil {
		return fmt.Errorf("storing the client certificate: %w", err)
	}
	if err := os.Remove(keyPath); err != nil && !os.IsNotExist(err) {
		klog.ErrorS(err, "Removing the bootstrap key file", "path", keyPath)
	}
	return nil
}

// requestNodeCertificate sends a CSR for the node's client identity,
// named after its contents as the kubelet names it (so asking again finds
// the same request), and waits up to an hour for the certificate.
func requestNodeCertificate(ctx context.Context, client CSRs, clk clock.Clock, keyPEM []byte, nodeName string) ([]byte, error) {
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("bootstrap key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.New("bootstrap key cannot sign")
	}
	subject := nodeSubject(nodeName)
	csrPEM, err := certutil.MakeCSR(key, &subject, nil, nil)
	if err != nil {
		return nil, err
	}
	usages := keyUsages(key, certificatesv1.UsageClientAuth)
	name, err := digestedName(signer.Public(), subject, usages)
	if err != nil {
		return nil, err
	}
	reqName, reqUID, err := submit(ctx, client, csrRequest{name: name, signer: ClientSignerName, csrPEM: csrPEM, usages: usages, key: signer})
	if err != nil {
		return nil, err
	}
	klog.InfoS("Waiting for the node's client certificate to be issued", "csr", reqName)
	ctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	return awaitCertificate(ctx, client, clk, reqName, reqUID)
}

// digestedName is "node-csr-" and a hash of the request's public key,
// subject and usages, each encoded and delimited so no two inputs hash
// alike.
func digestedName[U ~string](pub crypto.PublicKey, subject pkix.Name, usages []U) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	h := sha512.New512_256()
	write := func(b []byte) {
		h.Write([]byte(base64.RawURLEncoding.EncodeToString(b)))
		h.Write([]byte{'|'})
	}
	write(der)
	write([]byte(subject.CommonName))
	for _, o := range subject.Organization {
		write([]byte(o))
	}
	for _, u := range usages {
		write([]byte(u))
	}
	return "node-csr-" + base64.RawURLEncoding.EncodeToString(h.Sum(nil)), nil
}
