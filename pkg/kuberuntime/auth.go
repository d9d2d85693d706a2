package kuberuntime

import (
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// authConfigs picks the credentials from the pod's pull secrets that apply
// to the image's registry. Pull secrets arrive with cluster mode; until
// then there are none and pulls are anonymous.
func authConfigs(image string, secrets []v1.Secret) []*runtimeapi.AuthConfig {
	return nil
}
