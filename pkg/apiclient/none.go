package apiclient

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/volume"
)

// None stands in for the API server's clients on a standalone
// node: there is nowhere to mirror static pods to, no object to watch and
// no service, and a secret, configMap or token cannot be read. Only static
// pods run there.
type None struct{ volume.NoAPIServer }

func (None) CreateMirrorPod(context.Context, *v1.Pod) error { return nil }

func (None) DeleteMirrorPod(context.Context, string, *types.UID) (bool, error) {
	return false, nil
}

// Services is empty: only the variables of the pod itself are set.
func (None) Services(string) []*v1.Service { return nil }

func (None) RegisterPod(*v1.Pod)   {}
func (None) UnregisterPod(*v1.Pod) {}
