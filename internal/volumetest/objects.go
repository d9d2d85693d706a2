// Package volumetest is an in-memory API server for the volume manager's
// and the container options' unit tests: configMaps, secrets, services
// and service account tokens.
package volumetest

import (
	"context"
	"fmt"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
)

// Objects holds the objects by name (namespaces are not told apart).
type Objects struct {
	Clock clock.PassiveClock

	mu         sync.Mutex
	ConfigMaps map[string]*v1.ConfigMap
	Secrets    map[string]*v1.Secret
	Svcs       []*v1.Service
	tokens     int
	// tokenErrs are the answers of the next token requests, in order.
	tokenErrs []error
}

// FailTokens makes the next token requests fail with errs, in order.
func (f *Objects) FailTokens(errs ...error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokenErrs = append(f.tokenErrs, errs...)
}

// New returns an empty fake.
func New(clk clock.PassiveClock) *Objects {
	return &Objects{Clock: clk, ConfigMaps: map[string]*v1.ConfigMap{}, Secrets: map[string]*v1.Secret{}}
}

// SetConfigMap adds or replaces a configMap.
func (f *Objects) SetConfigMap(name string, data map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ConfigMaps[name] = &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}
}

// SetSecret adds or replaces a secret.
func (f *Objects) SetSecret(name string, data map[string][]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Secrets[name] = &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}
}

// GetSecret returns a secret or NotFound.
func (f *Objects) GetSecret(ctx context.Context, ns, name string) (*v1.Secret, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.Secrets[name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
}

// GetConfigMap returns a configMap or NotFound.
func (f *Objects) GetConfigMap(ctx context.Context, ns, name string) (*v1.ConfigMap, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.ConfigMaps[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
}

// Services returns the services of a namespace.
func (f *Objects) Services(namespace string) []*v1.Service {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*v1.Service
	for _, s := range f.Svcs {
		if s.Namespace == namespace {
			out = append(out, s)
		}
	}
	return out
}

// CreateToken issues token-<sa>-<n>, bound as asked, expiring as asked.
func (f *Objects) CreateToken(ctx context.Context, ns, sa string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.tokenErrs) > 0 {
		err := f.tokenErrs[0]
		f.tokenErrs = f.tokenErrs[1:]
		return nil, err
	}
	f.tokens++
	if req.Spec.BoundObjectRef == nil || req.Spec.BoundObjectRef.Kind != "Pod" {
		return nil, fmt.Errorf("token not bound to the pod")
	}
	out := req.DeepCopy()
	out.Status.Token = fmt.Sprintf("token-%s-%d", sa, f.tokens)
	out.Status.ExpirationTimestamp = metav1.NewTime(f.Clock.Now().Add(time.Duration(*req.Spec.ExpirationSeconds) * time.Second))
	return out, nil
}

// Tokens counts the tokens issued.
func (f *Objects) Tokens() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tokens
}
