// Package kubeclienttest stands client-go's clientsets (the fake one in
// unit tests) in for the node's narrow API client. Tests only: it links
// the full clientset, which the node's binary does without.
package kubeclienttest

import (
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	resourcev1 "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/kubernetes"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	certificatesv1client "k8s.io/client-go/kubernetes/typed/certificates/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	nodev1client "k8s.io/client-go/kubernetes/typed/node/v1"
	resourcev1client "k8s.io/client-go/kubernetes/typed/resource/v1"
	storagev1client "k8s.io/client-go/kubernetes/typed/storage/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/watchlist"

	"github.com/nodelet/nodelet/pkg/cluster/kubeclient"
)

// Wrap is cs as the node's API client.
func Wrap(cs kubernetes.Interface) kubeclient.Interface { return clientset{cs} }

type clientset struct{ cs kubernetes.Interface }

// IsWatchListSemanticsUnSupported passes on what the wrapped clientset
// says: the fake one cannot stream a list, and informers built over the
// wrapper must know it.
func (c clientset) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(c.cs)
}

func (c clientset) CoreV1() kubeclient.CoreV1 { return core{c.cs.CoreV1()} }
func (c clientset) CoordinationV1() kubeclient.CoordinationV1 {
	return coordination{c.cs.CoordinationV1()}
}
func (c clientset) StorageV1() kubeclient.StorageV1   { return storage{c.cs.StorageV1()} }
func (c clientset) ResourceV1() kubeclient.ResourceV1 { return resource{c.cs.ResourceV1()} }
func (c clientset) CertificatesV1() kubeclient.CertificatesV1 {
	return certificates{c.cs.CertificatesV1()}
}
func (c clientset) AuthenticationV1() kubeclient.AuthenticationV1 {
	return authentication{c.cs.AuthenticationV1()}
}
func (c clientset) AuthorizationV1() kubeclient.AuthorizationV1 {
	return authorization{c.cs.AuthorizationV1()}
}
func (c clientset) NodeV1() kubeclient.NodeV1 { return node{c.cs.NodeV1()} }

type node struct{ c nodev1client.NodeV1Interface }

func (g node) RuntimeClasses() kubeclient.Resource[*nodev1.RuntimeClass, *nodev1.RuntimeClassList] {
	return g.c.RuntimeClasses()
}

type core struct{ c corev1client.CoreV1Interface }

func (g core) RESTClient() rest.Interface { return g.c.RESTClient() }
func (g core) Pods(ns string) kubeclient.StatusResource[*v1.Pod, *v1.PodList] {
	return g.c.Pods(ns)
}
func (g core) Nodes() kubeclient.StatusResource[*v1.Node, *v1.NodeList] { return g.c.Nodes() }
func (g core) ConfigMaps(ns string) kubeclient.Resource[*v1.ConfigMap, *v1.ConfigMapList] {
	return g.c.ConfigMaps(ns)
}
func (g core) Secrets(ns string) kubeclient.Resource[*v1.Secret, *v1.SecretList] {
	return g.c.Secrets(ns)
}
func (g core) Services(ns string) kubeclient.StatusResource[*v1.Service, *v1.ServiceList] {
	return g.c.Services(ns)
}
func (g core) ServiceAccounts(ns string) kubeclient.ServiceAccounts {
	return g.c.ServiceAccounts(ns)
}
func (g core) PersistentVolumes() kubeclient.StatusResource[*v1.PersistentVolume, *v1.PersistentVolumeList] {
	return g.c.PersistentVolumes()
}
func (g core) PersistentVolumeClaims(ns string) kubeclient.StatusResource[*v1.PersistentVolumeClaim, *v1.PersistentVolumeClaimList] {
	return g.c.PersistentVolumeClaims(ns)
}
func (g core) Events(ns string) kubeclient.Resource[*v1.Event, *v1.EventList] {
	return g.c.Events(ns)
}

type coordination struct {
	c coordinationv1client.CoordinationV1Interface
}

func (g coordination) Leases(ns string) kubeclient.Resource[*coordinationv1.Lease, *coordinationv1.LeaseList] {
	return g.c.Leases(ns)
}

type storage struct {
	c storagev1client.StorageV1Interface
}

func (g storage) CSINodes() kubeclient.Resource[*storagev1.CSINode, *storagev1.CSINodeList] {
	return g.c.CSINodes()
}
func (g storage) CSIDrivers() kubeclient.Resource[*storagev1.CSIDriver, *storagev1.CSIDriverList] {
	return g.c.CSIDrivers()
}
func (g storage) VolumeAttachments() kubeclient.StatusResource[*storagev1.VolumeAttachment, *storagev1.VolumeAttachmentList] {
	return g.c.VolumeAttachments()
}

type resource struct {
	c resourcev1client.ResourceV1Interface
}

func (g resource) ResourceClaims(ns string) kubeclient.StatusResource[*resourcev1.ResourceClaim, *resourcev1.ResourceClaimList] {
	return g.c.ResourceClaims(ns)
}
func (g resource) ResourceSlices() kubeclient.CollectionResource[*resourcev1.ResourceSlice, *resourcev1.ResourceSliceList] {
	return g.c.ResourceSlices()
}

type certificates struct {
	c certificatesv1client.CertificatesV1Interface
}

func (g certificates) CertificateSigningRequests() kubeclient.StatusResource[*certificatesv1.CertificateSigningRequest, *certificatesv1.CertificateSigningRequestList] {
	return g.c.CertificateSigningRequests()
}

type authentication struct {
	c authenticationv1client.AuthenticationV1Interface
}

func (g authentication) TokenReviews() kubeclient.Creator[*authenticationv1.TokenReview] {
	return g.c.TokenReviews()
}

type authorization struct {
	c authorizationv1client.AuthorizationV1Interface
}

func (g authorization) SubjectAccessReviews() kubeclient.Creator[*authorizationv1.SubjectAccessReview] {
	return g.c.SubjectAccessReviews()
}
