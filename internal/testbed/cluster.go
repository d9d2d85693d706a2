package testbed

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Cluster is an upstream control plane on loopback ports: etcd, the
// kube-apiserver, the kube-controller-manager and the kube-scheduler,
// built by hack/cluster/build.sh. Clients authenticate with certificates
// signed by the cluster's own CA; nodes get system:node:<name> identities
// so the Node authorizer and NodeRestriction apply to nodelet as they
// would to a kubelet.
type Cluster struct {
	Dir     string
	BinDir  string
	APIPort int
	// AdminKubeconfig is a cluster-admin kubeconfig.
	AdminKubeconfig string
	Client          kubernetes.Interface

	ca      *x509.Certificate
	caKey   *rsa.PrivateKey
	etcdURL string
	peerURL string
	procs   map[string]*process
	opts    ClusterOptions
}

// ClusterOptions tune a test control plane.
type ClusterOptions struct {
	// SigningDuration is how long the certificates the controller manager
	// issues through the CSR API last (--cluster-signing-duration); 0 is
	// its default, a year.
	SigningDuration time.Duration
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// ClusterBinaries builds (or finds cached) the control plane and returns
// the directory holding it.
func ClusterBinaries() (string, error) {
	out, err := exec.Command("bash", filepath.Join(RepoRoot(), "hack", "cluster", "build.sh")).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("building the control plane: %v: %s", err, ee.Stderr)
		}
		return "", fmt.Errorf("building the control plane: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// WithCluster is a set-up for Main: it starts a control plane in a
// fresh directory /var/lib/<prefix>*, stores it in *cl, and its clean-up
// stops it and removes the directory.
func WithCluster(cl **Cluster, prefix string) func(ctx context.Context) (func(), error) {
	return func(ctx context.Context) (func(), error) {
		dir, err := os.MkdirTemp("/var/lib", prefix)
		if err != nil {
			return nil, err
		}
		if *cl, err = StartCluster(ctx, dir); err != nil {
			return func() { RemoveDir(dir) }, err
		}
		return func() {
			(*cl).Stop()
			RemoveDir(dir)
		}, nil
	}
}

// StartCluster starts a control plane in a fresh directory under dir
// and waits until the API server is ready and the default service
// account exists.
func StartCluster(ctx context.Context, dir string) (*Cluster, error) {
	return StartClusterWith(ctx, dir, ClusterOptions{})
}

// StartClusterWith starts a control plane with options.
func StartClusterWith(ctx context.Context, dir string, opts ClusterOptions) (*Cluster, error) {
	bin, err := ClusterBinaries()
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("etcd"); err != nil {
		return nil, fmt.Errorf("etcd not found: run hack/setup.sh --cluster first")
	}
	c := &Cluster{Dir: dir, BinDir: bin, procs: map[string]*process{}, opts: opts}
	if err := c.start(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) path(name string) string { return filepath.Join(c.Dir, name) }

func (c *Cluster) start(ctx context.Context) error {
	if err := os.MkdirAll(c.path("pki"), 0o700); err != nil {
		return err
	}
	if err := c.makePKI(); err != nil {
		return err
	}
	ports, err := freePorts(5)
	if err != nil {
		return err
	}
	c.APIPort = ports[0]
	c.etcdURL = fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	c.peerURL = fmt.Sprintf("http://127.0.0.1:%d", ports[2])
	if err := c.StartEtcd(); err != nil {
		return err
	}
	if err := c.StartAPIServer(ctx); err != nil {
		return err
	}
	admin, err := c.Kubeconfig("admin", "kubernetes-admin", "system:masters")
	if err != nil {
		return err
	}
	c.AdminKubeconfig = admin
	cfg, err := clientcmd.BuildConfigFromFlags("", admin)
	if err != nil {
		return err
	}
	if c.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	// As kubeadm runs it: signing and approving nodes' CSRs, and the
	// bootstrap token controllers.
	cm := []string{"--kubeconfig", admin, "--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(ports[3]),
		"--service-account-private-key-file", c.path("pki/sa.key"), "--root-ca-file", c.path("pki/ca.crt"),
		"--use-service-account-credentials", "--cluster-signing-cert-file", c.path("pki/ca.crt"),
		"--cluster-signing-key-file", c.path("pki/ca.key"), "--controllers", "*,bootstrapsigner,tokencleaner"}
	if c.opts.SigningDuration > 0 {
		cm = append(cm, "--cluster-signing-duration", c.opts.SigningDuration.String())
	}
	if err := c.spawn("kube-controller-manager", filepath.Join(c.BinDir, "kube-controller-manager"), cm...); err != nil {
		return err
	}
	if err := c.spawn("kube-scheduler", filepath.Join(c.BinDir, "kube-scheduler"),
		"--kubeconfig", admin, "--authentication-kubeconfig", admin, "--authorization-kubeconfig", admin,
		"--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(ports[4])); err != nil {
		return err
	}
	// Pods can only be created once the namespace's default service
	// account exists: wait for the controller manager to make it.
	return c.wait(ctx, 2*time.Minute, "the default service account", func() error {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// StartEtcd (re)starts etcd on its data directory; the API server waits
// for it.
func (c *Cluster) StartEtcd() error {
	return c.spawn("etcd", "etcd", "--name", "default", "--data-dir", c.path("etcd"),
		"--listen-client-urls", c.etcdURL, "--advertise-client-urls", c.etcdURL,
		"--listen-peer-urls", c.peerURL, "--initial-advertise-peer-urls", c.peerURL,
		"--initial-cluster", "default="+c.peerURL)
}

// StopEtcd stops etcd (stop the API server first).
func (c *Cluster) StopEtcd() { c.stopProc("etcd") }

// StartAPIServer (re)starts the API server on its port and waits until it
// is ready.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	if p := c.procs["kube-apiserver"]; p != nil {
		select {
		case <-p.done:
		default:
			return errors.New("the API server is running")
		}
	}
	if err := c.spawn("kube-apiserver", filepath.Join(c.BinDir, "kube-apiserver"),
		"--etcd-servers", c.etcdURL, "--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(c.APIPort),
		"--advertise-address", hostIP(), "--tls-cert-file", c.path("pki/apiserver.crt"), "--tls-private-key-file", c.path("pki/apiserver.key"),
		"--client-ca-file", c.path("pki/ca.crt"), "--enable-bootstrap-token-auth",
		"--requestheader-client-ca-file", c.path("pki/front-proxy-ca.crt"), "--requestheader-allowed-names", "front-proxy-client",
		"--requestheader-extra-headers-prefix", "X-Remote-Extra-", "--requestheader-group-headers", "X-Remote-Group",
		"--requestheader-username-headers", "X-Remote-User", "--enable-aggregator-routing",
		"--proxy-client-cert-file", c.path("pki/front-proxy-client.crt"), "--proxy-client-key-file", c.path("pki/front-proxy-client.key"),
		"--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", c.path("pki/sa.key"), "--service-account-signing-key-file", c.path("pki/sa.key"),
		"--api-audiences", "https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range", "10.0.0.0/24", "--allow-privileged",
		"--kubelet-client-certificate", c.path("pki/apiserver-kubelet-client.crt"),
		"--kubelet-client-key", c.path("pki/apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types", "InternalIP,Hostname",
		"--endpoint-reconciler-type", "none"); err != nil {
		return err
	}
	tr := &http.Transport{TLSClientConfig: insecureTLS()}
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	defer tr.CloseIdleConnections()
	url := fmt.Sprintf("https://127.0.0.1:%d/readyz", c.APIPort)
	return c.wait(ctx, 2*time.Minute, "the API server", func() error {
		resp, err := hc.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %s", resp.Status)
		}
		return nil
	})
}

// CAFile is the cluster CA, which signs every client certificate (the API
// server's to kubelets included).
func (c *Cluster) CAFile() string { return c.path("pki/ca.crt") }

// StopAPIServer stops the API server (and leaves everything else running).
func (c *Cluster) StopAPIServer() { c.stopProc("kube-apiserver") }

// APIServer is the API server's URL.
func (c *Cluster) APIServer() string { return fmt.Sprintf("https://127.0.0.1:%d", c.APIPort) }

// NodeKubeconfig writes a kubeconfig for node name, with the identity a
// kubelet has (system:node:<name> in group system:nodes).
func (c *Cluster) NodeKubeconfig(name string) (string, error) {
	return c.Kubeconfig("node-"+name, "system:node:"+name, "system:nodes")
}

// Kubectl runs kubectl as the admin.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, "kubectl"), append([]string{"--kubeconfig", c.AdminKubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Stop stops every process, in reverse start order, and removes the
// directory's data.
func (c *Cluster) Stop() {
	for _, name := range []string{"metrics-server", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		c.stopProc(name)
	}
}

func (c *Cluster) stopProc(name string) {
	p := c.procs[name]
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM) // fails only when it has already exited
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill() // fails only when it has already exited
		<-p.done
	}
}

// spawn starts a control-plane process logging to <dir>/<name>.log.
func (c *Cluster) spawn(name, bin string, args ...string) error {
	logf, err := os.OpenFile(c.path(name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // a control-plane process's exit shows in its log
		logf.Close()
		close(p.done)
	}()
	c.procs[name] = p
	return nil
}

// wait polls check until it succeeds, a process died, or the timeout.
func (c *Cluster) wait(ctx context.Context, timeout time.Duration, what string, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		for name, p := range c.procs {
			select {
			case <-p.done:
				if name != "kube-apiserver" || what == "the API server" {
					return fmt.Errorf("%s exited while waiting for %s; see %s", name, what, c.path(name+".log"))
				}
			default:
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		time.Sleep(200 * time.Millisecond) // poll interval
	}
}

// Log returns a control-plane process's log.
func (c *Cluster) Log(name string) string {
	b, _ := os.ReadFile(c.path(name + ".log"))
	return string(b)
}

// Kubeconfig writes <dir>/<file>.kubeconfig with a client certificate for
// user in groups.
func (c *Cluster) Kubeconfig(file, user string, groups ...string) (string, error) {
	certPEM, keyPEM, err := c.sign(user, groups, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return "", err
	}
	b64 := base64.StdEncoding.EncodeToString
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: nodelet
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: nodelet
  context: {cluster: nodelet, user: %s}
current-context: nodelet
`, c.APIServer(), user, b64(certPEM), b64(keyPEM), user)
	p := c.path(file + ".kubeconfig")
	return p, os.WriteFile(p, []byte(cfg), 0o600)
}

// makePKI creates the cluster CA, the service-account signing key and the
// API server's client certificate for talking to kubelets.
func (c *Cluster) makePKI() error {
	var caPEM, keyPEM []byte
	var err error
	if c.ca, c.caKey, caPEM, keyPEM, err = newCA("nodelet-test-ca"); err != nil {
		return err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"pki/ca.crt": caPEM,
		"pki/ca.key": keyPEM,
		"pki/sa.key": pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)),
	}
	// The aggregation layer's front proxy: its own CA, and the client
	// certificate the API server proxies to extension servers
	// (metrics-server) with, as kubeadm sets them up.
	proxyCA, proxyKey, proxyCAPEM, _, err := newCA("front-proxy-ca")
	if err != nil {
		return err
	}
	files["pki/front-proxy-ca.crt"] = proxyCAPEM
	if files["pki/front-proxy-client.crt"], files["pki/front-proxy-client.key"], err = issueWith(proxyCA, proxyKey, &x509.Certificate{
		Subject: pkix.Name{CommonName: "front-proxy-client"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return err
	}
	crt, k, err := c.sign("kube-apiserver-kubelet-client", []string{"system:masters"}, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	files["pki/apiserver-kubelet-client.crt"], files["pki/apiserver-kubelet-client.key"] = crt, k
	// The API server's serving certificate, from the cluster CA, so a
	// bootstrap kubeconfig can trust it as kubeadm's does.
	if crt, k, err = c.signServing("kube-apiserver", []string{"localhost", "kubernetes", "kubernetes.default"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(hostIP())}); err != nil {
		return err
	}
	files["pki/apiserver.crt"], files["pki/apiserver.key"] = crt, k
	for name, data := range files {
		if err := os.WriteFile(c.path(name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// signServing issues a serving certificate from the cluster CA.
func (c *Cluster) signServing(cn string, dns []string, ips []net.IP) (certPEM, keyPEM []byte, err error) {
	return c.issue(&x509.Certificate{Subject: pkix.Name{CommonName: cn}, DNSNames: dns, IPAddresses: ips,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
}

// issue signs tmpl (its serial filled in) for a new key with the CA.
func (c *Cluster) issue(tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	return issueWith(c.ca, c.caKey, tmpl)
}

func issueWith(ca *x509.Certificate, caKey *rsa.PrivateKey, tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, err
	}
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, big.NewInt(1<<62)); err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)), nil
}

// newCA makes a self-signed CA.
func newCA(cn string) (*x509.Certificate, *rsa.PrivateKey, []byte, []byte, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return cert, key, pemBlock("CERTIFICATE", der), pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)), nil
}

func (c *Cluster) sign(cn string, orgs []string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte, err error) {
	return c.issue(&x509.Certificate{
		Subject: pkix.Name{CommonName: cn, Organization: orgs}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	})
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func freePorts(n int) ([]int, error) {
	var out []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for tries := 0; len(out) < n; tries++ {
		if tries == 1000 {
			return nil, fmt.Errorf("no %d free ports in %d-%d", n, portsFrom, portsTo)
		}
		// Below the kernel's ephemeral range (32768-60999): a port from
		// :0 is one that outgoing connections take too, and one did take
		// a test nodelet's port before it listened. Held until all n are
		// chosen, so they differ.
		port := portsFrom + mrand.IntN(portsTo-portsFrom)
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			continue
		}
		ls = append(ls, l)
		out = append(out, port)
	}
	return out, nil
}

// portsFrom and portsTo bound the ports tests serve on.
const portsFrom, portsTo = 20000, 32000

// HostIP is the machine's primary address.
func HostIP() string { return hostIP() }

// hostIP is the machine's primary address, which the API server
// advertises (it refuses loopback addresses for its endpoints).
func hostIP() string {
	conn, err := net.Dial("udp", "192.0.2.1:9") // no packet is sent
	if err == nil {
		defer conn.Close()
		if a, ok := conn.LocalAddr().(*net.UDPAddr); ok && !a.IP.IsLoopback() {
			return a.IP.String()
		}
	}
	return "10.255.255.1"
}

// insecureTLS trusts the API server's self-signed serving certificate.
func insecureTLS() *tls.Config { return &tls.Config{InsecureSkipVerify: true} }
