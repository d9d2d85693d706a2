package kubeclient

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// typedClient is the REST calls of one resource, as client-go's generic
// client (gentype) makes them. Not gentype itself: it links client-go's
// fake machinery (client-go/testing, managed fields, structured merge
// diff) into every binary that uses it.
type typedClient[T interface {
	*E
	runtime.Object
	GetName() string
}, L interface {
	*EL
	runtime.Object
}, E, EL any] struct {
	rc        rest.Interface
	resource  string
	namespace string
}

func typed[T interface {
	*E
	runtime.Object
	GetName() string
}, L interface {
	*EL
	runtime.Object
}, E, EL any](rc rest.Interface, resource, namespace string) *typedClient[T, L, E, EL] {
	return &typedClient[T, L, E, EL]{rc: rc, resource: resource, namespace: namespace}
}

func (c *typedClient[T, L, E, EL]) req(r *rest.Request) *rest.Request {
	return r.NamespaceIfScoped(c.namespace, c.namespace != "").Resource(c.resource)
}

func timeout(s *int64) time.Duration {
	if s == nil {
		return 0
	}
	return time.Duration(*s) * time.Second
}

func (c *typedClient[T, L, E, EL]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	out := T(new(E))
	err := c.req(c.rc.Get()).Name(name).VersionedParams(&opts, parameterCodec).Do(ctx).Into(out)
	return out, err
}

func (c *typedClient[T, L, E, EL]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	out := L(new(EL))
	err := c.req(c.rc.Get()).VersionedParams(&opts, parameterCodec).Timeout(timeout(opts.TimeoutSeconds)).Do(ctx).Into(out)
	return out, err
}

func (c *typedClient[T, L, E, EL]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.req(c.rc.Get()).VersionedParams(&opts, parameterCodec).Timeout(timeout(opts.TimeoutSeconds)).Watch(ctx)
}

func (c *typedClient[T, L, E, EL]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	out := T(new(E))
	err := c.req(c.rc.Post()).VersionedParams(&opts, parameterCodec).Body(obj).Do(ctx).Into(out)
	return out, err
}

func (c *typedClient[T, L, E, EL]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	out := T(new(E))
	err := c.req(c.rc.Put()).Name(obj.GetName()).VersionedParams(&opts, parameterCodec).Body(obj).Do(ctx).Into(out)
	return out, err
}

func (c *typedClient[T, L, E, EL]) UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	out := T(new(E))
	err := c.req(c.rc.Put()).Name(obj.GetName()).SubResource("status").VersionedParams(&opts, parameterCodec).Body(obj).Do(ctx).Into(out)
	return out, err
}

func (c *typedClient[T, L, E, EL]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return c.req(c.rc.Delete()).Name(name).Body(&opts).Do(ctx).Error()
}

func (c *typedClient[T, L, E, EL]) DeleteCollection(ctx context.Context, opts metav1.DeleteOptions, listOpts metav1.ListOptions) error {
	return c.req(c.rc.Delete()).VersionedParams(&listOpts, parameterCodec).Timeout(timeout(listOpts.TimeoutSeconds)).Body(&opts).Do(ctx).Error()
}

func (c *typedClient[T, L, E, EL]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	out := T(new(E))
	err := c.req(c.rc.Patch(pt)).Name(name).SubResource(subresources...).VersionedParams(&opts, parameterCodec).Body(data).Do(ctx).Into(out)
	return out, err
}

// creator is a resource that is only created (a review).
type creator[T interface {
	*E
	runtime.Object
}, E any] struct {
	rc       rest.Interface
	resource string
}

func (c creator[T, E]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	out := T(new(E))
	err := c.rc.Post().Resource(c.resource).VersionedParams(&opts, parameterCodec).Body(obj).Do(ctx).Into(out)
	return out, err
}
