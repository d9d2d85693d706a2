package kubelet

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/volume"
)

// NoAPIServer stands in for the API server's clients on a standalone
// node: there is nowhere to mirror static pods to, no object to watch and
// no service, and a secret, configMap or token cannot be read. Only static
// pods run there.
type NoAPIServer struct{ volume.NoAPIServer }

var (
	_ MirrorPods   = NoAPIServer{}
	_ SecretGetter = NoAPIServer{}
	_ podObjects   = NoAPIServer{}
)

func (NoAPIServer) CreateMirrorPod(context.Context, *v1.Pod) error { return nil }

func (NoAPIServer) DeleteMirrorPod(context.Context, string, *types.UID) (bool, error) {
	return false, nil
}

// Services is empty: only the variables of the pod itself are set.
func (NoAPIServer) Services(string) []*v1.Service { return nil }

func (NoAPIServer) RegisterPod(*v1.Pod)   {}
func (NoAPIServer) UnregisterPod(*v1.Pod) {}

// orNone is v, or the null object when v is nil: optional dependencies
// are never nil inside the package.
func orNone[T comparable](v, none T) T {
	var unset T
	if v == unset {
		return none
	}
	return v
}
