//go:build integration

package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// A node moves from the upstream kubelet to nodelet and back without
// restarting its API pods or its static pod: the same sandbox and
// container keep running and the restart count stays 0, because both
// agents record and compare the same identity (labels, annotations,
// container hash, and the static pod's UID hashed from its manifest).
func TestMoveBetweenUpstreamKubeletAndNodelet(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-interop", cd, "")
	waitNodeReady(t, n.NodeName, 10*time.Second)
	n.Stop()
	up := testbed.NewUpstreamKubelet(n, cl.BinDir, cl.CAFile())
	up.Start()
	// The node is still Ready from nodelet's last report, and the upstream
	// kubelet reports through its lease, not a new heartbeat: its log says
	// when its sync loop has the API's pods.
	up.WaitLog(0, `"SyncLoop ADD" source="api"`, 60*time.Second)

	pod := busyboxPod("moved", n.NodeName)
	pod.Spec.TerminationGracePeriodSeconds = new(int64(1))
	if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The static pod lives in the test's namespace, so its mirror pod
	// shows its status beside the API pods'.
	n.WriteManifest("static.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: static, namespace: %s}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: %s, command: [sleep, "3600"]}
`, ns, testbed.BusyboxImage))
	static := n.PodName("static")
	waitPod(t, 60*time.Second, ns, "moved", running)
	waitPod(t, 60*time.Second, ns, static, running)
	h := cl.NewHandover(n, ns)
	h.Note(t, "moved")
	h.Note(t, static)

	// To nodelet: it has synced the pod (and so decided whether the
	// container must be replaced) once its log says so.
	up.Stop()
	offset := len(n.Log())
	n.Start()
	for _, name := range []string{"moved", static} {
		h.Kept(t, "nodelet", n.Log, offset, name)
	}

	// A pod born under nodelet, then everything back to the upstream
	// kubelet, which has synced them once its log says so.
	native := busyboxPod("native", n.NodeName)
	native.Spec.TerminationGracePeriodSeconds = new(int64(1))
	if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, native, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, 60*time.Second, ns, "native", running)
	h.Note(t, "native")
	n.Stop()
	offset = len(up.Log())
	up.Start()
	for _, name := range []string{"moved", "native", static} {
		h.Kept(t, "the upstream kubelet", up.Log, offset, name)
	}
	up.Stop()
	n.Start() // the test's cleanup stops the pods through nodelet
}
