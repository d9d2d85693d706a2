//go:build integration

package standalone

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// Beyond maxPods, a pod is Failed with OutOfpods and never started.
func TestMaxPods(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{ExtraConfig: "maxPods: 2\n"})
	n.WriteManifest("a.yaml", sleeper("a", "a"))
	n.WriteManifest("b.yaml", sleeper("b", "b"))
	waitRunning(t, n, "a", "main")
	waitRunning(t, n, "b", "main")
	n.WriteManifest("c.yaml", sleeper("c", "c"))
	p := n.WaitPod(t, "c", podTimeout, func(p *v1.Pod) (bool, string) {
		return p.Status.Phase == v1.PodFailed, fmt.Sprintf("phase %s", p.Status.Phase)
	})
	if p.Status.Reason != "OutOfpods" || !strings.Contains(p.Status.Message, "capacity: 2") {
		t.Fatalf("reason %q message %q", p.Status.Reason, p.Status.Message)
	}
	if len(n.RuntimeSandboxes("c")) != 0 {
		t.Fatal("a rejected pod got a sandbox")
	}
}

// Admission also checks node selectors against the node's labels.
func TestNodeSelectorAdmission(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{Args: []string{"--node-labels=zone=a"}})
	withSelector := func(name, zone string) string {
		return strings.Replace(sleeper(name, name), "spec:\n", fmt.Sprintf("spec:\n  nodeSelector: {zone: %s}\n", zone), 1)
	}
	n.WriteManifest("here.yaml", withSelector("here", "a"))
	n.WriteManifest("there.yaml", withSelector("there", "b"))
	waitRunning(t, n, "here", "main")
	p := n.WaitPod(t, "there", podTimeout, func(p *v1.Pod) (bool, string) {
		return p.Status.Phase == v1.PodFailed, fmt.Sprintf("phase %s", p.Status.Phase)
	})
	if p.Status.Reason != "NodeAffinity" {
		t.Fatalf("reason %q", p.Status.Reason)
	}
}

// OnFailure restarts a failing container until it exits 0, then the pod
// Succeeded.
func TestOnFailureUntilSuccess(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	state := filepath.Join(t.TempDir(), "state")
	n.WriteManifest("retry.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: retry
spec:
  restartPolicy: OnFailure
  containers:
  - name: main
    image: %s
    command: ["sh", "-c", "if [ -e /state/failed ]; then exit 0; fi; touch /state/failed; exit 1"]
    volumeMounts: [{name: state, mountPath: /state}]
  volumes:
  - name: state
    hostPath: {path: %s, type: DirectoryOrCreate}
`, testbed.BusyboxImage, state))
	p := n.WaitPod(t, "retry", podTimeout, func(p *v1.Pod) (bool, string) {
		return p.Status.Phase == v1.PodSucceeded, fmt.Sprintf("phase %s", p.Status.Phase)
	})
	cs := mainStatus(p)
	if cs.RestartCount != 1 || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 ||
		cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 1 {
		t.Fatalf("container status %+v", cs)
	}
}

// nodelet killed with SIGKILL and started again adopts its running pods:
// same containers, same restart counts; a pod that had finished is not
// run again.
func TestRestartRecovery(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	names := []string{"one", "two", "three"}
	for _, name := range names {
		n.WriteManifest(name+".yaml", sleeper(name, name))
	}
	n.WriteManifest("done.yaml", oneShot("done", v1.RestartPolicyNever, "exit 0"))
	before := map[string]string{}
	for _, name := range names {
		before[name] = waitRunning(t, n, name, "main").Id
	}
	n.WaitPod(t, "done", podTimeout, func(p *v1.Pod) (bool, string) {
		return p.Status.Phase == v1.PodSucceeded, fmt.Sprintf("phase %s", p.Status.Phase)
	})

	n.Kill()
	n.Start()
	for _, name := range names {
		p := n.WaitPod(t, name, podTimeout, func(p *v1.Pod) (bool, string) {
			return p.Status.Phase == v1.PodRunning && mainStatus(p).State.Running != nil, fmt.Sprintf("phase %s", p.Status.Phase)
		})
		cs := mainStatus(p)
		if !strings.HasSuffix(cs.ContainerID, before[name]) || cs.RestartCount != 0 {
			t.Errorf("%s: container %s restarts %d, want %s and 0", name, cs.ContainerID, cs.RestartCount, before[name])
		}
	}
	p := n.WaitPod(t, "done", podTimeout, func(p *v1.Pod) (bool, string) {
		return p.Status.Phase == v1.PodSucceeded, fmt.Sprintf("phase %s", p.Status.Phase)
	})
	if cs := n.RuntimeContainers("done"); len(cs) != 1 || mainStatus(p).RestartCount != 0 {
		t.Fatalf("the finished pod ran again: %d containers, restarts %d", len(cs), mainStatus(p).RestartCount)
	}
	if got := strings.Count(n.Log(), `reason="Created"`); got != 4 {
		t.Errorf("containers created %d times in total, want 4 (none again after the restart)", got)
	}
}

// A pod started in nodelet's runtime namespace behind its back is stopped
// and removed by housekeeping.
func TestHousekeepingRemovesUnknownPods(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	n.WriteManifest("keep.yaml", sleeper("keep", "k"))
	waitRunning(t, n, "keep", "main")
	ctx := context.Background()
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "intruder", Namespace: "default", Uid: "intruder-uid"},
		LogDirectory: t.TempDir(),
		Labels: map[string]string{"io.kubernetes.pod.uid": "intruder-uid", "io.kubernetes.pod.name": "intruder",
			"io.kubernetes.pod.namespace": "default"},
	}
	sb, err := cd.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cd.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: cfg,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "x"}, Image: &runtimeapi.ImageSpec{Image: testbed.BusyboxImage},
			Command: []string{"sleep", "3600"}, Labels: cfg.Labels,
		}})
	if err != nil {
		t.Fatal(err)
	}
	// Housekeeping may already have stopped the intruder's sandbox (it
	// runs every 2 s): then the start fails, and the removal below is
	// still what is checked.
	if _, err := cd.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
		t.Logf("starting the intruder: %v", err)
	}
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		r, err := cd.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: sb.PodSandboxId}})
		return err == nil && len(r.Items) == 0, "the intruder is still there"
	})
	if !strings.Contains(n.Log(), "Clean up orphaned pod containers") {
		t.Error("no log of the cleanup")
	}
	if c := n.RunningContainer("keep", "main"); c == nil {
		t.Fatal("the wanted pod was disturbed")
	}
}
