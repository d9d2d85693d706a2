//go:build integration && upgrades

// Package upgrades hands nodes from the upstream kubelets of the previous
// minor versions to nodelet: make test-upgrades builds those kubelets
// (hack/cluster/build-kubelets.sh) and runs it; make test does not.
package upgrades

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

var (
	cd *testbed.Containerd
	cl *testbed.Cluster
)

func TestMain(m *testing.M) {
	testbed.Main(m, &cd, testbed.WithCluster(&cl, "nodelet-upgrades-"))
}

// staticManifest is a static pod with more than a container, so that its
// UID (a hash of the whole pod in the kubelet's own types) covers
// defaults, probes, resources and volumes.
const staticManifest = `apiVersion: v1
kind: Pod
metadata: {name: static, namespace: %s}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {name: scratch, emptyDir: {}}
  containers:
  - name: main
    image: %s
    command: [sleep, "3600"]
    env: [{name: MODE, value: upgrade}]
    resources: {requests: {cpu: 10m, memory: 16Mi}, limits: {memory: 64Mi}}
    readinessProbe: {exec: {command: ["true"]}, periodSeconds: 5}
    volumeMounts: [{name: scratch, mountPath: /scratch}]
`

// A node whose pods the upstream kubelet v1.35 or v1.36 started passes to
// nodelet without a restart: the API pod and the static pod keep their
// containers, sandboxes and restart count 0, and the static pod keeps the
// UID that kubelet gave it (its mirror pod stays).
func TestUpgradeFromUpstreamKubelet(t *testing.T) {
	dirs := strings.Fields(os.Getenv("NODELET_OLD_KUBELETS"))
	if len(dirs) == 0 {
		t.Fatal("NODELET_OLD_KUBELETS lists no kubelet directories: run make test-upgrades")
	}
	for _, dir := range dirs {
		version := strings.TrimPrefix(filepath.Base(dir), "kubelet-")
		t.Run(version, func(t *testing.T) { upgradeFrom(t, dir, version) })
	}
}

func upgradeFrom(t *testing.T, binDir, version string) {
	ctx := context.Background()
	ns := cl.Namespace(t)
	name := "up-" + strings.NewReplacer(".", "-").Replace(strings.TrimPrefix(version, "v"))
	n := cl.StartNode(t, name, cd, "")
	n.Stop()
	up := testbed.NewUpstreamKubelet(n, binDir, cl.CAFile())
	up.Start()
	waitNodeVersion(t, name, version)

	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "api"},
		Spec: v1.PodSpec{NodeName: name, TerminationGracePeriodSeconds: new(int64(1)), AutomountServiceAccountToken: new(false),
			Containers: []v1.Container{{Name: "main", Image: testbed.BusyboxImage, Command: []string{"sleep", "3600"}}}},
	}
	if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.WriteManifest("static.yaml", fmt.Sprintf(staticManifest, ns, testbed.BusyboxImage))
	static := n.PodName("static")
	cl.WaitPod(t, 90*time.Second, ns, "api", testbed.PodRunning)
	mirror := cl.WaitPod(t, 90*time.Second, ns, static, testbed.PodRunning)
	h := cl.NewHandover(n, ns)
	h.Note(t, "api")
	h.Note(t, static)

	up.Stop()
	offset := len(n.Log())
	n.Start()
	for _, p := range []string{"api", static} {
		h.Kept(t, "nodelet after the upstream kubelet "+version, n.Log, offset, p)
	}
	after, err := cl.Client.CoreV1().Pods(ns).Get(ctx, static, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != mirror.UID || after.Annotations["kubernetes.io/config.mirror"] != mirror.Annotations["kubernetes.io/config.mirror"] {
		t.Errorf("the static pod's mirror changed: UID %s (was %s), config.mirror %s (was %s)", after.UID, mirror.UID,
			after.Annotations["kubernetes.io/config.mirror"], mirror.Annotations["kubernetes.io/config.mirror"])
	}
	if !strings.Contains(n.Log()[offset:], "Static pod keeps the UID an earlier kubelet gave it") {
		t.Errorf("nodelet did not say it kept the static pod's UID")
	}
	n.RemoveManifest("static.yaml")
}

// waitNodeVersion waits for the node to be Ready under a kubelet that
// reports the version.
func waitNodeVersion(t *testing.T, name, version string) {
	t.Helper()
	testbed.Eventually(t, 90*time.Second, func() (bool, string) {
		node, err := cl.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := false
		for _, c := range node.Status.Conditions {
			ready = ready || (c.Type == v1.NodeReady && c.Status == v1.ConditionTrue)
		}
		v := node.Status.NodeInfo.KubeletVersion
		return ready && strings.HasPrefix(v, version), fmt.Sprintf("kubelet %s, ready %v", v, ready)
	})
}
