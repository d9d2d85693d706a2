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
	p := waitPod(t, n, "exits", 60*time.Second, func(p *v1.Pod) (bool, string) {
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
