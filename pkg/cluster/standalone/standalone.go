// Package standalone is what stands in for the API server on a node that
// runs without one: only static pods run there, so there is nowhere to
// mirror them to, no service, and no secret, configMap, token, claim or
// volume to read. Every read fails with ErrNoAPIServer, which the pod's
// event and status name, and every write is a no-op.
//
// It is a leaf (it imports only the API types), so each consumer can
// default its own client to it without importing the others.
package standalone

import (
	"context"
	"errors"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ErrNoAPIServer is returned for what a pod refers to in the API server
// (a configMap, secret, token, claim or volume) on a node without one.
var ErrNoAPIServer = errors.New("needs an API server")

// API answers for the API server on a node without one.
type API struct{}

// IsAPI tells whether a client is API: a consumer refuses at admission
// what it could never read, rather than failing at every sync.
func IsAPI(client any) bool {
	_, ok := client.(API)
	return ok
}

func (API) GetSecret(_ context.Context, _, name string) (*v1.Secret, error) {
	return nil, fmt.Errorf("secret %q: a secret %w", name, ErrNoAPIServer)
}

func (API) GetConfigMap(_ context.Context, _, name string) (*v1.ConfigMap, error) {
	return nil, fmt.Errorf("configmap %q: a configmap %w", name, ErrNoAPIServer)
}

func (API) CreateToken(context.Context, string, string, *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	return nil, fmt.Errorf("a service account token %w", ErrNoAPIServer)
}

func (API) GetPersistentVolumeClaim(_ context.Context, _, name string) (*v1.PersistentVolumeClaim, error) {
	return nil, fmt.Errorf("persistentvolumeclaim %q: a claim %w", name, ErrNoAPIServer)
}

func (API) GetPersistentVolume(_ context.Context, name string) (*v1.PersistentVolume, error) {
	return nil, fmt.Errorf("persistentvolume %q: a volume %w", name, ErrNoAPIServer)
}

// CreateMirrorPod does nothing: there is nowhere to mirror a static pod.
func (API) CreateMirrorPod(context.Context, *v1.Pod) error { return nil }

// DeleteMirrorPod finds none.
func (API) DeleteMirrorPod(context.Context, string, *types.UID) (bool, error) {
	return false, nil
}

// Services is empty: only the variables of the pod itself are set.
func (API) Services(string) []*v1.Service { return nil }

// RegisterPod and UnregisterPod watch nothing.
func (API) RegisterPod(*v1.Pod)   {}
func (API) UnregisterPod(*v1.Pod) {}
