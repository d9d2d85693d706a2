package kuberuntime

import (
	"encoding/json"
	"hash/fnv"
	"strconv"

	v1 "k8s.io/api/core/v1"
)

// HashContainer fingerprints the parts of a container spec whose change
// requires a new container. It hashes the container's JSON form: fields
// that are unset are omitted from JSON, so a newer API version adding a
// field, or a newer nodelet, leaves the hash of an unchanged spec alone and
// upgrading does not restart running containers. Resources are left out
// because changing them does not need a new container, and because a pod's
// requests may be adjusted in place.
func HashContainer(c *v1.Container) string {
	cc := c.DeepCopy()
	cc.Resources = v1.ResourceRequirements{}
	cc.ResizePolicy = nil
	b, err := json.Marshal(cc)
	if err != nil {
		// A v1.Container always marshals; this is unreachable in practice.
		b = []byte(c.Name)
	}
	h := fnv.New32a()
	h.Write(b)
	return strconv.FormatUint(uint64(h.Sum32()), 16)
}
