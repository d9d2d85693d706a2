package podsources

import (
	"context"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/cluster/apiwatch"
	"github.com/nodelet/nodelet/pkg/cluster/kubeclient"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// stripManagedFields drops the pods' managedFields on their way into the
// store: nodelet never reads them, and at a hundred pods they are a good
// part of the memory the pods take, several copies over.
type stripManagedFields struct{ cache.Store }

func (s stripManagedFields) Add(obj interface{}) error { return s.Store.Add(strip(obj)) }

func (s stripManagedFields) Update(obj interface{}) error { return s.Store.Update(strip(obj)) }

func (s stripManagedFields) Replace(list []interface{}, rv string) error {
	for i := range list {
		list[i] = strip(list[i])
	}
	return s.Store.Replace(list, rv)
}

func strip(obj interface{}) interface{} {
	if p, ok := obj.(*v1.Pod); ok {
		p.ManagedFields = nil
	}
	return obj
}

// APISource lists and watches the pods bound to the node (fieldSelector
// spec.nodeName=<node>) and delivers the whole set, as seed 004 says,
// after every change: the merge turns it into ADD, UPDATE, DELETE,
// REMOVE and RECONCILE. While the API server is unreachable the reflector
// retries with a back-off and nothing is delivered, so the last set stays
// in force and no pod is stopped because the control plane blinked.
type APISource struct {
	client   kubeclient.Interface
	nodeName string
	out      Setter
}

// NewAPISource returns the API server source for nodeName.
func NewAPISource(client kubeclient.Interface, nodeName string, out Setter) *APISource {
	return &APISource{client: client, nodeName: nodeName, out: out}
}

// Run lists and watches until ctx ends.
func (s *APISource) Run(ctx context.Context) {
	pods := s.client.CoreV1().Pods(metav1.NamespaceAll)
	lw := apiwatch.FieldSelected("spec.nodeName", s.nodeName, pods.List, pods.Watch)
	// The undelta store hands over the complete set after every event. The
	// objects are the store's own: the merge only reads them.
	undelta := cache.NewUndeltaStore(func(objs []interface{}) {
		set := make([]*v1.Pod, 0, len(objs))
		for _, o := range objs {
			set = append(set, o.(*v1.Pod))
		}
		s.out.Set(ctx, podutil.APISource, set)
	}, cache.MetaNamespaceKeyFunc)
	store := stripManagedFields{undelta}
	klog.InfoS("Watching pods bound to the node", "node", s.nodeName)
	apiwatch.Reflect(ctx, "api pod source", s.client, lw, &v1.Pod{}, store, nil)
}
