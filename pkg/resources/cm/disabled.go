package cm

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Disabled is the container manager with cgroupsPerQOS off: pods run in
// the runtime's default cgroups, which nodelet neither makes nor removes.
// It stands in for a Manager so no caller has to ask which it has.
type Disabled struct{}

// PodCgroup is empty: the runtime picks the parent.
func (Disabled) PodCgroup(*v1.Pod) string { return "" }

// Exists is true: there is nothing to create.
func (Disabled) Exists(*v1.Pod) bool { return true }

func (Disabled) EnsureExists(*v1.Pod) error                { return nil }
func (Disabled) Destroy(string) error                      { return nil }
func (Disabled) PodCgroups() (map[types.UID]string, error) { return nil, nil }
func (Disabled) UpdateQoS([]*v1.Pod) error                 { return nil }
