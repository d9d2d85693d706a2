package podsync

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
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

// A mirror pod is owned by its node, and is not created while the node is
