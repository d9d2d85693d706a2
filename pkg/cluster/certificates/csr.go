package certificates

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/cluster/kubeclient"
)

// CSRs is the part of the certificates.k8s.io/v1 CSR API the node uses.
// client-go's typed CertificateSigningRequestInterface has it too.
type CSRs interface {
	Create(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, opts metav1.CreateOptions) (*certificatesv1.CertificateSigningRequest, error)
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*certificatesv1.CertificateSigningRequest, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// newCSRClient is a client of the CSR API over cfg's server and
// credentials (and its content type: protobuf when the node asks for it).
func newCSRClient(cfg *rest.Config) (CSRs, error) {
	c, err := kubeclient.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("CSR API client: %w", err)
	}
	return c.CertificatesV1().CertificateSigningRequests(), nil
}

// keyUsages are what a certificate for key is requested for, as the
// kubelet asks: key encipherment only for RSA keys.
func keyUsages(key any, auth certificatesv1.KeyUsage) []certificatesv1.KeyUsage {
	if _, ok := key.(*rsa.PrivateKey); ok {
		return []certificatesv1.KeyUsage{certificatesv1.UsageKeyEncipherment, certificatesv1.UsageDigitalSignature, auth}
	}
	return []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, auth}
}

// csrRequest is one certificate request: its PEM, signer and usages, and
// the key it was made with. Name "" has the API server generate one
// ("csr-…"); a fixed name lets a restart find the same request.
type csrRequest struct {
	name, signer string
	csrPEM       []byte
	usages       []certificatesv1.KeyUsage
	key          crypto.Signer
}

// submit creates the request. A request of the name that already exists
// is reused when it was made with the same key for the same subject and
// signer, as the kubelet reuses its bootstrap request.
func submit(ctx context.Context, api CSRs, r csrRequest) (string, types.UID, error) {
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: r.name},
		Spec:       certificatesv1.CertificateSigningRequestSpec{Request: r.csrPEM, Usages: r.usages, SignerName: r.signer},
	}
	if r.name == "" {
		csr.GenerateName = "csr-"
	}
	created, err := api.Create(ctx, csr, metav1.CreateOptions{})
	switch {
	case err == nil:
		klog.V(2).InfoS("Certificate signing request created", "csr", created.Name, "signer", r.signer)
		return created.Name, created.UID, nil
	case apierrors.IsAlreadyExists(err) && r.name != "":
		found, err := api.Get(ctx, r.name, metav1.GetOptions{})
		if err != nil {
			return "", "", fmt.Errorf("reading the existing certificate signing request %s: %w", r.name, err)
		}
		if err := sameRequest(found, csr, r.key); err != nil {
			return "", "", fmt.Errorf("the existing certificate signing request %s cannot be reused: %w", r.name, err)
		}
		klog.InfoS("Reusing the certificate signing request of this node's key", "csr", r.name)
		return found.Name, found.UID, nil
	default:
		return "", "", fmt.Errorf("creating a certificate signing request: %w", err)
	}
}

// sameRequest tells whether found was made with key, for the subject and
// signer of want.
func sameRequest(found, want *certificatesv1.CertificateSigningRequest, key crypto.Signer) error {
	f, err := parseCSR(found.Spec.Request)
	if err != nil {
		return err
	}
	w, err := parseCSR(want.Spec.Request)
	if err != nil {
		return err
	}
	if f.Subject.String() != w.Subject.String() {
		return fmt.Errorf("its subject is %q, not %q", f.Subject, w.Subject)
	}
	if found.Spec.SignerName != "" && found.Spec.SignerName != want.Spec.SignerName {
		return fmt.Errorf("its signer is %q, not %q", found.Spec.SignerName, want.Spec.SignerName)
	}
	f.PublicKey = key.Public()
	if err := f.CheckSignature(); err != nil {
		return fmt.Errorf("it was not made with this node's key: %w", err)
	}
	return nil
}

func parseCSR(data []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("not a PEM CERTIFICATE REQUEST")
	}
	return x509.ParseCertificateRequest(block.Bytes)
}

// awaitCertificate waits until the request is approved and its
// certificate issued, and returns it; a denied, failed, deleted or
// replaced request ends the wait with an error, and so does ctx. The
// request is watched, then read, so no change falls between the two; a
// watch that ends (the API server restarted, the connection dropped) is
// taken up again after a second.
func awaitCertificate(ctx context.Context, api CSRs, clk clock.Clock, name string, uid types.UID) ([]byte, error) {
	for {
		w, werr := api.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
		cert, err := readIssued(ctx, api, name, uid)
		if cert == nil && err == nil && werr == nil {
			cert, err = watchIssued(ctx, w, name, uid)
		}
		if werr == nil {
			w.Stop()
		}
		if cert != nil || err != nil {
			return cert, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for certificate signing request %s: %w", name, ctx.Err())
		case <-clk.After(time.Second):
		}
	}
}

// readIssued reads the request: its certificate once issued, an error
// once it cannot be, nil, nil while it waits or cannot be read now.
func readIssued(ctx context.Context, api CSRs, name string, uid types.UID) ([]byte, error) {
	csr, err := api.Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return issued(csr, uid)
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("certificate signing request %s was deleted", name)
	default:
		klog.V(2).InfoS("Reading the certificate signing request failed; trying again", "csr", name, "err", err)
		return nil, nil
	}
}

// watchIssued follows the request until it is issued, cannot be, or the
// watch ends (nil, nil: read it again).
func watchIssued(ctx context.Context, w watch.Interface, name string, uid types.UID) ([]byte, error) {
	for {
		var ev watch.Event
		select {
		case <-ctx.Done():
			return nil, nil
		case e, open := <-w.ResultChan():
			if !open {
				return nil, nil
			}
			ev = e
		}
		got, ok := ev.Object.(*certificatesv1.CertificateSigningRequest)
		if !ok || got.Name != name {
			continue // an error event (the watch ends next), or another request
		}
		switch ev.Type {
		case watch.Deleted:
			return nil, fmt.Errorf("certificate signing request %s was deleted", name)
		case watch.Added, watch.Modified:
			if cert, err := issued(got, uid); cert != nil || err != nil {
				return cert, err
			}
		}
	}
}

// issued is the request's certificate once approved and issued; nil
// while it waits; an error when it was denied, failed, or is another
// request of the name.
func issued(csr *certificatesv1.CertificateSigningRequest, uid types.UID) ([]byte, error) {
	if csr.UID != uid {
		return nil, fmt.Errorf("certificate signing request %s was replaced by another of the name", csr.Name)
	}
	approved := false
	for _, c := range csr.Status.Conditions {
		switch c.Type {
		case certificatesv1.CertificateDenied:
			return nil, fmt.Errorf("certificate signing request %s was denied: %s: %s", csr.Name, c.Reason, c.Message)
		case certificatesv1.CertificateFailed:
			return nil, fmt.Errorf("certificate signing request %s failed: %s: %s", csr.Name, c.Reason, c.Message)
		case certificatesv1.CertificateApproved:
			approved = true
		}
	}
	if approved && len(csr.Status.Certificate) > 0 {
		klog.V(2).InfoS("Certificate signing request issued", "csr", csr.Name)
		return csr.Status.Certificate, nil
	}
	return nil, nil
}
