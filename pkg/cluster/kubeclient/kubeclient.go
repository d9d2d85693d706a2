// Package kubeclient is the node's client of the API server: typed
// clients of the resources nodelet reads and writes, over a scheme of the
// eight API groups it talks to.
//
// client-go's clientset registers every API group of Kubernetes (about
// 50 group versions, their typed clients, apply configurations and
// discovery): a third of nodelet's binary, initialised at every start
// and resident for good. The clients here make the calls client-go's
// generic ones make (typed.go), over a narrow scheme, and their method
// sets are those of client-go's typed clients, so a test can stand
// client-go's fake clientset in (internal/kubeclienttest).
package kubeclient

import (
	"context"
	"fmt"
	"net/http"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	resourcev1 "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Scheme knows the types of the API groups nodelet talks to, and the
// options their calls take.
var Scheme = runtime.NewScheme()

// Codecs encode and decode the Scheme's types (JSON, YAML, protobuf).
var Codecs = serializer.NewCodecFactory(Scheme)

var parameterCodec = runtime.NewParameterCodec(Scheme)

func init() {
	for _, add := range []func(*runtime.Scheme) error{
		v1.AddToScheme, coordinationv1.AddToScheme, storagev1.AddToScheme, resourcev1.AddToScheme,
		certificatesv1.AddToScheme, authenticationv1.AddToScheme, authorizationv1.AddToScheme, nodev1.AddToScheme,
	} {
		if err := add(Scheme); err != nil {
			panic(err) // the types are fixed: a programming error
		}
	}
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
}

// Resource is what nodelet does with a kind of object without a status
// subresource; client-go's typed clients have the same methods.
type Resource[T, L runtime.Object] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// StatusResource is a Resource with a status subresource.
type StatusResource[T, L runtime.Object] interface {
	Resource[T, L]
	UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// CollectionResource is a Resource whose objects are deleted by
// selector too.
type CollectionResource[T, L runtime.Object] interface {
	Resource[T, L]
	DeleteCollection(ctx context.Context, opts metav1.DeleteOptions, listOpts metav1.ListOptions) error
}

// Creator is a resource that is only ever created: a review.
type Creator[T runtime.Object] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
}

// ServiceAccounts adds token requests to the resource.
type ServiceAccounts interface {
	Resource[*v1.ServiceAccount, *v1.ServiceAccountList]
	CreateToken(ctx context.Context, name string, tr *authenticationv1.TokenRequest, opts metav1.CreateOptions) (*authenticationv1.TokenRequest, error)
}

// Interface is the node's API client, by API group.
type Interface interface {
	CoreV1() CoreV1
	CoordinationV1() CoordinationV1
	StorageV1() StorageV1
	ResourceV1() ResourceV1
	CertificatesV1() CertificatesV1
	AuthenticationV1() AuthenticationV1
	AuthorizationV1() AuthorizationV1
	NodeV1() NodeV1
}

// CoreV1 is the core group's resources nodelet uses.
type CoreV1 interface {
	// RESTClient is for what has no typed call (a node's proxy).
	RESTClient() rest.Interface
	Pods(namespace string) StatusResource[*v1.Pod, *v1.PodList]
	Nodes() StatusResource[*v1.Node, *v1.NodeList]
	ConfigMaps(namespace string) Resource[*v1.ConfigMap, *v1.ConfigMapList]
	Secrets(namespace string) Resource[*v1.Secret, *v1.SecretList]
	Services(namespace string) StatusResource[*v1.Service, *v1.ServiceList]
	ServiceAccounts(namespace string) ServiceAccounts
	PersistentVolumes() StatusResource[*v1.PersistentVolume, *v1.PersistentVolumeList]
	PersistentVolumeClaims(namespace string) StatusResource[*v1.PersistentVolumeClaim, *v1.PersistentVolumeClaimList]
	Events(namespace string) Resource[*v1.Event, *v1.EventList]
}

// CoordinationV1 has the node's lease.
type CoordinationV1 interface {
	Leases(namespace string) Resource[*coordinationv1.Lease, *coordinationv1.LeaseList]
}

// StorageV1 has what CSI volumes need.
type StorageV1 interface {
	CSINodes() Resource[*storagev1.CSINode, *storagev1.CSINodeList]
	CSIDrivers() Resource[*storagev1.CSIDriver, *storagev1.CSIDriverList]
	VolumeAttachments() StatusResource[*storagev1.VolumeAttachment, *storagev1.VolumeAttachmentList]
}

// ResourceV1 has what DRA needs.
type ResourceV1 interface {
	ResourceClaims(namespace string) StatusResource[*resourcev1.ResourceClaim, *resourcev1.ResourceClaimList]
	ResourceSlices() CollectionResource[*resourcev1.ResourceSlice, *resourcev1.ResourceSliceList]
}

// CertificatesV1 has certificate requests.
type CertificatesV1 interface {
	CertificateSigningRequests() StatusResource[*certificatesv1.CertificateSigningRequest, *certificatesv1.CertificateSigningRequestList]
}

// AuthenticationV1 has token reviews (the kubelet API's webhook authentication).
type AuthenticationV1 interface {
	TokenReviews() Creator[*authenticationv1.TokenReview]
}

// AuthorizationV1 has access reviews (the kubelet API's webhook authorization).
type AuthorizationV1 interface {
	SubjectAccessReviews() Creator[*authorizationv1.SubjectAccessReview]
}

// NodeV1 has the RuntimeClasses pods name.
type NodeV1 interface {
	RuntimeClasses() Resource[*nodev1.RuntimeClass, *nodev1.RuntimeClassList]
}

// client holds one REST client per group version; they share the
// configuration's transport and rate limiter, as a clientset's do.
type client struct {
	core, coordination, storage, resource, certificates, authentication, authorization, node rest.Interface
}

// New builds the node's API client from cfg (its server, credentials,
// content type, QPS and burst).
func New(cfg *rest.Config) (Interface, error) {
	c := rest.CopyConfig(cfg)
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if c.RateLimiter == nil && c.QPS > 0 {
		if c.Burst <= 0 {
			return nil, fmt.Errorf("API client: burst must be positive when QPS is set")
		}
		c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	}
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	var out client
	for _, g := range []struct {
		dst  *rest.Interface
		gv   schema.GroupVersion
		path string
	}{
		{&out.core, v1.SchemeGroupVersion, "/api"},
		{&out.coordination, coordinationv1.SchemeGroupVersion, "/apis"},
		{&out.storage, storagev1.SchemeGroupVersion, "/apis"},
		{&out.resource, resourcev1.SchemeGroupVersion, "/apis"},
		{&out.certificates, certificatesv1.SchemeGroupVersion, "/apis"},
		{&out.authentication, authenticationv1.SchemeGroupVersion, "/apis"},
		{&out.authorization, authorizationv1.SchemeGroupVersion, "/apis"},
		{&out.node, nodev1.SchemeGroupVersion, "/apis"},
	} {
		if *g.dst, err = restClient(c, hc, g.gv, g.path); err != nil {
			return nil, err
		}
	}
	return &out, nil
}

func restClient(cfg *rest.Config, hc *http.Client, gv schema.GroupVersion, path string) (rest.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion, c.APIPath = &gv, path
	c.NegotiatedSerializer = Codecs.WithoutConversion()
	rc, err := rest.RESTClientForConfigAndClient(c, hc)
	if err != nil {
		return nil, fmt.Errorf("API client for %s: %w", gv, err)
	}
	return rc, nil
}

func (c *client) CoreV1() CoreV1                     { return coreV1{c.core} }
func (c *client) CoordinationV1() CoordinationV1     { return coordinationV1{c.coordination} }
func (c *client) StorageV1() StorageV1               { return storageV1{c.storage} }
func (c *client) ResourceV1() ResourceV1             { return resourceV1{c.resource} }
func (c *client) CertificatesV1() CertificatesV1     { return certificatesV1{c.certificates} }
func (c *client) AuthenticationV1() AuthenticationV1 { return authenticationV1{c.authentication} }
func (c *client) AuthorizationV1() AuthorizationV1   { return authorizationV1{c.authorization} }
func (c *client) NodeV1() NodeV1                     { return nodeV1{c.node} }

type nodeV1 struct{ rc rest.Interface }

func (g nodeV1) RuntimeClasses() Resource[*nodev1.RuntimeClass, *nodev1.RuntimeClassList] {
	return typed[*nodev1.RuntimeClass, *nodev1.RuntimeClassList](g.rc, "runtimeclasses", "")
}

type coreV1 struct{ rc rest.Interface }

func (g coreV1) RESTClient() rest.Interface { return g.rc }
func (g coreV1) Pods(ns string) StatusResource[*v1.Pod, *v1.PodList] {
	return typed[*v1.Pod, *v1.PodList](g.rc, "pods", ns)
}
func (g coreV1) Nodes() StatusResource[*v1.Node, *v1.NodeList] {
	return typed[*v1.Node, *v1.NodeList](g.rc, "nodes", "")
}
func (g coreV1) ConfigMaps(ns string) Resource[*v1.ConfigMap, *v1.ConfigMapList] {
	return typed[*v1.ConfigMap, *v1.ConfigMapList](g.rc, "configmaps", ns)
}
func (g coreV1) Secrets(ns string) Resource[*v1.Secret, *v1.SecretList] {
	return typed[*v1.Secret, *v1.SecretList](g.rc, "secrets", ns)
}
func (g coreV1) Services(ns string) StatusResource[*v1.Service, *v1.ServiceList] {
	return typed[*v1.Service, *v1.ServiceList](g.rc, "services", ns)
}
func (g coreV1) ServiceAccounts(ns string) ServiceAccounts {
	return serviceAccounts{typed[*v1.ServiceAccount, *v1.ServiceAccountList](g.rc, "serviceaccounts", ns), g.rc, ns}
}
func (g coreV1) PersistentVolumes() StatusResource[*v1.PersistentVolume, *v1.PersistentVolumeList] {
	return typed[*v1.PersistentVolume, *v1.PersistentVolumeList](g.rc, "persistentvolumes", "")
}
func (g coreV1) PersistentVolumeClaims(ns string) StatusResource[*v1.PersistentVolumeClaim, *v1.PersistentVolumeClaimList] {
	return typed[*v1.PersistentVolumeClaim, *v1.PersistentVolumeClaimList](g.rc, "persistentvolumeclaims", ns)
}
func (g coreV1) Events(ns string) Resource[*v1.Event, *v1.EventList] {
	return typed[*v1.Event, *v1.EventList](g.rc, "events", ns)
}

type serviceAccounts struct {
	*typedClient[*v1.ServiceAccount, *v1.ServiceAccountList, v1.ServiceAccount, v1.ServiceAccountList]
	rc rest.Interface
	ns string
}

func (s serviceAccounts) CreateToken(ctx context.Context, name string, tr *authenticationv1.TokenRequest, opts metav1.CreateOptions) (*authenticationv1.TokenRequest, error) {
	out := &authenticationv1.TokenRequest{}
	err := s.rc.Post().Namespace(s.ns).Resource("serviceaccounts").Name(name).SubResource("token").
		VersionedParams(&opts, parameterCodec).Body(tr).Do(ctx).Into(out)
	return out, err
}

type coordinationV1 struct{ rc rest.Interface }

func (g coordinationV1) Leases(ns string) Resource[*coordinationv1.Lease, *coordinationv1.LeaseList] {
	return typed[*coordinationv1.Lease, *coordinationv1.LeaseList](g.rc, "leases", ns)
}

type storageV1 struct{ rc rest.Interface }

func (g storageV1) CSINodes() Resource[*storagev1.CSINode, *storagev1.CSINodeList] {
	return typed[*storagev1.CSINode, *storagev1.CSINodeList](g.rc, "csinodes", "")
}
func (g storageV1) CSIDrivers() Resource[*storagev1.CSIDriver, *storagev1.CSIDriverList] {
	return typed[*storagev1.CSIDriver, *storagev1.CSIDriverList](g.rc, "csidrivers", "")
}
func (g storageV1) VolumeAttachments() StatusResource[*storagev1.VolumeAttachment, *storagev1.VolumeAttachmentList] {
	return typed[*storagev1.VolumeAttachment, *storagev1.VolumeAttachmentList](g.rc, "volumeattachments", "")
}

type resourceV1 struct{ rc rest.Interface }

func (g resourceV1) ResourceClaims(ns string) StatusResource[*resourcev1.ResourceClaim, *resourcev1.ResourceClaimList] {
	return typed[*resourcev1.ResourceClaim, *resourcev1.ResourceClaimList](g.rc, "resourceclaims", ns)
}
func (g resourceV1) ResourceSlices() CollectionResource[*resourcev1.ResourceSlice, *resourcev1.ResourceSliceList] {
	return typed[*resourcev1.ResourceSlice, *resourcev1.ResourceSliceList](g.rc, "resourceslices", "")
}

type certificatesV1 struct{ rc rest.Interface }

func (g certificatesV1) CertificateSigningRequests() StatusResource[*certificatesv1.CertificateSigningRequest, *certificatesv1.CertificateSigningRequestList] {
	return typed[*certificatesv1.CertificateSigningRequest, *certificatesv1.CertificateSigningRequestList](g.rc, "certificatesigningrequests", "")
}

type authenticationV1 struct{ rc rest.Interface }

func (g authenticationV1) TokenReviews() Creator[*authenticationv1.TokenReview] {
	return creator[*authenticationv1.TokenReview, authenticationv1.TokenReview]{g.rc, "tokenreviews"}
}

type authorizationV1 struct{ rc rest.Interface }

func (g authorizationV1) SubjectAccessReviews() Creator[*authorizationv1.SubjectAccessReview] {
	return creator[*authorizationv1.SubjectAccessReview, authorizationv1.SubjectAccessReview]{g.rc, "subjectaccessreviews"}
}
