// Package apiwatch is how nodelet follows objects in the API server: a
// list-and-watch narrowed by a field selector (the pods bound to the
// node, the node itself, one configMap or secret), retried with a
// back-off short enough that a node catches up within seconds of the API
// server's return.
package apiwatch

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Backoff is how list-and-watch retries while the API server is away:
// capped at 8 s (client-go's default reaches a minute with jitter), so a
// node catches up within seconds of the API server's return, while
// thousands of nodes still spread their retries out.
func Backoff() *wait.Backoff {
	return &wait.Backoff{Duration: 500 * time.Millisecond, Cap: 8 * time.Second, Steps: 16, Factor: 2, Jitter: 0.5}
}

// FieldSelected lists and watches, through a typed client's List and
// Watch, only the objects whose field has value.
func FieldSelected[L runtime.Object](field, value string,
	list func(context.Context, metav1.ListOptions) (L, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) *cache.ListWatch {
	selector := fields.OneTermEqualSelector(field, value).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return watchFn(ctx, o)
		},
	}
}

// ForClient tells client-go whether the client can stream the initial
// list (watch-list); client-go's fake clientset cannot, and without this
// an informer over it waits forever for the end-of-list bookmark.
func ForClient(lw *cache.ListWatch, client any) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(lw, client)
}

// Reflect keeps store in step with what lw lists and watches, until ctx
// ends. client says whether the initial list may be streamed (client-go's
// fake clientset cannot).
func Reflect(ctx context.Context, name string, client any, lw *cache.ListWatch, obj runtime.Object, store cache.Store, backoff *wait.Backoff) {
	if backoff == nil {
		backoff = Backoff()
	}
	cache.NewReflectorWithOptions(ForClient(lw, client), obj, store,
		cache.ReflectorOptions{Name: name, Backoff: backoff}).RunWithContext(ctx)
}
