package kubeletconfig

import (
	"encoding/json"
	"reflect"
	"testing"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// An empty configuration, defaulted, shows upstream's defaults in JSON as
// /configz serves it: a setting left out reads as false or zero to a
// reader (upstream's node e2e read cgroupsPerQOS false and skipped its
// PodOverhead check).
func TestDefaultsAsConfigzShowsThem(t *testing.T) {
	var c kubeletv1beta1.KubeletConfiguration
	SetDefaults(&c)
	b, err := json.Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"cgroupsPerQOS": true, "enableControllerAttachDetach": true, "enableDebuggingHandlers": true,
		"localStorageCapacityIsolation": true, "seccompDefault": false, "podPidsLimit": float64(-1),
		"cpuCFSQuotaPeriod": "100ms", "maxOpenFiles": float64(1000000), "registryPullQPS": float64(5),
		"registryBurst": float64(10), "nodeStatusMaxImages": float64(50), "oomScoreAdj": float64(-999),
		"hairpinMode": "promiscuous-bridge", "configMapAndSecretChangeDetectionStrategy": "Watch",
		"serializeImagePulls": true, "imagePullCredentialsVerificationPolicy": "NeverVerifyPreloadedImages",
	} {
		if !reflect.DeepEqual(got[k], want) {
			t.Errorf("%s: %v (%T), want %v", k, got[k], got[k], want)
		}
	}
	if e, _ := got["enforceNodeAllocatable"].([]any); len(e) != 1 || e[0] != "pods" {
		t.Errorf("enforceNodeAllocatable %v, want [pods]", got["enforceNodeAllocatable"])
	}
	// Parallel pulls allowed: not serialized, as upstream defaults it.
	p := kubeletv1beta1.KubeletConfiguration{MaxParallelImagePulls: new(int32(4))}
	SetDefaults(&p)
	if *p.SerializeImagePulls {
		t.Error("maxParallelImagePulls 4 left serializeImagePulls true")
	}
}
