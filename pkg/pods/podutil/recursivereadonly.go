package podutil

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// ResolveRecursiveReadOnly says whether a mount is made recursively
// read-only, given whether the runtime handler can.
func ResolveRecursiveReadOnly(vm v1.VolumeMount, supported bool) (bool, error) {
	if vm.RecursiveReadOnly == nil || *vm.RecursiveReadOnly == v1.RecursiveReadOnlyDisabled {
		return false, nil
	}
	if !vm.ReadOnly {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not read-only", vm.Name)
	}
	if vm.MountPropagation != nil && *vm.MountPropagation != v1.MountPropagationNone {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not compatible with propagation %q", vm.Name, *vm.MountPropagation)
	}
	switch *vm.RecursiveReadOnly {
	case v1.RecursiveReadOnlyIfPossible:
		return supported, nil
	case v1.RecursiveReadOnlyEnabled:
		if !supported {
			return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not supported by the runtime", vm.Name)
		}
		return true, nil
	}
	return false, fmt.Errorf("unknown recursive read-only mode %q", *vm.RecursiveReadOnly)
}
