//go:build integration

package systemd

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// shutdownPod writes "<name>-up" to the marks log as it starts and
// "<name>-term" when told to stop, after onTerm.
func shutdownPod(name, priority, onTerm, marks string) string {
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

// TestLogindShutdown: with a shutdown grace period, nodelet takes logind's
// delay lock (raising InhibitDelayMaxSec to the period). SIGTERM then only
// stops nodelet: the pods keep running and the next nodelet adopts them.
// A power-off through logind (as the power button or systemctl poweroff
// asks it) waits for nodelet, which stops the regular pod first and the
// critical one after it, each within its share, then releases the lock,
// and the system goes down. The test boots a bed of its own: the
// power-off ends it.
func TestLogindShutdown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	node, err := testbed.StartSystemd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := node.Stop(); err != nil {
			t.Error(err)
		}
	})
	runtime, err := testbed.StartContainerdWith(ctx, 1, testbed.ContainerdOptions{Systemd: node})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := runtime.Stop(); err != nil {
			t.Error(err)
		}
	})
	n := testbed.StartNodelet(t, runtime, testbed.NodeletOptions{Systemd: node, CgroupRoot: "/",
		ExtraConfig: "cgroupDriver: systemd\nshutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 4s\n"})
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		return strings.Contains(n.Log(), "Graceful node shutdown armed"), "no delay lock taken"
	})
	inhibitors, err := node.Command(ctx, "systemd-inhibit", "--list", "--no-pager").CombinedOutput()
	if err != nil || !strings.Contains(string(inhibitors), "kubelet") || !strings.Contains(string(inhibitors), "delay") {
		t.Fatalf("logind's inhibitors (%v):\n%s", err, inhibitors)
	}
	delay, err := node.Command(ctx, "busctl", "get-property", "org.freedesktop.login1", "/org/freedesktop/login1",
		"org.freedesktop.login1.Manager", "InhibitDelayMaxUSec").CombinedOutput()
	if err != nil || strings.TrimSpace(string(delay)) != "t 10000000" {
		t.Fatalf("InhibitDelayMaxUSec: %s (%v), want the grace period, 10s", delay, err)
	}

	marks := t.TempDir()
	n.WriteManifest("regular.yaml", shutdownPod("regular", "0", "sleep 2", marks))
	n.WriteManifest("critical.yaml", shutdownPod("critical", "2000001000", "true", marks))
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		return len(testbed.MarksLog(marks)) == 2, fmt.Sprintf("log %v", testbed.MarksLog(marks))
	})
	// A container's process writes its mark before the runtime has marked
	// it running (StartContainer returns after the process starts).
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		return n.RunningContainer("regular", "main") != nil && n.RunningContainer("critical", "main") != nil, "containers not running yet"
	})
	before := map[string]string{"regular": n.RunningContainer("regular", "main").Id, "critical": n.RunningContainer("critical", "main").Id}

	// SIGTERM: a service restart. The pods keep running.
	n.Stop()
	if err := n.ExitError(); err != nil {
		t.Fatalf("nodelet's exit after SIGTERM: %v", err)
	}
	for name, id := range before {
		for _, c := range n.RuntimeContainers(name) {
			if c.Id == id && c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
				t.Fatalf("SIGTERM to nodelet stopped %s's container: %v", name, c.State)
			}
		}
	}
	n.Start()
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		return strings.Count(n.Log(), "Graceful node shutdown armed") == 2, "no delay lock taken after the restart"
	})
	for name, id := range before {
		if c := n.RunningContainer(name, "main"); c == nil || c.Id != id {
			t.Fatalf("%s's container changed across the restart of nodelet: %v", name, c)
		}
	}
	if got := testbed.MarksLog(marks); len(got) != 2 {
		t.Fatalf("a container was stopped or started again across the restart: %v", got)
	}

	// The power button.
	start := time.Now()
	if out, err := node.Command(ctx, "busctl", "call", "org.freedesktop.login1", "/org/freedesktop/login1",
		"org.freedesktop.login1.Manager", "PowerOff", "b", "false").CombinedOutput(); err != nil {
		t.Fatalf("PowerOff: %v: %s", err, out)
	}
	if err := node.Wait(3 * time.Minute); err != nil {
		t.Fatalf("%v; its log:\n%s", err, node.LogTail(40))
	}
	took := time.Since(start)
	runtime.WentDown()
	want := []string{"regular-term", "critical-term"}
	if l := testbed.MarksLog(marks)[2:]; strings.Join(l, " ") != strings.Join(want, " ") {
		t.Fatalf("stopped in the order %v, want %v (nodelet's staged stop, not the system's final kill)", l, want)
	}
	log := n.Log()
	var at []int
	for _, s := range []string{
		`"Node shutdown announced: stopping every pod by priority"`,
		`"Shutdown: stopping pod" pod="default/regular-node1"`,
		`"Shutdown: stopping pod" pod="default/critical-node1"`,
		`"Node shutdown complete"`,
		`"Released logind's delay lock: the shutdown goes on"`,
	} {
		i := strings.Index(log, s)
		if i < 0 {
			t.Fatalf("the log lacks %s:\n%s", s, n.LogTail(40))
		}
		at = append(at, i)
	}
	for i := 1; i < len(at); i++ {
		if at[i] < at[i-1] {
			t.Errorf("the shutdown's steps are out of order in the log: %v", at)
		}
	}
	// logind waited for the lock (the regular pod alone takes 2 s to
	// stop), and not the whole 10 s once it was released.
	if took < 2*time.Second || took > 30*time.Second {
		t.Errorf("the power-off took %v", took)
	}
}
