package poddirs

import (
	"testing"

	"github.com/moby/sys/mountinfo"
)

// The root directory's mount is the deepest mount point containing it,
// the last one stacked there, and it is shared when its optional fields
// say so.
func TestMountOfAndShared(t *testing.T) {
	infos := []*mountinfo.Info{
		{Mountpoint: "/", Optional: ""},
		{Mountpoint: "/var", Optional: "shared:1"},
		{Mountpoint: "/var/lib/kubelet", Optional: ""},
		{Mountpoint: "/var/lib/kubelet", Optional: "shared:7 master:2"},
		{Mountpoint: "/var/lib/kubeletx", Optional: "shared:9"},
	}
	for path, want := range map[string]string{
		"/var/lib/kubelet":          "shared:7 master:2",
		"/var/lib/kubelet/pods/x":   "shared:7 master:2",
		"/var/lib/nodelet":          "shared:1",
		"/srv/kubelet":              "",
		"/var/lib/kubeletx/anyting": "shared:9",
	} {
		if m := mountOf(infos, path); m == nil || m.Optional != want {
			t.Errorf("%s is on %+v, want the mount with %q", path, m, want)
		}
	}
	if isShared(infos[0]) || !isShared(infos[3]) || isShared(&mountinfo.Info{Optional: "master:3"}) {
		t.Error("propagation misread")
	}
}
