package cm

import (
	"fmt"
	"path"
	"strings"

	"github.com/opencontainers/cgroups/systemd"
	"k8s.io/apimachinery/pkg/types"
)

// naming turns a cgroup's name, a list of components such as
// [kubepods burstable pod<uid>], into its path in the cgroup filesystem,
// as the kubelet's cgroup drivers do.
type naming interface {
	// path is the cgroup's path relative to the hierarchy root.
	path(parts []string) string
	// parseRoot reads cgroupRoot into leading components.
	parseRoot(root string) ([]string, error)
	// podUID reads a pod UID back from a pod cgroup's directory name.
	podUID(dir string) (types.UID, bool)
}

// cgroupfsNames are directories named after the components:
// /kubepods/burstable/pod<uid>.
type cgroupfsNames struct{}

func (cgroupfsNames) path(parts []string) string { return "/" + path.Join(parts...) }

func (cgroupfsNames) parseRoot(root string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(path.Clean("/"+root), "/") {
		if p != "" {
			out = append(out, p)
		}
	}
	return out, nil
}

func (cgroupfsNames) podUID(dir string) (types.UID, bool) {
	uid, ok := strings.CutPrefix(dir, podPrefix)
	return types.UID(uid), ok && uid != ""
}

// systemdNames are slices, each named after all the components joined by
// dashes (a dash within a component becomes an underscore), nested as
// systemd nests slices: /kubepods.slice/kubepods-burstable.slice/
// kubepods-burstable-pod<uid with underscores>.slice.
type systemdNames struct{}

const sliceSuffix = ".slice"

func (systemdNames) path(parts []string) string {
	if len(parts) == 0 {
		return "/"
	}
	escaped := make([]string, len(parts))
	for i, p := range parts {
		escaped[i] = strings.ReplaceAll(p, "-", "_")
	}
	expanded, err := systemd.ExpandSlice(strings.Join(escaped, "-") + sliceSuffix)
	if err != nil {
		// The components are nodelet's own and a pod UID: never invalid.
		panic(fmt.Sprintf("cgroup name %v: %v", parts, err))
	}
	return expanded
}

// parseRoot takes "/" or a slice ("nodes.slice", "/nodes.slice",
// "/nodes.slice/nodes-a.slice"): the slice's name is its components.
func (systemdNames) parseRoot(root string) ([]string, error) {
	base := path.Base(path.Clean("/" + root))
	if base == "/" {
		return nil, nil
	}
	name, ok := strings.CutSuffix(base, sliceSuffix)
	if !ok || name == "" || name == "-" {
		return nil, fmt.Errorf("cgroupRoot %q: with the systemd cgroup driver it must be / or a slice such as kubelet.slice", root)
	}
	var out []string
	for _, p := range strings.Split(name, "-") {
		out = append(out, strings.ReplaceAll(p, "_", "-"))
	}
	return out, nil
}

func (systemdNames) podUID(dir string) (types.UID, bool) {
	name, ok := strings.CutSuffix(dir, sliceSuffix)
	if !ok {
		return "", false
	}
	last := name[strings.LastIndex(name, "-")+1:]
	uid, ok := strings.CutPrefix(last, podPrefix)
	return types.UID(strings.ReplaceAll(uid, "_", "-")), ok && uid != ""
}
