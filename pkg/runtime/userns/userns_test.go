package userns

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

func pod(uid string, hostUsers *bool) *v1.Pod {
	p := &v1.Pod{Spec: v1.PodSpec{HostUsers: hostUsers}}
	p.UID = types.UID(uid)
	return p
}

// subIDs writes subordinate ID files with the given kubelet entries.
func subIDs(t *testing.T, uid, gid string) Options {
	t.Helper()
	dir := t.TempDir()
	o := Options{RootDir: filepath.Join(dir, "root"), MaxPods: 2,
		SubUID: filepath.Join(dir, "subuid"), SubGID: filepath.Join(dir, "subgid")}
	for file, entry := range map[string]string{o.SubUID: uid, o.SubGID: gid} {
		if err := os.WriteFile(file, []byte("root:100000:65536\n"+entry), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return o
}

// Pods that do not ask keep the node's namespace; pods that do get a
// range of their own from the node's, the same one every time, and never
// another pod's; the node's range runs out cleanly.
func TestRangesAreThePodsOwn(t *testing.T) {
	o := subIDs(t, "kubelet:131072:131072\n", "kubelet:131072:131072\n")
	a, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, hu := range []*bool{nil, ptr.To(true)} {
		ns, err := a.Namespace(pod("host", hu))
		if err != nil || ns.Mode != runtimeapi.NamespaceMode_NODE || len(ns.Uids) != 0 {
			t.Errorf("hostUsers %v: %v %v, want the node's namespace", hu, ns, err)
		}
	}
	first, err := a.Namespace(pod("a", ptr.To(false)))
	if err != nil {
		t.Fatal(err)
	}
	second, err := a.Namespace(pod("b", ptr.To(false)))
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []*runtimeapi.UserNamespace{first, second} {
		u := ns.Uids[0]
		if ns.Mode != runtimeapi.NamespaceMode_POD || u.ContainerId != 0 || u.Length != 65536 || (u.HostId != 131072 && u.HostId != 196608) || ns.Gids[0].HostId != u.HostId {
			t.Errorf("namespace %v: want a 65536-ID range of the node's, users and groups alike", ns)
		}
	}
	if first.Uids[0].HostId == second.Uids[0].HostId {
		t.Fatalf("two pods share host IDs from %d", first.Uids[0].HostId)
	}
	again, _ := a.Namespace(pod("a", ptr.To(false)))
	if again.Uids[0].HostId != first.Uids[0].HostId {
		t.Errorf("pod a moved from %d to %d", first.Uids[0].HostId, again.Uids[0].HostId)
	}
	if _, err := a.Namespace(pod("c", ptr.To(false))); err == nil || !strings.Contains(err.Error(), "no free range") {
		t.Errorf("a third pod in a two-pod range: %v", err)
	}
	a.Release("a")
	if err := os.RemoveAll(filepath.Join(o.RootDir, "pods", "a")); err != nil {
		t.Fatal(err)
	}
	third, err := a.Namespace(pod("c", ptr.To(false)))
	if err != nil || third.Uids[0].HostId != first.Uids[0].HostId {
		t.Errorf("after a's release, c got %v, %v; want a's old range", third, err)
	}
}

// A restarted node gives each pod the range written in its directory,
// and refuses to start over a range file it cannot trust.
func TestRangesSurviveARestart(t *testing.T) {
	o := subIDs(t, "", "")
	o.MaxPods = 110
	a, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	before, err := a.Namespace(pod("a", ptr.To(false)))
	if err != nil {
		t.Fatal(err)
	}
	if h := before.Uids[0].HostId; h < 65536 || h%65536 != 0 {
		t.Errorf("default range: first host ID %d", h)
	}
	data, _ := os.ReadFile(filepath.Join(o.RootDir, "pods", "a", "userns"))
	want := `{"uidMappings":[{"hostId":` // upstream's format
	if !strings.HasPrefix(string(data), want) {
		t.Errorf("range file %s, want upstream's format", data)
	}
	b, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.byPod["a"]; got*65536 != before.Uids[0].HostId {
		t.Errorf("after a restart pod a holds block %d, want first host ID %d", got, before.Uids[0].HostId)
	}
	after, _ := b.Namespace(pod("a", ptr.To(false)))
	if after.Uids[0].HostId != before.Uids[0].HostId {
		t.Errorf("after a restart pod a moved from %d to %d", before.Uids[0].HostId, after.Uids[0].HostId)
	}
	if err := os.WriteFile(filepath.Join(o.RootDir, "pods", "a", "userns"), []byte(`{"uidMappings":[{"hostId":0,"containerId":0,"length":65536}],"gidMappings":[{"hostId":0,"containerId":0,"length":65536}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(o); err == nil || !strings.Contains(err.Error(), "outside the node's range") {
		t.Errorf("a range file mapping host root: %v, want refused", err)
	}
}

// The node's range is checked as upstream checks it.
func TestNodeRange(t *testing.T) {
	for _, tc := range []struct{ uid, gid, err string }{
		{"kubelet:65536:6553600\n", "kubelet:65536:6553600\n", ""},
		{"kubelet:65536:6553600\n", "kubelet:131072:6553600\n", "differ"},
		{"kubelet:65536:6553600\n", "", "differ"},
		{"kubelet:100000:6553600\n", "kubelet:100000:6553600\n", "not a multiple"},
		{"kubelet:0:6553600\n", "kubelet:0:6553600\n", "at least"},
		{"kubelet:65536:65536\n", "kubelet:65536:65536\n", "not enough"},
		{"kubelet:x:1\n", "kubelet:x:1\n", "bad kubelet entry"},
	} {
		o := subIDs(t, tc.uid, tc.gid)
		_, err := New(o)
		if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q/%q: %v, want %q", tc.uid, tc.gid, err, tc.err)
		}
	}
	if _, err := New(Options{RootDir: t.TempDir(), IDsPerPod: 1000}); err == nil {
		t.Error("idsPerPod 1000 accepted")
	}
}
