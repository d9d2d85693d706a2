package volume

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/nodelet/nodelet/pkg/cluster/standalone"
)

// fakeClaims holds claims and volumes, counting reads.
type fakeClaims struct {
	pvcs  map[string]*v1.PersistentVolumeClaim
	pvs   map[string]*v1.PersistentVolume
	reads int
}

func (f *fakeClaims) GetPersistentVolumeClaim(_ context.Context, _, name string) (*v1.PersistentVolumeClaim, error) {
	f.reads++
	if c, ok := f.pvcs[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("persistentvolumeclaims"), name)
}

func (f *fakeClaims) GetPersistentVolume(_ context.Context, name string) (*v1.PersistentVolume, error) {
	f.reads++
	if p, ok := f.pvs[name]; ok {
		return p, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("persistentvolumes"), name)
}

// bind makes a bound claim and its volume.
func (f *fakeClaims) bind(claim string, uid types.UID, src v1.PersistentVolumeSource, tweak func(*v1.PersistentVolume)) {
	f.pvcs[claim] = &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: "ns", UID: uid},
		Spec: v1.PersistentVolumeClaimSpec{VolumeName: "pv-" + claim}, Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound}}
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-" + claim},
		Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: src, ClaimRef: &v1.ObjectReference{Name: claim, Namespace: "ns", UID: uid}}}
	if tweak != nil {
		tweak(pv)
	}
	f.pvs[pv.Name] = pv
}

func claimVolume(name, claim string, readOnly bool) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly}}}
}

func affinity(host string) func(*v1.PersistentVolume) {
	return func(pv *v1.PersistentVolume) {
		pv.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{host}}},
		}}}}
	}
}

// A claim resolves to its bound volume's host path (hostPath and local,
// the local one on its own node only); every other case fails clearly
// and the pod waits. A claim set up once is not asked about again.
func TestClaims(t *testing.T) {
	dir := t.TempDir()
	claims := &fakeClaims{pvcs: map[string]*v1.PersistentVolumeClaim{}, pvs: map[string]*v1.PersistentVolume{}}
	claims.bind("host", "c1", v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: dir}}, nil)
	claims.bind("local", "c2", v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: dir}}, affinity("n1"))
	claims.bind("elsewhere", "c3", v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: dir}}, affinity("n2"))
	claims.bind("csi", "c4", v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h"}}, nil)
	claims.bind("block", "c5", v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: dir}}, func(pv *v1.PersistentVolume) {
		pv.Spec.VolumeMode = new(v1.PersistentVolumeBlock)
	})
	claims.bind("stolen", "c6", v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: dir}}, nil)
	claims.pvs["pv-stolen"].Spec.ClaimRef.UID = "someone-else"
	claims.pvcs["pending"] = &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "pending", Namespace: "ns"},
		Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimPending}}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"kubernetes.io/hostname": "n1"}}}
	m := NewManager(Options{RootDir: t.TempDir(), Claims: claims, Node: func() *v1.Node { return node }, Recorder: record.NewFakeRecorder(100)})
	for _, tc := range []struct{ claim, want string }{
		{"host", ""},
		{"local", ""},
		{"elsewhere", "volume node affinity conflict"},
		{"csi", "unsupported volume type"},
		{"block", "volumeMode Block is not supported yet"},
		{"stolen", `is not bound to claim "stolen"`},
		{"pending", "is not bound to a volume yet (phase Pending)"},
		{"missing", "not found"},
	} {
		pod := testPod(claimVolume("data", tc.claim, false))
		pod.UID = types.UID("pod-" + tc.claim)
		err := m.WaitForAttachAndMount(context.Background(), pod)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.claim, err)
		case tc.want == "":
			if p, ok := m.HostPath(pod.UID, "data"); !ok || p != dir {
				t.Errorf("%s: host path %q", tc.claim, p)
			}
		case err == nil || !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s: error %v, want %q", tc.claim, err, tc.want)
		}
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	reads := claims.reads
	if err := m.WaitForAttachAndMount(context.Background(), podWithUID("pod-host", claimVolume("data", "host", false))); err != nil {
		t.Fatal(err)
	}
	if claims.reads != reads {
		t.Errorf("a claim set up before was read again (%d reads)", claims.reads-reads)
	}
}

func podWithUID(uid types.UID, vols ...v1.Volume) *v1.Pod {
	p := testPod(vols...)
	p.UID = uid
	return p
}

// A generic ephemeral volume mounts the claim the ephemeral volume
// controller made for the pod, and no other claim of that name.
func TestEphemeralVolumeClaims(t *testing.T) {
	dir := t.TempDir()
	claims := &fakeClaims{pvcs: map[string]*v1.PersistentVolumeClaim{}, pvs: map[string]*v1.PersistentVolume{}}
	claims.bind("p-scratch", "c1", v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: dir}}, nil)
	m := NewManager(Options{RootDir: t.TempDir(), Claims: claims})
	vol := v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}}
	pod := testPod(vol)
	err := m.WaitForAttachAndMount(context.Background(), pod)
	if err == nil || !strings.Contains(err.Error(), "was not created for this pod") {
		t.Fatalf("a claim the pod does not own: %v", err)
	}
	claims.pvcs["p-scratch"].OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p", UID: pod.UID, Controller: new(true)}}
	if err := m.WaitForAttachAndMount(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if p, _ := m.HostPath(pod.UID, "scratch"); p != dir {
		t.Errorf("host path %q", p)
	}
}

// A claim is not for a static pod, nor for a node without an API server.
func TestClaimsNeedAnAPIServer(t *testing.T) {
	m := NewManager(Options{RootDir: t.TempDir()})
	err := m.WaitForAttachAndMount(context.Background(), testPod(claimVolume("data", "c", false)))
	if !errors.Is(err, standalone.ErrNoAPIServer) {
		t.Errorf("standalone: %v", err)
	}
	static := testPod(claimVolume("data", "c", false))
	static.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	if err := m.WaitForAttachAndMount(context.Background(), static); !errors.Is(err, ErrStaticPodAPIObject) {
		t.Errorf("static pod: %v", err)
	}
}

func TestReadOnlyClaims(t *testing.T) {
	pod := testPod(claimVolume("ro", "c", true), claimVolume("rw", "c", false))
	if !ReadOnly(pod, "ro") || ReadOnly(pod, "rw") || ReadOnly(pod, "none") {
		t.Error("readOnly claims")
	}
}

// configMap, secret, downwardAPI and projected volumes are mounted
// read-only, as is a claim marked readOnly; other volumes are not.
func TestMountedReadOnly(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{Volumes: []v1.Volume{
		{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}},
		{Name: "secret", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{}}},
		{Name: "downward", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{}}},
		{Name: "projected", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{}}},
		{Name: "ro-claim", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ReadOnly: true}}},
		{Name: "claim", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{}}},
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/x"}}},
	}}}
	for name, want := range map[string]bool{"cm": true, "secret": true, "downward": true, "projected": true, "ro-claim": true,
		"claim": false, "scratch": false, "host": false, "missing": false} {
		if got := MountedReadOnly(pod, name); got != want {
			t.Errorf("%s: read-only %v, want %v", name, got, want)
		}
	}
}
