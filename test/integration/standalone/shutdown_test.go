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

// With a shutdown grace period but no systemd-logind (this host runs no
// systemd), nodelet says graceful shutdown is off, and SIGTERM only stops
// nodelet: the pods keep running, and the next start adopts them. A node
// shutdown comes from logind (test/integration/systemd).
func TestSigtermKeepsPods(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{ExtraConfig: "shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 4s\n"})
	n.WriteManifest("web.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: main
    image: %s
    command: ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
`, testbed.BusyboxImage))
	before := waitRunning(t, n, "web", "main")
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		return strings.Contains(n.Log(), "No graceful node shutdown while systemd-logind cannot be used"), "logind's absence not reported"
	})
	n.Stop()
	if err := n.ExitError(); err != nil {
		t.Fatalf("nodelet exited with %v after SIGTERM", err)
	}
	for _, c := range n.RuntimeContainers("web") {
		if c.Id == before.Id && c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("SIGTERM stopped the pod's container: %v", c.State)
		}
	}
	if strings.Contains(n.Log(), "Node shutdown announced") {
		t.Fatal("SIGTERM shut the node down")
	}
	n.Start()
	if after := waitRunning(t, n, "web", "main"); after.Id != before.Id {
		t.Fatalf("the container changed across the restart: %s, then %s", before.Id, after.Id)
	}
}
