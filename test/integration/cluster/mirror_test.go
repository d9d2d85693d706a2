//go:build integration

package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/testbed"
)

const staticManifest = `apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: default
  labels: {tier: %s}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: docker.io/library/busybox:1.36
    command: ["sleep", "3600"]
`

// A static pod gets a mirror pod in the API, owned by the node and
// carrying the pod's status; a deleted mirror comes back (the pod keeps
// running), an outdated one is replaced, and once the manifest is gone
// so is the mirror.
func TestStaticPodMirror(t *testing.T) {
	ctx := context.Background()
	n := startNode(t, "node-static", cd, "")
	node := waitNodeReady(t, n.NodeName, 10*time.Second)
	pods := cl.Client.CoreV1().Pods("default")
	name := n.PodName("web")
	n.WriteManifest("web.yaml", fmt.Sprintf(staticManifest, "one"))

	mirror := waitPod(t, 30*time.Second, "default", name, running)
	if mirror.Annotations["kubernetes.io/config.mirror"] == "" || mirror.Annotations["kubernetes.io/config.source"] != "file" {
		t.Errorf("mirror annotations %v", mirror.Annotations)
	}
	if refs := mirror.OwnerReferences; len(refs) != 1 || refs[0].Kind != "Node" || refs[0].UID != node.UID || refs[0].Controller == nil || !*refs[0].Controller {
		t.Errorf("owner references %+v, want the node %s", refs, node.UID)
	}
	if mirror.Spec.NodeName != n.NodeName || mirror.Status.PodIP == "" || condition(mirror, v1.PodReady) != v1.ConditionTrue {
		t.Errorf("mirror pod spec.nodeName %q, status %+v", mirror.Spec.NodeName, mirror.Status)
	}
	containerID := n.RunningContainer("web", "main").Id

	// Deleting the mirror (gracefully, as kubectl does) brings a new one.
	if _, err := cl.Kubectl(ctx, "delete", "pod", "-n", "default", name, "--wait=false"); err != nil {
		t.Fatal(err)
	}
	recreated := waitPod(t, 15*time.Second, "default", name, func(p *v1.Pod) (bool, string) {
		if p.UID == mirror.UID || p.DeletionTimestamp != nil {
			return false, "still the old mirror pod"
		}
		return running(p)
	})
	if c := n.RunningContainer("web", "main"); c == nil || c.Id != containerID {
		t.Errorf("the static pod's container was restarted when its mirror was deleted")
	}

	// A changed manifest is a new pod: its mirror replaces the old one.
	n.WriteManifest("web.yaml", fmt.Sprintf(staticManifest, "two"))
	waitPod(t, 30*time.Second, "default", name, func(p *v1.Pod) (bool, string) {
		if p.UID == recreated.UID || p.Labels["tier"] != "two" {
			return false, fmt.Sprintf("mirror labels %v", p.Labels)
		}
		return running(p)
	})

	n.RemoveManifest("web.yaml")
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		_, err := pods.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("mirror pod still there: %v", err)
	})

	// An orphaned mirror pod (its static pod is unknown) is deleted.
	orphan := busyboxPod("orphan-"+n.NodeName, n.NodeName)
	orphan.Namespace = "default"
	orphan.Annotations = map[string]string{"kubernetes.io/config.mirror": "0123", "kubernetes.io/config.source": "file"}
	orphan.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: types.UID(node.UID)}}
	if _, err := pods.Create(ctx, orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testbed.Eventually(t, 15*time.Second, func() (bool, string) {
		_, err := pods.Get(ctx, orphan.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("orphaned mirror pod still there: %v", err)
	})
}
