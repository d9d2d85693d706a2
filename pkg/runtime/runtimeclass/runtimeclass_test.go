package runtimeclass

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/kubeclienttest"
)

func class(name, handler string) *nodev1.RuntimeClass {
	return &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: handler}
}

func TestHandler(t *testing.T) {
	c := Static([]*nodev1.RuntimeClass{class("fast", "crun")})
	for _, tc := range []struct {
		name    *string
		handler string
		err     string
	}{
		{nil, "", ""},
		{ptr.To(""), "", ""},
		{ptr.To("fast"), "crun", ""},
		{ptr.To("crun"), "", `runtimeclass.node.k8s.io "crun" not found`},
	} {
		h, err := c.Handler(tc.name)
		if h != tc.handler || (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("Handler(%v) = %q, %v; want %q, %q", tc.name, h, err, tc.handler, tc.err)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("%v is not NotFound", err)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: fast}\nhandler: crun\noverhead: {podFixed: {cpu: 100m}}\n")
	write("b.json", `{"apiVersion":"node.k8s.io/v1","kind":"RuntimeClassList","items":[{"metadata":{"name":"sandboxed"},"handler":"runsc"}]}`)
	write(".hidden", "not a manifest")
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "fast" || got[0].Handler != "crun" || got[0].Overhead == nil || got[1].Handler != "runsc" {
		t.Fatalf("loaded %+v", got)
	}
	one, err := Load(filepath.Join(dir, "a.yaml"))
	if err != nil || len(one) != 1 {
		t.Fatalf("one file: %v %v", one, err)
	}
	for name, body := range map[string]string{
		"dup.yaml":       "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: fast}\nhandler: runc\n",
		"pod.yaml":       "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n",
		"nohandler.yaml": "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: x}\n",
		"garbage.yaml":   "{{{",
	} {
		bad := t.TempDir()
		for _, f := range []string{"a.yaml"} {
			b, _ := os.ReadFile(filepath.Join(dir, f))
			_ = os.WriteFile(filepath.Join(bad, f), b, 0o644)
		}
		if err := os.WriteFile(filepath.Join(bad, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error %v, want one naming the file", name, err)
		}
	}
	if _, err := Load(filepath.Join(dir, "absent")); err == nil {
		t.Error("a missing path loaded")
	}
}

// The API server's classes: a lookup before the first list is not "not
// found"; a class created later is found, and one deleted is gone.
func TestWatched(t *testing.T) {
	cs := fake.NewClientset(class("fast", "crun"))
	c := Watched(kubeclienttest.Wrap(cs))
	if _, err := c.Handler(ptr.To("fast")); err == nil || apierrors.IsNotFound(err) {
		t.Fatalf("before the first list: %v, want a not-yet-listed error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor(t, c, "fast", "crun")
	if _, err := cs.NodeV1().RuntimeClasses().Create(ctx, class("sandboxed", "runsc"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, c, "sandboxed", "runsc")
	if err := cs.NodeV1().RuntimeClasses().Delete(ctx, "fast", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, c, "fast", "")
}

// waitFor polls until name resolves to handler ("" for not found).
func waitFor(t *testing.T, c *Classes, name, handler string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := c.Handler(&name)
		if (handler == "" && apierrors.IsNotFound(err)) || (handler != "" && err == nil && h == handler) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %q, %v; want %q", name, h, err, handler)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
