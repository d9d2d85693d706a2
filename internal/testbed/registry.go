package testbed

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Registry is an in-process plain-HTTP registry. Repositories under
// private/ need basic auth; it counts manifest requests per repository so
// tests can tell whether the runtime pulled.
type Registry struct {
	Host string

	mu        sync.Mutex
	manifests map[string]int
	refused   map[string]int
}

// RegistryUser and RegistryPassword are the private repositories' credentials.
const RegistryUser, RegistryPassword = "puller", "s3cret"

// StartRegistry serves a registry for the test and tells cd's containerd
// to reach it over plain HTTP.
func StartRegistry(t *testing.T, cd *Containerd) *Registry {
	t.Helper()
	r := &Registry{manifests: map[string]int{}, refused: map[string]int{}}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasPrefix(req.URL.Path, "/v2/private/") {
			if u, p, ok := req.BasicAuth(); !ok || u != RegistryUser || p != RegistryPassword {
				repo, _, _ := strings.Cut(strings.TrimPrefix(req.URL.Path, "/v2/"), "/manifests/")
				r.mu.Lock()
				r.refused[repo]++
				r.mu.Unlock()
				w.Header().Set("WWW-Authenticate", `Basic realm="nodelet-test"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		if repo, _, ok := strings.Cut(strings.TrimPrefix(req.URL.Path, "/v2/"), "/manifests/"); ok && req.Method != http.MethodPut {
			r.mu.Lock()
			r.manifests[repo]++
			r.mu.Unlock()
		}
		inner.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.Host = strings.TrimPrefix(srv.URL, "http://")
	// containerd reaches it over plain HTTP only when told so.
	dir := filepath.Join(cd.RegistryConfig, r.Host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", srv.URL, srv.URL)
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { RemoveDir(dir) })
	return r
}

// Push copies the local busybox image to repo:tag and returns its name.
func (r *Registry) Push(t *testing.T, repoTag string) string {
	t.Helper()
	tag, err := name.NewTag(BusyboxImage)
	if err != nil {
		t.Fatal(err)
	}
	base, err := tarball.ImageFromPath(ImagesTar(), &tag)
	if err != nil {
		t.Fatal(err)
	}
	// A label makes each pushed image distinct from busybox, so that its
	// image ID is its own (and not in use by every busybox container).
	cfg, err := base.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.Config.Labels = map[string]string{"nodelet.test/pushed-as": repoTag}
	img, err := mutate.Config(base, cfg.Config)
	if err != nil {
		t.Fatal(err)
	}
	ref := r.Host + "/" + repoTag
	dst, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(dst, img, remote.WithAuth(&authn.Basic{Username: RegistryUser, Password: RegistryPassword})); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	return ref
}

// RefusedRequests counts the requests for a private repo refused for
// lack of credentials.
func (r *Registry) RefusedRequests(repo string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused[repo]
}

// ManifestRequests counts the manifest requests for repo.
func (r *Registry) ManifestRequests(repo string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.manifests[repo]
}

// Mirror makes the registry the one cd's containerd pulls from for each
// of hosts (registry.k8s.io, say), as a node's mirror configuration does:
// images keep their upstream names, and a host not named still fails as
// it would without a network.
func (r *Registry) Mirror(t *testing.T, cd *Containerd, hosts ...string) {
	t.Helper()
	for _, h := range hosts {
		dir := filepath.Join(cd.RegistryConfig, h)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		conf := fmt.Sprintf("server = %q\n\n[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", "https://"+h, r.Host)
		if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { RemoveDir(dir) })
	}
}

// PushTarball pushes every image of a docker-archive tarball, each under
// its own name with the registry host left out (so that a Mirror of that
// host serves it), and returns the names as the tarball gives them.
func (r *Registry) PushTarball(t *testing.T, path string) []string {
	t.Helper()
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	var names []string
	for _, desc := range m {
		for _, ref := range desc.RepoTags {
			tag, err := name.NewTag(ref)
			if err != nil {
				t.Fatal(err)
			}
			img, err := tarball.ImageFromPath(path, &tag)
			if err != nil {
				t.Fatal(err)
			}
			dst, err := name.ParseReference(r.Host+"/"+tag.RepositoryStr()+":"+tag.TagStr(), name.Insecure)
			if err != nil {
				t.Fatal(err)
			}
			if err := remote.Write(dst, img); err != nil {
				t.Fatalf("pushing %s: %v", ref, err)
			}
			names = append(names, tag.Name())
		}
	}
	return names
}
