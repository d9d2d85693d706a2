package cm

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// TestSystemdNames: the systemd driver names slices as the kubelet's
// does, dashes in a UID becoming underscores, and reads the UID back.
func TestSystemdNames(t *testing.T) {
	m, err := newManager(nil, Options{Systemd: true})
	if err != nil {
		t.Fatal(err)
	}
	const uid = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
	const escaped = "1b4e28ba_2fa1_11d2_883f_0016d3cca427"
	for _, tc := range []struct {
		pod  *v1.Pod
		want string
	}{
		{podWith(uid, rr("cpu=1,memory=1Gi", "cpu=1,memory=1Gi")), "/kubepods.slice/kubepods-pod" + escaped + ".slice"},
		{podWith(uid, rr("cpu=1", "")), "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + escaped + ".slice"},
		{podWith(uid), "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + escaped + ".slice"},
	} {
		got := m.PodCgroup(tc.pod)
		if got != tc.want {
			t.Errorf("pod cgroup %s, want %s", got, tc.want)
		}
		dir := got[len(m.QoSCgroup(podutil.QOSClass(tc.pod)))+1:]
		if back, ok := m.names.podUID(dir); !ok || back != types.UID(uid) {
			t.Errorf("%s reads back as %q %v", dir, back, ok)
		}
	}
	if _, ok := m.names.podUID("kubepods-burstable.slice"); ok {
		t.Error("a QoS slice read as a pod's")
	}
	nested, err := newManager(nil, Options{Systemd: true, CgroupRoot: "/nodes.slice/nodes-a_b.slice"})
	if err != nil {
		t.Fatal(err)
	}
	if got := nested.QoSCgroup(v1.PodQOSBurstable); got != "/nodes.slice/nodes-a_b.slice/nodes-a_b-kubepods.slice/nodes-a_b-kubepods-burstable.slice" {
		t.Errorf("under a root slice: %s", got)
	}
	if _, err := newManager(nil, Options{Systemd: true, CgroupRoot: "/nodelet"}); err == nil {
		t.Error("a cgroupRoot that is not a slice was taken with the systemd driver")
	}
}

// TestCgroupfsNames: the cgroupfs driver's names are directories.
func TestCgroupfsNames(t *testing.T) {
	m, err := newManager(nil, Options{CgroupRoot: "/test/"})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.PodCgroup(podWith("u-1", rr("cpu=1", ""))); got != "/test/kubepods/burstable/podu-1" {
		t.Errorf("pod cgroup %s", got)
	}
	if uid, ok := m.names.podUID("podu-1"); !ok || uid != "u-1" {
		t.Errorf("read back %q", uid)
	}
}
