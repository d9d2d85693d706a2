package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/podutil"
)

type fakeMirrors struct{ calls []string }

func (f *fakeMirrors) CreateMirrorPod(ctx context.Context, pod *v1.Pod) error {
	f.calls = append(f.calls, "create "+pod.Annotations[podutil.ConfigHashAnnotationKey])
	return nil
}
func (f *fakeMirrors) DeleteMirrorPod(ctx context.Context, fullName string, uid *types.UID) (bool, error) {
	f.calls = append(f.calls, fmt.Sprintf("delete %s %s", fullName, *uid))
	return true, nil
}

func TestSyncMirrorPod(t *testing.T) {
	static := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-n1", Namespace: "default", UID: "h2",
		Annotations: map[string]string{podutil.ConfigSourceAnnotationKey: "file", podutil.ConfigHashAnnotationKey: "h2"}}}
	mirror := func(hash string, deleting bool) *v1.Pod {
		m := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-n1", Namespace: "default", UID: types.UID("m-" + hash),
			Annotations: map[string]string{podutil.ConfigMirrorAnnotationKey: hash}}}
		if deleting {
			now := metav1.Now()
			m.DeletionTimestamp = &now
		}
		return m
	}
	apiPod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "default", UID: "u"}}
	for _, tc := range []struct {
		name   string
		pod    *v1.Pod
		mirror *v1.Pod
		want   []string
	}{
		{"missing", static, nil, []string{"create h2"}},
		{"current", static, mirror("h2", false), nil},
		{"outdated", static, mirror("h1", false), []string{"delete web-n1_default m-h1", "create h2"}},
		{"being deleted", static, mirror("h2", true), []string{"delete web-n1_default m-h2", "create h2"}},
		{"not static", apiPod, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeMirrors{}
			(&PodSyncer{mirrors: f}).syncMirrorPod(context.Background(), tc.pod, tc.mirror)
			if !reflect.DeepEqual(f.calls, tc.want) {
				t.Fatalf("calls %q, want %q", f.calls, tc.want)
			}
		})
	}
}

type fakeAPIObjects struct {
	configMaps map[string]*v1.ConfigMap
	secrets    map[string]*v1.Secret
	tokens     int
	clock      *testingclock.FakeClock
}

func (f *fakeAPIObjects) GetSecret(ctx context.Context, ns, name string) (*v1.Secret, error) {
	if s, ok := f.secrets[name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
}
func (f *fakeAPIObjects) GetConfigMap(ctx context.Context, ns, name string) (*v1.ConfigMap, error) {
	if c, ok := f.configMaps[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
}
func (f *fakeAPIObjects) CreateToken(ctx context.Context, ns, sa string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	f.tokens++
	if req.Spec.BoundObjectRef == nil || req.Spec.BoundObjectRef.Kind != "Pod" {
		return nil, fmt.Errorf("token not bound to the pod")
	}
	out := req.DeepCopy()
	out.Status.Token = fmt.Sprintf("token-%s-%d", sa, f.tokens)
	out.Status.ExpirationTimestamp = metav1.NewTime(f.clock.Now().Add(time.Duration(*req.Spec.ExpirationSeconds) * time.Second))
	return out, nil
}

func TestProjectedVolume(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	api := &fakeAPIObjects{
		configMaps: map[string]*v1.ConfigMap{"ca": {Data: map[string]string{"ca.crt": "CERT", "other": "x"}}},
		secrets:    map[string]*v1.Secret{},
		clock:      clk,
	}
	o := NewContainerOptions(t.TempDir(), "n1", nil)
	o.UseAPI(api)
	o.tokens = newTokenCache(clk)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}, Spec: v1.PodSpec{ServiceAccountName: "sa"}}
	exp := int64(3600)
	vol := &v1.Volume{Name: "kube-api-access", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		DefaultMode: new(int32(0o640)),
		Sources: []v1.VolumeProjection{
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &exp}},
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "ca"}, Items: []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "absent"}, Optional: new(true)}},
			{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		},
	}}}
	pod.Spec.Volumes = []v1.Volume{*vol}
	ctx := context.Background()
	dir, err := o.volumePath(ctx, pod, vol)
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"token": "token-sa-1", "ca.crt": "CERT", "namespace": "ns"} {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q (%v), want %q", file, b, err, want)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "token")); err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("token mode %v (%v), want 0640", st.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(dir, "other")); err == nil {
		t.Error("a key not in items was written")
	}

	// The token is reused until 80% of its life passed, then renewed.
	clk.Step(45 * time.Minute)
	if _, err := o.volumePath(ctx, pod, vol); err != nil || api.tokens != 1 {
		t.Fatalf("tokens requested: %d (%v), want 1", api.tokens, err)
	}
	clk.Step(5 * time.Minute)
	if _, err := o.volumePath(ctx, pod, vol); err != nil || api.tokens != 2 {
		t.Fatalf("tokens requested: %d (%v), want 2", api.tokens, err)
	}

	// A missing key that is not optional is an error naming it.
	bad := &v1.Volume{Name: "bad", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "ca"}, Items: []v1.KeyToPath{{Key: "nope", Path: "x"}},
	}}}
	if _, err := o.volumePath(ctx, pod, bad); err == nil {
		t.Fatal("a missing configMap key was accepted")
	}
	// Without an API server, API-backed volumes fail clearly.
	standalone := NewContainerOptions(t.TempDir(), "n1", nil)
	if _, err := standalone.volumePath(ctx, pod, vol); err == nil {
		t.Fatal("a token volume without an API server was accepted")
	}
}
