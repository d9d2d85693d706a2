// Package runtimeclass maps a pod's runtimeClassName to the CRI runtime
// handler its RuntimeClass names, as upstream's RuntimeClass manager
// does: the handler need not be the class's name (gVisor's "runsc",
// Kata's "kata-qemu" behind classes named for what they offer).
//
// In cluster mode the classes are the node.k8s.io/v1 RuntimeClasses the
// API server serves, followed with a list-and-watch; in standalone mode
// they are RuntimeClass manifests in files (--runtime-classes), since
// there is no API server to ask. A pod naming a class the node does not
// know fails its sandbox with upstream's error (`runtimeclass.node.k8s.io
// "x" not found`, a FailedCreatePodSandBox event) and is retried, so a
// class created later is picked up; it is never run with the default
// handler instead.
package runtimeclass

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/nodelet/nodelet/pkg/cluster/apiwatch"
	"github.com/nodelet/nodelet/pkg/cluster/kubeclient"
)

// Classes are the RuntimeClasses the node knows.
type Classes struct {
	store *syncStore
	// run follows the API server's classes until ctx ends; nil for a
	// fixed set.
	run func(ctx context.Context, store cache.Store)
}

// Static is a fixed set of classes (standalone mode; none at all when
// no file defines any).
func Static(classes []*nodev1.RuntimeClass) *Classes {
	store := newSyncStore()
	for _, rc := range classes {
		_ = store.Add(rc) // the key function cannot fail on a RuntimeClass
	}
	store.synced.Store(true)
	return &Classes{store: store}
}

// Watched are the classes the API server serves, kept current by Run.
func Watched(client kubeclient.Interface) *Classes {
	rcs := client.NodeV1().RuntimeClasses()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return rcs.List(ctx, o)
		},
		WatchFuncWithContext: rcs.Watch,
	}
	return &Classes{
		store: newSyncStore(),
		run: func(ctx context.Context, store cache.Store) {
			apiwatch.Reflect(ctx, "runtimeclasses", client, lw, &nodev1.RuntimeClass{}, store, nil)
		},
	}
}

// Run keeps the watched classes current until ctx ends.
func (c *Classes) Run(ctx context.Context) error {
	if c.run != nil {
		c.run(ctx, c.store)
	}
	return nil
}

// Handler is the runtime handler the named class names: "" (the
// runtime's default) for no class, and upstream's NotFound error for a
// class the node does not know.
func (c *Classes) Handler(name *string) (string, error) {
	if name == nil || *name == "" {
		return "", nil
	}
	if !c.store.synced.Load() {
		// Not "not found": the first list has not arrived yet, and the
		// sync that asked is retried.
		return "", fmt.Errorf("RuntimeClass %s: the node has not listed the RuntimeClasses yet", *name)
	}
	obj, ok, err := c.store.GetByKey(*name)
	if err != nil {
		return "", fmt.Errorf("failed to lookup RuntimeClass %s: %w", *name, err)
	}
	if !ok {
		return "", apierrors.NewNotFound(nodev1.Resource("runtimeclass"), *name)
	}
	return obj.(*nodev1.RuntimeClass).Handler, nil
}

// syncStore is a store that knows when its first list has arrived.
type syncStore struct {
	cache.Store
	synced atomic.Bool
}

func newSyncStore() *syncStore { return &syncStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)} }

// Replace is the reflector's list.
func (s *syncStore) Replace(items []any, version string) error {
	err := s.Store.Replace(items, version)
	s.synced.Store(true)
	return err
}

// Load reads RuntimeClass manifests (YAML or JSON, one class, or a
// RuntimeClassList, per file) from a file or a directory's files, in
// name order; a second class of the same name is an error, as is any
// other kind or a class without a handler.
func Load(path string) ([]*nodev1.RuntimeClass, error) {
	files := []string{path}
	if st, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("runtime classes: %w", err)
	} else if st.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("runtime classes: %w", err)
		}
		files = files[:0]
		for _, e := range entries {
			if !e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
		sort.Strings(files)
	}
	var out []*nodev1.RuntimeClass
	seen := map[string]string{}
	for _, f := range files {
		classes, err := decode(f)
		if err != nil {
			return nil, err
		}
		for _, rc := range classes {
			if first, dup := seen[rc.Name]; dup {
				return nil, fmt.Errorf("runtime classes: %s defines RuntimeClass %q again (first in %s)", f, rc.Name, first)
			}
			seen[rc.Name] = f
			out = append(out, rc)
		}
	}
	return out, nil
}

func decode(file string) ([]*nodev1.RuntimeClass, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("runtime classes: %w", err)
	}
	obj, gvk, err := kubeclient.Codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		msg, _, _ := strings.Cut(err.Error(), "\n")
		return nil, fmt.Errorf("runtime classes: %s: %s", file, msg)
	}
	var classes []*nodev1.RuntimeClass
	switch o := obj.(type) {
	case *nodev1.RuntimeClass:
		classes = append(classes, o)
	case *nodev1.RuntimeClassList:
		for i := range o.Items {
			classes = append(classes, &o.Items[i])
		}
	default:
		return nil, fmt.Errorf("runtime classes: %s holds a %s, want a node.k8s.io/v1 RuntimeClass or RuntimeClassList", file, gvk)
	}
	for _, rc := range classes {
		if rc.Name == "" || rc.Handler == "" {
			return nil, fmt.Errorf("runtime classes: %s: a RuntimeClass needs metadata.name and handler", file)
		}
	}
	return classes, nil
}
