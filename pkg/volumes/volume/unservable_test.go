package volume

import (
	"context"
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/volumetest"
	"github.com/nodelet/nodelet/pkg/cluster/standalone"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// Unservable names the volumes whose set-up fails whatever the API server
// and the drivers do, and each such set-up does fail with it; volumes
// that only a set-up can judge are left to it.
func TestUnservable(t *testing.T) {
	token := v1.Volume{Name: "token", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
		{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}},
	}}}}
	cfg := v1.Volume{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}}
	claim := v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}
	csi := v1.Volume{Name: "inline", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "d"}}}
	image := v1.Volume{Name: "img", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "data:1"}}}
	bundle := v1.Volume{Name: "bundle", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
		{ClusterTrustBundle: &v1.ClusterTrustBundleProjection{Path: "b"}},
	}}}}
	nfs := v1.Volume{Name: "nfs", VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: "s", Path: "/"}}}
	empty := v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}
	static := func(p *v1.Pod) *v1.Pod {
		p.Annotations = map[string]string{podutil.ConfigSourceAnnotationKey: podutil.FileSource}
		return p
	}
	api := volumetest.New(nil)
	noImages := errors.New("cannot mount image volumes")
	cluster := NewManager(Options{RootDir: t.TempDir(), Objects: api, Tokens: api, ImageVolumes: func() error { return noImages }})
	alone := NewManager(Options{RootDir: t.TempDir()})
	for _, tc := range []struct {
		name string
		m    *Manager
		pod  *v1.Pod
		want error // nil: only a set-up can tell
	}{
		{"a token, with an API server", cluster, testPod(token, empty), nil},
		{"a configMap, with an API server", cluster, testPod(cfg), nil},
		{"a claim, with an API server", NewManager(Options{RootDir: t.TempDir(), Objects: api, Claims: &fakeClaims{}}), testPod(claim), nil},
		{"a token, without an API server", alone, testPod(empty, token), standalone.ErrNoAPIServer},
		{"a claim, without an API server", alone, testPod(claim), standalone.ErrNoAPIServer},
		{"a static pod's configMap", cluster, static(testPod(cfg)), ErrStaticPodAPIObject},
		{"a static pod's claim", cluster, static(testPod(claim)), ErrStaticPodAPIObject},
		{"a static pod's CSI volume", cluster, static(testPod(csi)), ErrStaticPodAPIObject},
		{"a CSI volume without CSI", alone, testPod(csi), ErrUnsupportedVolume},
		{"an image volume the runtime cannot mount", cluster, testPod(image), noImages},
		{"a clusterTrustBundle", cluster, testPod(bundle), errUnsupportedProjection},
		{"an NFS volume", cluster, testPod(nfs), ErrUnsupportedVolume},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.m.Unservable(tc.pod)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Unservable: %v, want %v", err, tc.want)
			}
			if tc.want == nil {
				return
			}
			// What it calls unservable, the set-up refuses.
			if set := tc.m.WaitForAttachAndMount(context.Background(), tc.pod); set == nil {
				t.Fatalf("the set-up succeeded where Unservable said %v", err)
			}
		})
	}
}
