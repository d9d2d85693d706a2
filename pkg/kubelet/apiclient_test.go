package kubelet

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

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

// A mirror pod is owned by its node, and is not created while the node is
// being deleted.
func TestCreateMirrorPodOnlyWhileTheNodeStays(t *testing.T) {
	static := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-n1", Namespace: "default", UID: "h2",
		Annotations: map[string]string{podutil.ConfigSourceAnnotationKey: "file", podutil.ConfigHashAnnotationKey: "h2"}}}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid", Finalizers: []string{"example.com/hold"}}}
	client := fake.NewClientset(node)
	api := NewAPIClient(client, "n1")
	ctx := context.Background()
	if err := api.CreateMirrorPod(ctx, static); err != nil {
		t.Fatal(err)
	}
	m, err := client.CoreV1().Pods("default").Get(ctx, "web-n1", metav1.GetOptions{})
	if err != nil || m.Annotations[podutil.ConfigMirrorAnnotationKey] != "h2" || len(m.OwnerReferences) != 1 || m.OwnerReferences[0].UID != "node-uid" {
		t.Fatalf("mirror %+v, err %v", m, err)
	}
	if err := client.CoreV1().Pods("default").Delete(ctx, "web-n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleting := node.DeepCopy()
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	if _, err := client.CoreV1().Nodes().Update(ctx, deleting, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := api.CreateMirrorPod(ctx, static); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods("default").Get(ctx, "web-n1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("mirror pod created while the node is being deleted (err %v)", err)
	}
}
