//go:build integration

package standalone

import (
	"fmt"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// With a shutdown grace period, SIGTERM shuts the node down: the regular
// pod is stopped first, the critical one only after it, each within its
// share of the period; then nodelet exits cleanly.
func TestGracefulNodeShutdown(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{ExtraConfig: "shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 4s\n"})
	marks := t.TempDir()
	// The regular pod takes two seconds to stop, the critical one none:
	// stopped together, the critical pod would be done first.
	pod := func(name, priority, onTerm string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
spec:
  priority: %[2]s
  terminationGracePeriodSeconds: 30
  containers:
  - name: main
    image: %[3]s
    command: ["sh", "-c", "trap '%[4]s; echo %[1]s-term >> /marks/log; exit 0' TERM; echo %[1]s-up >> /marks/log; sleep 3600 & wait"]
    volumeMounts: [{name: marks, mountPath: /marks}]
  volumes:
  - name: marks
    hostPath: {path: %[5]s, type: DirectoryOrCreate}
`, name, priority, testbed.BusyboxImage, onTerm, marks)
	}
	n.WriteManifest("regular.yaml", pod("regular", "0", "sleep 2"))
	n.WriteManifest("critical.yaml", pod("critical", "2000001000", "true"))
	waitRunning(t, n, "regular", "main")
	waitRunning(t, n, "critical", "main")
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		return len(marksLog(marks)) == 2, fmt.Sprintf("log %v", marksLog(marks))
	})

	start := time.Now()
	n.Stop()
	took := time.Since(start)
	if err := n.ExitError(); err != nil {
		t.Fatalf("nodelet exited with %v after the shutdown", err)
	}
	want := []string{"regular-term", "critical-term"}
	if l := marksLog(marks)[2:]; strings.Join(l, " ") != strings.Join(want, " ") {
		t.Fatalf("stopped in the order %v, want %v", l, want)
	}
	// Pods that stop early end their phase early: not the whole 10s.
	if took > 9*time.Second {
		t.Errorf("the shutdown took %v, though the pods stopped within 3s", took)
	}
	log := n.Log()
	for _, s := range []string{
		`reason="NodeShutdown" message="Shutdown manager detected shutdown event"`,
		`"Shutdown: stopping pod" pod="default/regular-node1"`, `gracePeriod=6 groupPriority=0`,
		`"Shutdown: stopping pod" pod="default/critical-node1"`, `gracePeriod=4 groupPriority=2000000000`,
		`"Node shutdown complete"`,
	} {
		if !strings.Contains(log, s) {
			t.Errorf("the log lacks %s", s)
		}
	}
	for _, name := range []string{"regular", "critical"} {
		for _, c := range n.RuntimeContainers(name) {
			if c.State != runtimeapi.ContainerState_CONTAINER_EXITED {
				t.Errorf("%s's container %s is %v after the shutdown", name, c.Metadata.Name, c.State)
			}
		}
	}
}
