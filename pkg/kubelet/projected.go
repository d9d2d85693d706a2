package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
)

// APIObjects is what volumes read from the API server.
type APIObjects interface {
	SecretGetter
	GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
	CreateToken(ctx context.Context, namespace, serviceAccount string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
}

// defaultTokenExpiration is a projected token's lifetime when the pod
// does not say (upstream's default, 1 h plus 7 s).
const defaultTokenExpiration = 3607

// projectedFile is one file of a projected volume.
type projectedFile struct {
	data []byte
	mode os.FileMode
}

// projections turns a configMap, secret, downwardAPI or projected volume
// into the list of its sources and its default file mode.
func projections(vol *v1.Volume) ([]v1.VolumeProjection, *int32, bool) {
	switch {
	case vol.Projected != nil:
		return vol.Projected.Sources, vol.Projected.DefaultMode, true
	case vol.ConfigMap != nil:
		s := vol.ConfigMap
		return []v1.VolumeProjection{{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: s.LocalObjectReference, Items: s.Items, Optional: s.Optional}}}, s.DefaultMode, true
	case vol.Secret != nil:
		s := vol.Secret
		return []v1.VolumeProjection{{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: s.SecretName}, Items: s.Items, Optional: s.Optional}}}, s.DefaultMode, true
	case vol.DownwardAPI != nil:
		return []v1.VolumeProjection{{DownwardAPI: &v1.DownwardAPIProjection{Items: vol.DownwardAPI.Items}}}, vol.DownwardAPI.DefaultMode, true
	}
	return nil, nil, false
}

// projectedVolume writes the files of a projected (or configMap, secret,
// downwardAPI) volume and returns its directory. Each file is replaced
// atomically, so a container never reads half a token.
func (o *ContainerOptions) projectedVolume(ctx context.Context, pod *v1.Pod, vol *v1.Volume, sources []v1.VolumeProjection, defaultMode *int32) (string, error) {
	mode := os.FileMode(0o644)
	if defaultMode != nil {
		mode = os.FileMode(*defaultMode)
	}
	files := map[string]projectedFile{}
	add := func(path string, data []byte, itemMode *int32) error {
		if filepath.IsAbs(path) || strings.HasPrefix(filepath.Clean(path), "..") {
			return fmt.Errorf("path %q must be relative and inside the volume", path)
		}
		m := mode
		if itemMode != nil {
			m = os.FileMode(*itemMode)
		}
		files[filepath.Clean(path)] = projectedFile{data: data, mode: m}
		return nil
	}
	for _, src := range sources {
		var err error
		switch {
		case src.ServiceAccountToken != nil:
			var token string
			if token, err = o.tokens.get(ctx, o.api, pod, src.ServiceAccountToken); err == nil {
				err = add(src.ServiceAccountToken.Path, []byte(token), nil)
			}
		case src.ConfigMap != nil:
			err = o.projectKeys(ctx, pod, "configMap", src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, add)
		case src.Secret != nil:
			err = o.projectKeys(ctx, pod, "secret", src.Secret.Name, src.Secret.Items, src.Secret.Optional, add)
		case src.DownwardAPI != nil:
			for _, item := range src.DownwardAPI.Items {
				if item.FieldRef == nil {
					err = fmt.Errorf("downwardAPI %q: only fieldRef is supported", item.Path)
					break
				}
				var v string
				if v, err = o.fieldRef(pod, item.FieldRef.FieldPath, nil); err != nil {
					break
				}
				if err = add(item.Path, []byte(v), item.Mode); err != nil {
					break
				}
			}
		default:
			err = fmt.Errorf("unsupported projection (only serviceAccountToken, configMap, secret and downwardAPI are)")
		}
		if err != nil {
			return "", fmt.Errorf("volume %q: %w", vol.Name, err)
		}
	}
	dir := o.dirs.volume(pod.UID, "projected", vol.Name)
	for path, f := range files {
		if err := writeAtomic(filepath.Join(dir, path), f.data, f.mode); err != nil {
			return "", fmt.Errorf("volume %q: %w", vol.Name, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("volume %q: %w", vol.Name, err)
	}
	return dir, nil
}

// projectKeys adds the keys of a configMap or secret: the items listed,
// or every key when none are.
func (o *ContainerOptions) projectKeys(ctx context.Context, pod *v1.Pod, kind, name string, items []v1.KeyToPath, optional *bool, add func(string, []byte, *int32) error) error {
	if o.api == nil {
		return fmt.Errorf("%s %q: a %s needs an API server", kind, name, kind)
	}
	data := map[string][]byte{}
	var err error
	if kind == "secret" {
		var s *v1.Secret
		if s, err = o.api.GetSecret(ctx, pod.Namespace, name); err == nil {
			data = s.Data
		}
	} else {
		var cm *v1.ConfigMap
		if cm, err = o.api.GetConfigMap(ctx, pod.Namespace, name); err == nil {
			for k, v := range cm.Data {
				data[k] = []byte(v)
			}
			for k, v := range cm.BinaryData {
				data[k] = v
			}
		}
	}
	isOptional := optional != nil && *optional
	switch {
	case apierrors.IsNotFound(err) && isOptional:
		return nil
	case err != nil:
		return fmt.Errorf("%s %q: %w", kind, name, err)
	}
	if len(items) == 0 {
		for k, v := range data {
			if err := add(k, v, nil); err != nil {
				return err
			}
		}
		return nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if isOptional {
				continue
			}
			return fmt.Errorf("%s %q has no key %q", kind, name, it.Key)
		}
		if err := add(it.Path, v, it.Mode); err != nil {
			return err
		}
	}
	return nil
}

// writeAtomic replaces a file by renaming a complete copy over it.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), mode); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// tokenCache keeps the service account tokens issued for pods, and asks
// for a new one once 80% of a token's lifetime has passed (as upstream's
// token manager does).
type tokenCache struct {
	clock clock.PassiveClock

	mu     sync.Mutex
	tokens map[string]cachedToken
}

type cachedToken struct {
	token   string
	refresh time.Time
	expires time.Time
}

func newTokenCache(clk clock.PassiveClock) *tokenCache {
	return &tokenCache{clock: clk, tokens: map[string]cachedToken{}}
}

func (c *tokenCache) get(ctx context.Context, api APIObjects, pod *v1.Pod, src *v1.ServiceAccountTokenProjection) (string, error) {
	if api == nil {
		return "", fmt.Errorf("a service account token needs an API server")
	}
	seconds := int64(defaultTokenExpiration)
	if src.ExpirationSeconds != nil {
		seconds = *src.ExpirationSeconds
	}
	key := fmt.Sprintf("%s/%s/%d", pod.UID, src.Audience, seconds)
	now := c.clock.Now()
	c.mu.Lock()
	t, ok := c.tokens[key]
	c.mu.Unlock()
	if ok && now.Before(t.refresh) {
		return t.token, nil
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &seconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
	}}
	if src.Audience != "" {
		req.Spec.Audiences = []string{src.Audience}
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	resp, err := api.CreateToken(ctx, pod.Namespace, sa, req)
	if err != nil {
		return "", fmt.Errorf("requesting a token for service account %s/%s: %w", pod.Namespace, sa, err)
	}
	expires := resp.Status.ExpirationTimestamp.Time
	t = cachedToken{token: resp.Status.Token, expires: expires, refresh: now.Add(expires.Sub(now) * 8 / 10)}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Tokens of pods long gone expire: drop them here rather than track
	// every pod's end.
	for k, old := range c.tokens {
		if now.After(old.expires) {
			delete(c.tokens, k)
		}
	}
	c.tokens[key] = t
	return t.token, nil
}
