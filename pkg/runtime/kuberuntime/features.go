package kuberuntime

import (
	v1 "k8s.io/api/core/v1"
	"sync/atomic"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Features is what the runtime says it supports, from its last status:
// pods asking for more are refused rather than run without it.
type Features struct {
	// Known is false until the runtime first answered.
	Known bool
	// SupplementalGroupsPolicy: the runtime can keep the image's groups
	// out (supplementalGroupsPolicy: Strict).
	SupplementalGroupsPolicy bool
	// Handlers are the runtime's handlers by name ("" is the default).
	Handlers map[string]HandlerFeatures
}

// HandlerFeatures is what one runtime handler supports.
type HandlerFeatures struct {
	RecursiveReadOnly bool
	UserNamespaces    bool
}

// Handler is the features of a handler; an unknown one supports nothing.
func (f Features) Handler(name string) HandlerFeatures { return f.Handlers[name] }

// PodFeatures is what the runtime handler of a pod's RuntimeClass
// supports: nothing for a class the node does not know (as upstream; the
// pod's sandbox fails naming the class).
func PodFeatures(features func() Features, classes RuntimeClasses) func(*v1.Pod) HandlerFeatures {
	return func(pod *v1.Pod) HandlerFeatures {
		handler, err := classes.Handler(pod.Spec.RuntimeClassName)
		if err != nil {
			return HandlerFeatures{}
		}
		return features().Handler(handler)
	}
}

func featuresOf(resp *runtimeapi.StatusResponse) Features {
	f := Features{Known: true, SupplementalGroupsPolicy: resp.GetFeatures().GetSupplementalGroupsPolicy(),
		Handlers: map[string]HandlerFeatures{}}
	for _, h := range resp.GetRuntimeHandlers() {
		f.Handlers[h.GetName()] = HandlerFeatures{
			RecursiveReadOnly: h.GetFeatures().GetRecursiveReadOnlyMounts(),
			UserNamespaces:    h.GetFeatures().GetUserNamespaces(),
		}
	}
	return f
}

// featureState keeps the features of the runtime's last status.
type featureState struct{ v atomic.Pointer[Features] }

func (s *featureState) set(f Features) { s.v.Store(&f) }

func (s *featureState) get() Features {
	if f := s.v.Load(); f != nil {
		return *f
	}
	return Features{}
}
