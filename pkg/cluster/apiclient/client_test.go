package apiclient

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodelet/nodelet/internal/kubeclienttest"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// being deleted.
func TestCreateMirrorPodOnlyWhileTheNodeStays(t *testing.T) {
	static := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-n1", Namespace: "default", UID: "h2",
		Annotations: map[string]string{podutil.ConfigSourceAnnotationKey: "file", podutil.ConfigHashAnnotationKey: "h2"}}}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid", Finalizers: []string{"example.com/hold"}}}
	client := fake.NewClientset(node)
	api := New(Options{Client: kubeclienttest.Wrap(client), NodeName: "n1"})
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
