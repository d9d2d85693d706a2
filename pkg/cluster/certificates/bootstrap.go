// Package certificates obtains and renews nodelet's certificates, as the
// kubelet does:
//
//   - the client certificate the node authenticates to the API server
//     with: obtained through the CSR API with bootstrap credentials (TLS
//     bootstrapping) when the kubeconfig is missing or expired, renewed at
//     70–90% of its lifetime (rotateCertificates), every API connection
//     moved to the new one;
//   - the kubelet API's serving certificate: a kubernetes.io/kubelet-serving
//     CSR for the node's names and addresses (serverTLSBootstrap), renewed
//     the same way;
//   - certificate files an administrator manages (tlsCertFile and
//     tlsPrivateKeyFile, the client CA file), reloaded when they change.
//
// Requesting, waiting for and storing certificates is nodelet's own
// rotator (rotator.go), over a client of the CSR API alone: client-go's
// certificate manager takes the full clientset, and with it the scheme
// and typed clients of every API group (a fifth of the binary). It does
// what the kubelet's manager does: the same files
// (kubelet-client-<timestamp>.pem and the kubelet-client-current.pem
// link in the certificate directory), the same rotation window (70 to 90%
// of the lifetime) and back-off, so a node moves between the kubelet and
// nodelet with its certificates in place.
package certificates

import (
	"crypto/x509"
	"fmt"
	"os"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/transport"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
)

// Names of the files in the certificate directory, as the kubelet's.
const (
	clientPairPrefix  = "kubelet-client"
	servingPairPrefix = "kubelet-server"
)

// ClientSignerName signs node client certificates; the controller
// manager approves a node's requests to it automatically (bootstrap
// tokens and nodes renewing their own).
const ClientSignerName = certificatesv1.KubeAPIServerClientKubeletSignerName

// clientConfigs are the two configurations of a node's API access:
// request, what certificate requests are made with (the bootstrap
// credentials until a certificate is issued), and user, what everything
// else is made with.
type clientConfigs struct {
	request, user *rest.Config
	// bootstrapping is true when the kubeconfig was (re)written to point
	// at the certificate store and no certificate is in it yet.
	bootstrapping bool
}

// loadClientConfigs works out the node's API credentials, as the kubelet
// does with TLS bootstrapping:
//   - without a bootstrap kubeconfig, the kubeconfig is used as it is;
//   - with one, a kubeconfig whose client certificate is still valid is
//     used as it is (a restart reuses the certificate it holds);
//   - otherwise the kubeconfig is rewritten from the bootstrap one, its
//     credentials pointing at <cert-dir>/kubelet-client-current.pem, and
//     certificate requests go out with the bootstrap credentials.
func loadClientConfigs(kubeconfig, bootstrapKubeconfig, certDir string, now time.Time) (clientConfigs, error) {
	if bootstrapKubeconfig == "" {
		cfg, err := loadKubeconfig(kubeconfig)
		if err != nil {
			return clientConfigs{}, err
		}
		return clientConfigs{request: cfg, user: rest.CopyConfig(cfg)}, nil
	}
	if valid, why := stillValid(kubeconfig, now); valid {
		cfg, err := loadKubeconfig(kubeconfig)
		if err != nil {
			return clientConfigs{}, err
		}
		klog.InfoS("Using the kubeconfig's client certificate; no bootstrap needed", "kubeconfig", kubeconfig)
		return clientConfigs{request: cfg, user: rest.CopyConfig(cfg)}, nil
	} else {
		klog.InfoS("Bootstrapping the node's client certificate", "kubeconfig", kubeconfig, "reason", why, "bootstrapKubeconfig", bootstrapKubeconfig)
	}
	boot, err := loadKubeconfig(bootstrapKubeconfig)
	if err != nil {
		return clientConfigs{}, fmt.Errorf("bootstrap kubeconfig: %w", err)
	}
	user := rest.AnonymousClientConfig(boot)
	user.CertFile, user.KeyFile = currentPath(certDir, clientPairPrefix), currentPath(certDir, clientPairPrefix)
	if err := writeKubeconfig(kubeconfig, boot, user.CertFile); err != nil {
		return clientConfigs{}, err
	}
	return clientConfigs{request: boot, user: user, bootstrapping: true}, nil
}

func currentPath(certDir, prefix string) string {
	return certDir + "/" + prefix + "-current.pem"
}

// loadKubeconfig reads a kubeconfig's current context into a client
// configuration.
func loadKubeconfig(path string) (*rest.Config, error) {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}

// stillValid reports whether the kubeconfig exists and holds a client
// certificate that has not expired, and if not, why.
func stillValid(kubeconfig string, now time.Time) (bool, string) {
	if _, err := os.Stat(kubeconfig); err != nil {
		return false, fmt.Sprintf("kubeconfig unreadable: %v", err)
	}
	cfg, err := loadKubeconfig(kubeconfig)
	if err != nil {
		return false, err.Error()
	}
	tc, err := cfg.TransportConfig()
	if err != nil {
		return false, err.Error()
	}
	// Loads the certificate and key files into tc.TLS's data.
	if _, err := transport.TLSConfigFor(tc); err != nil {
		return false, fmt.Sprintf("client certificate unreadable: %v", err)
	}
	certs, err := certutil.ParseCertsPEM(tc.TLS.CertData)
	if err != nil || len(certs) == 0 {
		return false, "no client certificate in the kubeconfig"
	}
	if expired := firstExpired(certs, now); expired != nil {
		return false, fmt.Sprintf("client certificate expired at %s", expired.NotAfter.UTC().Format(time.RFC3339))
	}
	return true, ""
}

func firstExpired(certs []*x509.Certificate, now time.Time) *x509.Certificate {
	for _, c := range certs {
		if now.After(c.NotAfter) {
			return c
		}
	}
	return nil
}

// writeKubeconfig writes the kubeconfig a bootstrapped node uses: the
// bootstrap kubeconfig's server and CA, and the certificate store's
// current pair as credentials.
func writeKubeconfig(path string, boot *rest.Config, pemPath string) error {
	caData := boot.CAData
	if boot.CAFile != "" {
		caData = nil
	}
	cfg := clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{"default-cluster": {
			Server: boot.Host, InsecureSkipTLSVerify: boot.Insecure,
			CertificateAuthority: boot.CAFile, CertificateAuthorityData: caData,
		}},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{"default-auth": {ClientCertificate: pemPath, ClientKey: pemPath}},
		Contexts: map[string]*clientcmdapi.Context{"default-context": {
			Cluster: "default-cluster", AuthInfo: "default-auth", Namespace: "default",
		}},
		CurrentContext: "default-context",
	}
	if err := clientcmd.WriteToFile(cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}
