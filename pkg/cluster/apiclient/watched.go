// The watched objects: the configMaps and secrets named in their volumes, environment and
// image pull secrets (upstream's watch-based secret and configMap
// managers), and the services whose addresses go into containers'
// environment.
//
// A configMap or secret is watched only while a pod on the node refers
// to it, one watch per object with a metadata.name field selector, which
// is what the node authorizer lets a node do. RegisterPod starts the
// watches a pod needs and UnregisterPod (once the pod is terminated)
// stops those nobody else needs. When a watched object changes, or
// appears, the pods that refer to it are handed to OnChange so they are
// synced at once: their volumes are refreshed, and a pod waiting for a
// missing object starts.
package apiclient

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/nodelet/nodelet/pkg/cluster/apiwatch"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/cluster/kubeclient"
)

// syncWait bounds how long a read waits for a new watch's first list
// before asking the API server directly.
const syncWait = 5 * time.Second

// Kinds of objects watched.
const (
	KindSecret    = "secret"
	KindConfigMap = "configmap"
)

type key struct{ kind, namespace, name string }

func (k key) String() string { return fmt.Sprintf("%s %s/%s", k.kind, k.namespace, k.name) }

type watched struct {
	store  cache.Store
	synced cache.InformerSynced
	stop   context.CancelFunc
	pods   map[types.UID]bool
}

// watches caches the objects pods refer to.
type watches struct {
	client kubeclient.Interface
	// OnChange receives the pods referring to an object that changed.
	onChange func([]types.UID)
	// ctx bounds the per-object watches, started as pods register,
	// possibly before Run; Run's end cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	// servicesInformer lists and watches every service, for the
	// containers' environment.
	servicesInformer cache.Controller

	mu      sync.Mutex
	objects map[key]*watched
	refs    map[types.UID][]key

	services       cache.Store
	servicesSynced cache.InformerSynced
}

// newWatches returns the watches; they run until Run ends. onChange may
// be nil.
func newWatches(client kubeclient.Interface, onChange func([]types.UID)) *watches {
	if onChange == nil {
		onChange = func([]types.UID) {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &watches{client: client, onChange: onChange, ctx: ctx, cancel: cancel, objects: map[key]*watched{}, refs: map[types.UID][]key{}}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return client.CoreV1().Services("").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return client.CoreV1().Services("").Watch(ctx, o)
		},
	}
	store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: apiwatch.ForClient(lw, client), ObjectType: &v1.Service{}, Handler: cache.ResourceEventHandlerFuncs{}})
	m.services, m.servicesSynced, m.servicesInformer = store, ctrl.HasSynced, ctrl
	return m
}

// Run watches the services until ctx ends, then stops every watch.
func (m *watches) Run(ctx context.Context) error {
	defer m.cancel()
	m.servicesInformer.RunWithContext(ctx)
	return nil
}

// Referenced lists the configMaps and secrets a pod refers to, as
// kind/namespace/name.
func Referenced(pod *v1.Pod) []string {
	refs := references(pod)
	out := make([]string, len(refs))
	for i, k := range refs {
		out[i] = k.kind + "/" + k.namespace + "/" + k.name
	}
	return out
}

// references lists the configMaps and secrets a pod refers to.
func references(pod *v1.Pod) []key {
	set := map[key]bool{}
	add := func(kind, name string) {
		if name != "" {
			set[key{kind, pod.Namespace, name}] = true
		}
	}
	for _, s := range pod.Spec.ImagePullSecrets {
		add(KindSecret, s.Name)
	}
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			add(KindConfigMap, v.ConfigMap.Name)
		case v.Secret != nil:
			add(KindSecret, v.Secret.SecretName)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					add(KindConfigMap, s.ConfigMap.Name)
				}
				if s.Secret != nil {
					add(KindSecret, s.Secret.Name)
				}
			}
		}
	}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			for _, e := range c.EnvFrom {
				if e.ConfigMapRef != nil {
					add(KindConfigMap, e.ConfigMapRef.Name)
				}
				if e.SecretRef != nil {
					add(KindSecret, e.SecretRef.Name)
				}
			}
			for _, e := range c.Env {
				if f := e.ValueFrom; f != nil && f.ConfigMapKeyRef != nil {
					add(KindConfigMap, f.ConfigMapKeyRef.Name)
				}
				if f := e.ValueFrom; f != nil && f.SecretKeyRef != nil {
					add(KindSecret, f.SecretKeyRef.Name)
				}
			}
		}
	}
	out := make([]key, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// RegisterPod watches the objects the pod refers to (and stops watching
// those it no longer refers to after an update).
func (m *watches) RegisterPod(pod *v1.Pod) {
	refs := references(pod)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.release(pod.UID)
	m.refs[pod.UID] = refs
	for _, k := range refs {
		w, ok := m.objects[k]
		if !ok {
			w = m.watch(k)
			m.objects[k] = w
		}
		w.pods[pod.UID] = true
	}
}

// UnregisterPod stops the watches only this pod needed.
func (m *watches) UnregisterPod(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.release(pod.UID)
	delete(m.refs, pod.UID)
}

// release drops uid's references. Call with mu held.
func (m *watches) release(uid types.UID) {
	for _, k := range m.refs[uid] {
		w := m.objects[k]
		if w == nil {
			continue
		}
		delete(w.pods, uid)
		if len(w.pods) == 0 {
			w.stop()
			delete(m.objects, k)
		}
	}
}

// watch starts a single-object watch. Call with mu held.
func (m *watches) watch(k key) *watched {
	ctx, cancel := context.WithCancel(m.ctx)
	var lw *cache.ListWatch
	var obj runtime.Object
	if k.kind == KindSecret {
		secrets := m.client.CoreV1().Secrets(k.namespace)
		obj, lw = &v1.Secret{}, apiwatch.FieldSelected("metadata.name", k.name, secrets.List, secrets.Watch)
	} else {
		configMaps := m.client.CoreV1().ConfigMaps(k.namespace)
		obj, lw = &v1.ConfigMap{}, apiwatch.FieldSelected("metadata.name", k.name, configMaps.List, configMaps.Watch)
	}
	changed := func() { m.changed(k) }
	store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: apiwatch.ForClient(lw, m.client), ObjectType: obj,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { changed() },
			UpdateFunc: func(any, any) { changed() },
			DeleteFunc: func(any) { changed() },
		},
	})
	go ctrl.RunWithContext(ctx)
	klog.V(4).InfoS("Watching an object pods refer to", "object", k.String())
	return &watched{store: store, synced: ctrl.HasSynced, stop: cancel, pods: map[types.UID]bool{}}
}

func (m *watches) changed(k key) {
	m.mu.Lock()
	w := m.objects[k]
	var uids []types.UID
	if w != nil {
		for uid := range w.pods {
			uids = append(uids, uid)
		}
	}
	m.mu.Unlock()
	if len(uids) > 0 {
		klog.V(3).InfoS("An object pods refer to changed", "object", k.String(), "pods", len(uids))
		m.onChange(uids)
	}
}

// get reads an object from its watch, or from the API server when no pod
// registered it or its watch has not listed yet.
func get[T runtime.Object](ctx context.Context, m *watches, k key, direct func() (T, error)) (T, error) {
	var none T
	m.mu.Lock()
	w := m.objects[k]
	m.mu.Unlock()
	if w != nil {
		wctx, cancel := context.WithTimeout(ctx, syncWait)
		synced := cache.WaitForCacheSync(wctx.Done(), w.synced)
		cancel()
		if synced {
			obj, ok, err := w.store.GetByKey(k.namespace + "/" + k.name)
			if err != nil {
				return none, err
			}
			if !ok {
				return none, apierrors.NewNotFound(v1.Resource(k.kind+"s"), k.name)
			}
			return obj.(T), nil
		}
	}
	return direct()
}

// GetSecret returns a secret.
func (m *watches) GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	return get(ctx, m, key{KindSecret, namespace, name}, func() (*v1.Secret, error) {
		return m.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	})
}

// GetConfigMap returns a configMap.
func (m *watches) GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	return get(ctx, m, key{KindConfigMap, namespace, name}, func() (*v1.ConfigMap, error) {
		return m.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	})
}

// Services lists the services of a namespace ("" for all), once the
// service watch has listed; before that, none.
func (m *watches) Services(namespace string) []*v1.Service {
	if !m.servicesSynced() {
		return nil
	}
	var out []*v1.Service
	for _, obj := range m.services.List() {
		s := obj.(*v1.Service)
		if namespace == "" || s.Namespace == namespace {
			out = append(out, s)
		}
	}
	return out
}

// Watching tells how many objects are watched, for tests.
func (m *watches) Watching() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.objects)
}
