package kubeletconfig

import (
	"fmt"
	"maps"
	"slices"
)

// featureGate is a gate's state in the upstream kubelet nodelet replaces.
type featureGate struct {
	Default       bool
	PreRelease    string
	LockToDefault bool
}

// validateFeatureGates accepts each gate the upstream kubelet knows, set
// to its v1.37 default: nodelet implements every feature as it is by
// default in the release it replaces, so any other value would be a
// promise it does not keep.
func validateFeatureGates(gates map[string]bool) []error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(gates)) {
		g, ok := upstreamFeatureGates[name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("featureGates: unknown feature gate %q", name))
		case gates[name] != g.Default:
			errs = append(errs, fmt.Errorf("featureGates: %s=%t is not supported: nodelet implements %s as in the upstream kubelet %s by default (%t, %s); remove it or set it to %t",
				name, gates[name], name, KubernetesVersion, g.Default, g.PreRelease, g.Default))
		}
	}
	return errs
}
