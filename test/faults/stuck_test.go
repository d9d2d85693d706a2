//go:build integration

package faults

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testbed"
)

// One pod's StopContainer hangs in the runtime (a CRI proxy holds it)
// while ten other pods are created and deleted: the ten start and go as
// usual, /healthz stays ok, the stuck pod's sync fails with the stuck call
// named and is retried, and once the call is released the pod goes too.
func TestStuckStopHurtsOnePod(t *testing.T) {
	const others = 10
	record(t, row{scenario: "StopContainer stuck for one pod", load: fmt.Sprintf("%d pods created and deleted", others),
		fault:      "one pod's StopContainer hangs",
		invariants: []string{invNoneLost, invNoRestart, invNoCRILeak, invNoHostLeak, invNoGoroutine, "others unaffected", "healthz ok"}})
	proxy, err := testbed.StartCRIProxy(cd, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Stop)
	// A stop may take the grace period (2 s) plus runtimeRequestTimeout.
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{RuntimeEndpoint: proxy.Endpoint,
		ExtraConfig: openAPI + "runtimeRequestTimeout: 5s\n"})
	idle := goroutines(t, n)
	n.WriteManifest("victim.yaml", sleeper("victim"))
	allRunning(t, n, []string{"victim"})
	stuck := n.RunningPodContainer(n.PodName("victim"), "main").Id
	proxy.Hold("StopContainer", stuck)
	n.RemoveManifest("victim.yaml")
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		return proxy.Held("StopContainer", stuck) > 0, "the victim's stop was not attempted"
	})

	start := time.Now()
	names := writePods(n, "other", others)
	allRunning(t, n, names)
	removePods(n, names)
	testbed.Eventually(t, convergeTimeout, func() (bool, string) {
		for _, name := range names {
			if len(n.RuntimeSandboxes(n.PodName(name))) > 0 {
				return false, name + " is still there"
			}
		}
		return true, ""
	})
	took := time.Since(start)
	if err := n.Healthz(); err != nil {
		t.Fatalf("healthz while one stop hangs: %v", err)
	}
	// The stuck call failed the victim's sync by its deadline, with a
	// FailedKillPod event naming it, and was tried again.
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		event := false
		for _, l := range strings.Split(n.Log(), "\n") {
			event = event || strings.Contains(l, `reason="FailedKillPod"`) && strings.Contains(l, "stopping container main ("+stuck+")")
		}
		return proxy.Held("StopContainer", stuck) >= 2 && event,
			fmt.Sprintf("stop held %d times; FailedKillPod event naming it: %v", proxy.Held("StopContainer", stuck), event)
	})
	t.Logf("10 pods created and deleted in %v while one stop hung", took.Round(time.Millisecond))
	proxy.Release("StopContainer", stuck)
	setRow(t, took)
	allGone(t, n)
	checkNoHostLeaks(t, n)
	checkGoroutines(t, n, idle)
}
