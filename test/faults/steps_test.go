//go:build integration

package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testbed"
)

// nodelet is SIGKILLed at each step of creating a pod (a failpoint in the
// runtime manager), then started again: the pod ends running once, on
// one sandbox, its container never restarted (one created but never
// started does not count), and deleting it leaves nothing.
func TestNodeletKilledWhileCreating(t *testing.T) {
	for _, step := range []string{"sandbox-created", "container-created", "container-started"} {
		t.Run(step, func(t *testing.T) {
			invariants := []string{invNoneLost, invNoRestart, invTruth, invNoCRILeak, invNoHostLeak, invNoGoroutine}
			if step == "container-created" {
				// The container never ran and is replaced: its restart count is not checked.
				invariants = slices.Delete(invariants, 1, 2)
			}
			record(t, row{scenario: "nodelet SIGKILL after " + step, load: "3 pods", fault: "SIGKILL at failpoint, restart", invariants: invariants})
			n := startNode(t, "")
			idle := goroutines(t, n)
			names := killWhileCreating(t, n, step)
			if step != "container-created" {
				checkNoRestarts(t, n, names)
			}
			checkTruth(t, n, names)
			deleteAndCheck(t, n, names, idle)
		})
	}
}

// killWhileCreating runs two bystander pods, then kills nodelet at the
// failpoint while it creates a third (the victim), starts it again and
// waits until all three run; it returns their names.
func killWhileCreating(t *testing.T, n *testbed.Nodelet, point string) []string {
	t.Helper()
	bystanders := writePods(n, "bystander", 2)
	allRunning(t, n, bystanders)
	n.Failpoint(point, "kill")
	n.WriteManifest("victim.yaml", sleeper("victim"))
	testbed.Eventually(t, time.Minute, func() (bool, string) { return n.Exited(), "nodelet did not reach " + point })
	n.ClearFailpoint(point)
	start := time.Now()
	n.Start()
	names := append(bystanders, "victim")
	allRunning(t, n, names)
	setRow(t, time.Since(start))
	return names
}

// nodelet is SIGKILLed while deleting a pod (in its preStop hook, and
// once its sandbox is stopped), then started again: the pod goes for
// good, leaving nothing, and the other pods are untouched.
func TestNodeletKilledWhileDeleting(t *testing.T) {
	for _, step := range []string{"mid-preStop", "sandbox-stopped"} {
		t.Run(step, func(t *testing.T) {
			record(t, row{scenario: "nodelet SIGKILL " + step, load: "3 pods", fault: "SIGKILL during delete, restart",
				invariants: []string{invNoneLost, invNoRestart, invTruth, invNoCRILeak, invNoHostLeak, invNoGoroutine}})
			n := startNode(t, "")
			idle := goroutines(t, n)
			marks := t.TempDir()
			bystanders := writePods(n, "bystander", 2)
			n.WriteManifest("victim.yaml", hooked("victim", marks))
			allRunning(t, n, append(bystanders, "victim"))
			if step == "mid-preStop" {
				n.RemoveManifest("victim.yaml")
				testbed.Eventually(t, time.Minute, func() (bool, string) {
					b, _ := os.ReadFile(filepath.Join(marks, "log"))
					return strings.Contains(string(b), "prestop-began"), "preStop hook not running"
				})
				n.Kill()
			} else {
				n.Failpoint(step, "kill")
				n.RemoveManifest("victim.yaml")
				testbed.Eventually(t, time.Minute, func() (bool, string) { return n.Exited(), "nodelet did not reach " + step })
				n.ClearFailpoint(step)
			}
			start := time.Now()
			n.Start()
			testbed.Eventually(t, convergeTimeout, func() (bool, string) {
				return len(n.RuntimeSandboxes("victim")) == 0, "the victim's sandbox is still there"
			})
			allRunning(t, n, bystanders)
			setRow(t, time.Since(start))
			checkNoRestarts(t, n, bystanders)
			checkTruth(t, n, bystanders)
			deleteAndCheck(t, n, bystanders, idle)
		})
	}
}

// hooked is a sleeper whose preStop hook marks that it began, then takes
// its time.
func hooked(name, marks string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
spec:
  terminationGracePeriodSeconds: 20
  containers:
  - name: main
    image: %[2]s
    command: ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
    lifecycle:
      preStop:
        exec: {command: ["sh", "-c", "echo prestop-began >> /marks/log; sleep 10"]}
    volumeMounts: [{name: marks, mountPath: /marks}]
  volumes:
  - name: marks
    hostPath: {path: %[3]s, type: DirectoryOrCreate}
`, name, testbed.BusyboxImage, marks)
}
