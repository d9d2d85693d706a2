package podutil

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// recursiveReadOnly is resolved as upstream resolves it: IfPossible
// follows the handler, Enabled needs it, and either needs a read-only
// mount without propagation.
func TestResolveRecursiveReadOnly(t *testing.T) {
	mode := func(m v1.RecursiveReadOnlyMode) *v1.RecursiveReadOnlyMode { return &m }
	hostToContainer := v1.MountPropagationHostToContainer
	for _, tc := range []struct {
		name      string
		vm        v1.VolumeMount
		supported bool
		want      string
	}{
		{"unset", v1.VolumeMount{ReadOnly: true}, true, "false"},
		{"disabled", v1.VolumeMount{ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyDisabled)}, true, "false"},
		{"if possible, supported", v1.VolumeMount{ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyIfPossible)}, true, "true"},
		{"if possible, unsupported", v1.VolumeMount{ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyIfPossible)}, false, "false"},
		{"enabled, supported", v1.VolumeMount{ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyEnabled)}, true, "true"},
		{"enabled, unsupported", v1.VolumeMount{ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyEnabled)}, false, "error"},
		{"not read-only", v1.VolumeMount{RecursiveReadOnly: mode(v1.RecursiveReadOnlyEnabled)}, true, "error"},
		{"propagation", v1.VolumeMount{ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyIfPossible), MountPropagation: &hostToContainer}, true, "error"},
	} {
		on, err := ResolveRecursiveReadOnly(tc.vm, tc.supported)
		got := fmt.Sprint(on)
		if err != nil {
			got = "error"
		}
		if got != tc.want {
			t.Errorf("%s: %s (%v), want %s", tc.name, got, err, tc.want)
		}
	}
}
