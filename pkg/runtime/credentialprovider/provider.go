package credentialprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"
	"k8s.io/klog/v2"
	kubeletconfigv1 "k8s.io/kubelet/config/v1"
	credentialproviderv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
	"k8s.io/utils/clock"
)

// Auth is one registry glob's credentials, as a plugin answered them.
type Auth struct {
	Glob, Username, Password string
}

// Options configure the plugins.
type Options struct {
	Providers []kubeletconfigv1.CredentialProvider
	PluginDir string
	Clock     clock.PassiveClock
	// Timeout bounds one run of a plugin (the kubelet's: a minute).
	Timeout time.Duration
}

// Plugins asks the configured plugins for an image's credentials.
type Plugins struct {
	plugins  []*plugin
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
}

// plugin is one provider: its configuration, its cache of answers and the
// runs under way, so concurrent pulls of one image run it once.
type plugin struct {
	cfg     kubeletconfigv1.CredentialProvider
	path    string
	clock   clock.PassiveClock
	timeout time.Duration
	runs    singleflight.Group

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	auth      []Auth
	expiresAt time.Time
}

// The cache keys' scopes, as the plugin's answer names them.
const (
	cacheImage    = "Image"
	cacheRegistry = "Registry"
	cacheGlobal   = "Global"
	globalKey     = "global"
)

// New sets the plugins up.
func New(o Options) *Plugins {
	if o.Timeout <= 0 {
		o.Timeout = time.Minute
	}
	p := &Plugins{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "credential_provider_plugin_duration",
			Help: "Duration of execution in seconds for credential provider plugin", Buckets: prometheus.DefBuckets,
		}, []string{"plugin_name"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "credential_provider_plugin_errors",
			Help: "Number of errors from credential provider plugin",
		}, []string{"plugin_name"}),
	}
	for _, cfg := range o.Providers {
		p.plugins = append(p.plugins, &plugin{cfg: cfg, path: filepath.Join(o.PluginDir, cfg.Name), clock: o.Clock, timeout: o.Timeout, cache: map[string]cached{}})
	}
	return p
}

// Collectors are the plugins' metrics.
func (p *Plugins) Collectors() []prometheus.Collector {
	return []prometheus.Collector{p.duration, p.errors}
}

// Credentials asks every plugin whose matchImages cover the image
// (its repository, host/path as Repository gives it, which is what the
// request names, as the kubelet's does). A plugin that fails adds nothing,
// and its error is returned beside what the others gave.
func (p *Plugins) Credentials(ctx context.Context, repository string) ([]Auth, error) {
	host, path, _ := strings.Cut(repository, "/")
	var out []Auth
	var errs []error
	for _, pl := range p.plugins {
		if !pl.covers(host, path) {
			continue
		}
		auth, err := pl.credentials(ctx, repository, p)
		if err != nil {
			errs = append(errs, fmt.Errorf("credential provider %s: %w", pl.cfg.Name, err))
			continue
		}
		out = append(out, auth...)
	}
	return out, errors.Join(errs...)
}

func (pl *plugin) covers(host, path string) bool {
	for _, g := range pl.cfg.MatchImages {
		if ok, _ := Match(g, host, path); ok {
			return true
		}
	}
	return false
}

// credentials answers from the cache (the image's entry, its registry's,
// then the global one) or runs the plugin.
func (pl *plugin) credentials(ctx context.Context, repository string, m *Plugins) ([]Auth, error) {
	registry, _, _ := strings.Cut(repository, "/")
	now := pl.clock.Now()
	pl.mu.Lock()
	for key, e := range pl.cache {
		if !now.Before(e.expiresAt) {
			delete(pl.cache, key)
		}
	}
	for _, key := range []string{repository, registry, globalKey} {
		if e, ok := pl.cache[key]; ok {
			pl.mu.Unlock()
			return e.auth, nil
		}
	}
	pl.mu.Unlock()
	res, err, _ := pl.runs.Do(repository, func() (any, error) {
		start := pl.clock.Now()
		resp, err := pl.run(ctx, repository)
		m.duration.WithLabelValues(pl.cfg.Name).Observe(pl.clock.Since(start).Seconds())
		if err != nil {
			m.errors.WithLabelValues(pl.cfg.Name).Inc()
			return nil, err
		}
		return pl.remember(repository, registry, resp)
	})
	if err != nil {
		return nil, err
	}
	return res.([]Auth), nil
}

// remember caches an answer under the key its cacheKeyType names, for its
// cacheDuration (the provider's defaultCacheDuration when it gives none;
// 0 caches nothing).
func (pl *plugin) remember(repository, registry string, resp *credentialproviderv1.CredentialProviderResponse) ([]Auth, error) {
	var key string
	switch string(resp.CacheKeyType) {
	case cacheImage:
		key = repository
	case cacheRegistry:
		key = registry
	case cacheGlobal:
		key = globalKey
	default:
		return nil, fmt.Errorf("cacheKeyType %q is not one of Image, Registry, Global", resp.CacheKeyType)
	}
	var auth []Auth
	for glob, a := range resp.Auth {
		auth = append(auth, Auth{Glob: glob, Username: a.Username, Password: a.Password})
	}
	ttl := pl.cfg.DefaultCacheDuration.Duration
	if resp.CacheDuration != nil {
		ttl = resp.CacheDuration.Duration
	}
	if ttl > 0 {
		pl.mu.Lock()
		pl.cache[key] = cached{auth: auth, expiresAt: pl.clock.Now().Add(ttl)}
		pl.mu.Unlock()
	}
	return auth, nil
}

// run executes the plugin with the request on stdin, its configured
// arguments and environment (over nodelet's), and decodes its answer.
func (pl *plugin) run(ctx context.Context, repository string) (*credentialproviderv1.CredentialProviderResponse, error) {
	req, err := json.Marshal(map[string]string{"apiVersion": pl.cfg.APIVersion, "kind": "CredentialProviderRequest", "image": repository})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, pl.timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, pl.path, pl.cfg.Args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(req), &stdout, &stderr
	cmd.Env = os.Environ()
	for _, e := range pl.cfg.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	klog.V(4).InfoS("Running an image credential provider", "provider", pl.cfg.Name, "image", repository)
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("running %s for %s: %w: %s", pl.path, repository, err, strings.TrimSpace(stderr.String()))
	}
	return decodeResponse(stdout.Bytes(), pl.cfg.APIVersion)
}

// decodeResponse reads a CredentialProviderResponse strictly, of the
// provider's configured apiVersion.
func decodeResponse(data []byte, apiVersion string) (*credentialproviderv1.CredentialProviderResponse, error) {
	var resp credentialproviderv1.CredentialProviderResponse
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&resp); err != nil {
		return nil, fmt.Errorf("the plugin's answer is not a CredentialProviderResponse: %w", err)
	}
	if resp.Kind != "CredentialProviderResponse" || resp.APIVersion != apiVersion {
		return nil, fmt.Errorf("the plugin answered kind %q of %q, want CredentialProviderResponse of %s", resp.Kind, resp.APIVersion, apiVersion)
	}
	return &resp, nil
}
