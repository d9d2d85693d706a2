//go:build integration

package standalone

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// TestExitSeenThroughTheEventStream: with the relist every 5 minutes, a
// container's exit still reaches its pod within seconds, through the
// runtime's event stream: CRI GetContainerEvents on containerd 2.x,
// containerd's task-exit events on 1.6.
func TestExitSeenThroughTheEventStream(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{Args: []string{"--pleg-relist-period=5m"}})
	n.WriteManifest("exits.yaml", oneShot("exits", v1.RestartPolicyNever, "sleep 2; exit 3"))
	start := time.Now()
	p := n.WaitPod(t, "exits", 60*time.Second, func(p *v1.Pod) (bool, string) {
		s := mainStatus(p).State.Terminated
		return s != nil && p.Status.Phase == v1.PodFailed, fmt.Sprintf("phase %s, container %+v", p.Status.Phase, mainStatus(p).State)
	})
	if code := mainStatus(p).State.Terminated.ExitCode; code != 3 {
		t.Fatalf("exit code %d, want 3", code)
	}
	took := time.Since(start)
	want := "Watching containerd's task exit events"
	if strings.HasPrefix(cd.Version, "2.") || strings.HasPrefix(cd.Version, "v2.") {
		want = "Watching the container runtime's CRI event stream"
	}
	if !strings.Contains(n.Log(), want) {
		t.Fatalf("containerd %s: nodelet did not log %q", cd.Version, want)
	}
	t.Logf("containerd %s: exit seen %v after the manifest was written (relist every 5m)", cd.Version, took.Round(time.Millisecond))
}

// TestImageVolume: on containerd 2.x an image volume is the image's files,
// read-only, in the container; on containerd 1.6 the pod waits with a
// FailedMount event saying the runtime cannot mount images.
func TestImageVolume(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	n.WriteManifest("imgvol.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: imgvol
spec:
  restartPolicy: Never
  volumes:
  - name: tools
    image: {reference: %q, pullPolicy: Never}
  containers:
  - name: main
    image: %s
    command: ["sh", "-c", "test -x /tools/bin/busybox && ! touch /tools/new"]
    volumeMounts: [{name: tools, mountPath: /tools}]
`, testbed.BusyboxImage, testbed.BusyboxImage))
	if !strings.HasPrefix(strings.TrimPrefix(cd.Version, "v"), "2.") {
		testbed.Eventually(t, 60*time.Second, func() (bool, string) {
			return len(n.PodEvents("imgvol", "FailedMount")) > 0 && strings.Contains(n.Log(), "cannot mount image volumes"), "no FailedMount event naming the runtime"
		})
		p := mustPod(t, n, "imgvol")
		if p.Status.Phase != v1.PodPending || len(n.RuntimeSandboxes("imgvol")) != 0 {
			t.Fatalf("phase %s with %d sandboxes on a runtime without image volumes", p.Status.Phase, len(n.RuntimeSandboxes("imgvol")))
		}
		return
	}
	p := n.WaitPod(t, "imgvol", podTimeout, func(p *v1.Pod) (bool, string) {
		return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed, fmt.Sprintf("phase %s, container %+v", p.Status.Phase, mainStatus(p).State)
	})
	if p.Status.Phase != v1.PodSucceeded {
		t.Fatalf("the container did not find the image's files read-only: %+v", mainStatus(p).State)
	}
}
