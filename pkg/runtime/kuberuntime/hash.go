package kuberuntime

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/dump"
)

// HashContainer is the hash the upstream kubelet records on a container
// (label io.kubernetes.container.hash) and compares with the spec to
// decide whether the container must be replaced. nodelet computes it the
// same way, so a node moved from the upstream kubelet to nodelet, or
// back, keeps its containers: FNV-32a over the dump of the JSON of the
// only fields of a running pod's container that may change, its name and
// image. Every other field of an API pod is immutable, and a static pod
// whose manifest changes gets a new UID, so it is replaced as a whole.
func HashContainer(c *v1.Container) string {
	b, err := json.Marshal(map[string]string{"name": c.Name, "image": c.Image})
	if err != nil {
		// A map of strings always marshals; this is unreachable.
		b = []byte(c.Name + c.Image)
	}
	h := fnv.New32a()
	fmt.Fprintf(h, "%v", dump.ForHash(b))
	return strconv.FormatUint(uint64(h.Sum32()), 16)
}

// specUnchanged reports whether a container's recorded hash still matches
// its spec: upstream's hash, or the one nodelet recorded before it used
// upstream's, so that upgrading nodelet restarts nothing either.
func specUnchanged(recorded string, c *v1.Container) bool {
	return recorded == HashContainer(c) || recorded == legacyHash(c)
}

// legacyHash is the hash nodelet recorded until it adopted upstream's:
// FNV-32a over the container's JSON without its resources.
func legacyHash(c *v1.Container) string {
	cc := c.DeepCopy()
	cc.Resources = v1.ResourceRequirements{}
	cc.ResizePolicy = nil
	b, err := json.Marshal(cc)
	if err != nil {
		b = []byte(c.Name)
	}
	h := fnv.New32a()
	h.Write(b)
	return strconv.FormatUint(uint64(h.Sum32()), 16)
}
