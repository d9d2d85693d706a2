package testbed

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The group kubeadm gives its bootstrap tokens, and the bindings it makes
// for TLS bootstrapping: bootstrappers may ask for node client
// certificates, their requests are approved, and nodes' requests to renew
// their own are approved.
const bootstrapGroup = "system:bootstrappers:kubeadm:default-node-token"

var bootstrapBindings = map[string]rbacv1.Subject{
	"kubeadm:kubelet-bootstrap":                     {Kind: rbacv1.GroupKind, Name: bootstrapGroup},
	"kubeadm:node-autoapprove-bootstrap":            {Kind: rbacv1.GroupKind, Name: bootstrapGroup},
	"kubeadm:node-autoapprove-certificate-rotation": {Kind: rbacv1.GroupKind, Name: "system:nodes"},
}

var bootstrapRoles = map[string]string{
	"kubeadm:kubelet-bootstrap":                     "system:node-bootstrapper",
	"kubeadm:node-autoapprove-bootstrap":            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
	"kubeadm:node-autoapprove-certificate-rotation": "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
}

// BootstrapKubeconfig sets the cluster up for TLS bootstrapping as
// kubeadm does (the bindings above, once) and writes what kubeadm join
// writes to /etc/kubernetes/bootstrap-kubelet.conf: the API server with
// the cluster CA, and a new bootstrap token in kubeadm's group.
func (c *Cluster) BootstrapKubeconfig(ctx context.Context, file string) (string, error) {
	if err := c.AllowNodeCSRs(ctx); err != nil {
		return "", err
	}
	idBytes, secretBytes := make([]byte, 3), make([]byte, 8)
	if _, err := rand.Read(idBytes); err != nil {
		return "", err
	}
	if _, err := rand.Read(secretBytes); err != nil {
		return "", err
	}
	id, secret := hex.EncodeToString(idBytes), hex.EncodeToString(secretBytes)
	token := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: metav1.NamespaceSystem},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"token-id": id, "token-secret": secret, "usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
			"auth-extra-groups": bootstrapGroup, "expiration": time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339),
		},
	}
	if _, err := c.Client.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, token, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("bootstrap token: %w", err)
	}
	ca, err := os.ReadFile(c.CAFile())
	if err != nil {
		return "", err
	}
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubernetes
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: tls-bootstrap-token-user
  user:
    token: %s.%s
contexts:
- name: tls-bootstrap-token-user@kubernetes
  context: {cluster: kubernetes, user: tls-bootstrap-token-user}
current-context: tls-bootstrap-token-user@kubernetes
`, c.APIServer(), base64.StdEncoding.EncodeToString(ca), id, secret)
	p := c.path(file)
	return p, os.WriteFile(p, []byte(cfg), 0o600)
}

// AllowNodeCSRs makes the bindings kubeadm makes for TLS bootstrapping and
// client certificate rotation (idempotent).
func (c *Cluster) AllowNodeCSRs(ctx context.Context) error {
	for name, subject := range bootstrapBindings {
		b := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: bootstrapRoles[name]},
			Subjects:   []rbacv1.Subject{subject},
		}
		if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("binding %s: %w", name, err)
		}
	}
	return nil
}

// NodeCertificate issues node name's client certificate from the cluster
// CA, valid from notBefore to notAfter (a node's certificate close to
// expiry, say), as PEM.
func (c *Cluster) NodeCertificate(name string, notBefore, notAfter time.Time) (certPEM, keyPEM []byte, err error) {
	return c.issue(&x509.Certificate{
		Subject: pkix.Name{CommonName: "system:node:" + name, Organization: []string{"system:nodes"}}, NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}
