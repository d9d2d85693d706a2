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

// probed is a pod with one container and the given probe YAML under it.
func probed(name, image, command, probes string) string {
	cmd := ""
	if command != "" {
		cmd = fmt.Sprintf("    command: [\"sh\", \"-c\", %q]\n", command)
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: %s
%s%s`, name, image, cmd, probes)
}

func podReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

const httpd = "trap 'exit 0' TERM; mkdir -p /www; echo ok > /www/ok; httpd -f -p 8080 -h /www & wait"

// Every probe kind, passing and failing, decides readiness.
func TestProbeKinds(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	readiness := func(handler string) string {
		return "    ports: [{name: web, containerPort: 8080}]\n    readinessProbe:\n      periodSeconds: 1\n" + handler
	}
	cases := map[string]struct {
		image, command, probe string
		ready                 bool
	}{
		"exec-pass":    {testbed.BusyboxImage, httpd, readiness("      exec: {command: [\"true\"]}\n"), true},
		"exec-fail":    {testbed.BusyboxImage, httpd, readiness("      exec: {command: [\"false\"]}\n"), false},
		"http-pass":    {testbed.BusyboxImage, httpd, readiness("      httpGet: {path: /ok, port: web}\n"), true},
		"http-fail":    {testbed.BusyboxImage, httpd, readiness("      httpGet: {path: /missing, port: 8080}\n"), false},
		"tcp-pass":     {testbed.BusyboxImage, httpd, readiness("      tcpSocket: {port: 8080}\n"), true},
		"tcp-fail":     {testbed.BusyboxImage, httpd, readiness("      tcpSocket: {port: 8081}\n"), false},
		"grpc-pass":    {testbed.GRPCHealthImage, "", readiness("      grpc: {port: 9090}\n"), true},
		"grpc-fail":    {testbed.GRPCHealthImage, "touch /tmp/unhealthy; exec /grpchealth", readiness("      grpc: {port: 9090}\n"), false},
		"grpc-no-port": {testbed.GRPCHealthImage, "", readiness("      grpc: {port: 9091}\n"), false},
	}
	for name, c := range cases {
		n.WriteManifest(name+".yaml", probed(name, c.image, c.command, c.probe))
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if c.ready {
				n.WaitPod(t, name, podTimeout, func(p *v1.Pod) (bool, string) {
					return podReady(p) && mainStatus(p).Ready, fmt.Sprintf("ready=%v conditions %v", mainStatus(p).Ready, p.Status.Conditions)
				})
				return
			}
			// Failing: the probe ran and failed, again and again (Unhealthy
			// events), and the running pod stays unready without any
			// restart. The wait is the pod's, not a probe period's: on a
			// loaded node one exec probe took 9.5 s in CI (runc exec
			// behind container starts).
			p := n.WaitPod(t, name, podTimeout, func(p *v1.Pod) (bool, string) {
				running, events := mainStatus(p).State.Running != nil, unhealthyEvents(n, name)
				return running && events >= 2, fmt.Sprintf("running %v, %d Unhealthy events", running, events)
			})
			if podReady(p) || mainStatus(p).Ready || mainStatus(p).RestartCount != 0 {
				t.Fatalf("failing readiness: ready %v, restarts %d", podReady(p), mainStatus(p).RestartCount)
			}
		})
	}
}

// unhealthyEvents counts the Unhealthy events of a static pod in the log.
func unhealthyEvents(n *testbed.Nodelet, name string) int {
	count := 0
	for _, l := range strings.Split(n.Log(), "\n") {
		if strings.Contains(l, `reason="Unhealthy"`) && strings.Contains(l, fmt.Sprintf(`object="default/%s-%s"`, name, n.NodeName)) {
			count++
		}
	}
	return count
}

// A failing liveness probe restarts the container, again and again.
func TestLivenessRestarts(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	n.WriteManifest("live.yaml", probed("live", testbed.BusyboxImage, "trap 'exit 0' TERM; sleep 3600 & wait",
		"    livenessProbe:\n      periodSeconds: 1\n      failureThreshold: 2\n      exec: {command: [\"false\"]}\n"))
	n.WaitPod(t, "live", 2*time.Minute, func(p *v1.Pod) (bool, string) {
		return mainStatus(p).RestartCount >= 2, fmt.Sprintf("restarts %d", mainStatus(p).RestartCount)
	})
	log := n.Log()
	if !strings.Contains(log, "Container main failed liveness probe, will be restarted") {
		t.Error("no Killing event saying why")
	}
	if unhealthyEvents(n, "live") < 2 {
		t.Error("no Unhealthy events")
	}
}

// Readiness flips the Ready condition both ways without restarting anything.
func TestReadinessFlips(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	n.WriteManifest("flip.yaml", probed("flip", testbed.BusyboxImage, "trap 'exit 0' TERM; sleep 3600 & wait",
		"    readinessProbe:\n      periodSeconds: 1\n      exec: {command: [\"test\", \"-e\", \"/tmp/ready\"]}\n"))
	c := waitRunningContainer(t, n, "flip")
	for i, ready := range []bool{true, false, true} {
		cmd := []string{"touch", "/tmp/ready"}
		if !ready {
			cmd = []string{"rm", "/tmp/ready"}
		}
		if _, err := n.Exec(c, cmd...); err != nil {
			t.Fatal(err)
		}
		n.WaitPod(t, "flip", podTimeout, func(p *v1.Pod) (bool, string) {
			return podReady(p) == ready && mainStatus(p).Ready == ready, fmt.Sprintf("step %d: ready %v", i, podReady(p))
		})
	}
	if p := mustPod(t, n, "flip"); mainStatus(p).RestartCount != 0 || p.Status.Phase != v1.PodRunning {
		t.Fatalf("restarts %d phase %s", mainStatus(p).RestartCount, p.Status.Phase)
	}
}

func waitRunningContainer(t *testing.T, n *testbed.Nodelet, pod string) string {
	t.Helper()
	var id string
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		if c := n.RunningContainer(pod, "main"); c != nil {
			id = c.Id
			return true, ""
		}
		return false, "not running"
	})
	return id
}

// Until its startup probe passes, a container's liveness probe does not
// run: a liveness probe that always fails restarts it only afterwards.
func TestStartupProbeDelaysLiveness(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	n.WriteManifest("slow.yaml", probed("slow", testbed.BusyboxImage, "trap 'exit 0' TERM; sleep 3600 & wait",
		"    startupProbe:\n      periodSeconds: 1\n      failureThreshold: 1000\n      exec: {command: [\"test\", \"-e\", \"/tmp/started\"]}\n"+
			"    livenessProbe:\n      periodSeconds: 1\n      failureThreshold: 1\n      exec: {command: [\"false\"]}\n"))
	c := waitRunningContainer(t, n, "slow")
	// Several startup probes fail; liveness must not have run. (An exec
	// probe can take seconds on a loaded node: the pod's wait, not a
	// period's.)
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		return strings.Count(n.Log(), "Startup probe failed") >= 3, "startup probe not failing yet"
	})
	p := mustPod(t, n, "slow")
	if mainStatus(p).RestartCount != 0 || strings.Contains(n.Log(), "Liveness probe failed") || mainStatus(p).Ready {
		t.Fatalf("before startup: restarts %d, ready %v", mainStatus(p).RestartCount, mainStatus(p).Ready)
	}
	if s := mainStatus(p).Started; s == nil || *s {
		t.Fatalf("started %v before the startup probe passed", s)
	}
	if _, err := n.Exec(c, "touch", "/tmp/started"); err != nil {
		t.Fatal(err)
	}
	n.WaitPod(t, "slow", podTimeout, func(p *v1.Pod) (bool, string) {
		return mainStatus(p).RestartCount >= 1, "liveness did not restart it after startup"
	})
}
