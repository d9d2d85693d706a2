package nodestatus

import "k8s.io/client-go/tools/cache"

// signallingStore is the store the node watch keeps, which says when the
// watch delivered something: a write of nodelet's own comes back through
// it too, and costs one comparison. A wrapped store (as the pod source's
// stripManagedFields) rather than an informer's event handler: client-go's
// informer takes no back-off, and the node watch must keep apiwatch's,
// which brings it back within seconds of an outage.
type signallingStore struct {
	cache.Store
	changed chan struct{}
}

func newSignallingStore() *signallingStore {
	return &signallingStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc), changed: make(chan struct{}, 1)}
}

func (s *signallingStore) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *signallingStore) Add(obj any) error {
	defer s.signal()
	return s.Store.Add(obj)
}

func (s *signallingStore) Update(obj any) error {
	defer s.signal()
	return s.Store.Update(obj)
}

func (s *signallingStore) Replace(list []any, resourceVersion string) error {
	defer s.signal()
	return s.Store.Replace(list, resourceVersion)
}
