//go:build integration

package faults

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	// The node is a cluster's, so its Ready condition can be watched.
	const node = "stuck"
	kubeconfig, err := cl.NodeKubeconfig(node)
	if err != nil {
		t.Fatal(err)
	}
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{RuntimeEndpoint: proxy.Endpoint, NodeName: node, Kubeconfig: kubeconfig,
		ExtraConfig: openAPI + "runtimeRequestTimeout: 5s\nnodeStatusUpdateFrequency: 1s\n"})
	t.Cleanup(func() { _ = cl.Client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		r := nodeReady(node)
		return r == "True", "node Ready is " + r
	})
	idle := goroutines(t, n)
	n.WriteManifest("victim.yaml", sleeper("victim"))
	allRunning(t, n, []string{"victim"})
	stuck := n.RunningPodContainer(n.PodName("victim"), "main").Id
	proxy.Hold("StopContainer", stuck)
	n.RemoveManifest("victim.yaml")
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		return proxy.Held("StopContainer", stuck) > 0, "the victim's stop was not attempted"
	})

	ready := watchReady(node)
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
	if seen := ready(); len(seen) == 0 || seen[len(seen)-1] != "True" || slices.ContainsFunc(seen, func(r string) bool { return r != "True" }) {
		t.Errorf("node Ready while one stop hangs, sampled every 250 ms: %v", seen)
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
	t.Logf("10 pods created and deleted in %v while one stop hung; the node stayed Ready", took.Round(time.Millisecond))
	proxy.Release("StopContainer", stuck)
	setRow(t, took)
	allGone(t, n)
	checkNoHostLeaks(t, n)
	checkGoroutines(t, n, idle)
}

// nodeReady is the status of the node's Ready condition in the API.
func nodeReady(name string) string {
	node, err := cl.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady {
			return string(c.Status)
		}
	}
	return "unset"
}

// watchReady samples the node's Ready condition every 250 ms until the
// function it returns is called, which returns the distinct values seen,
// in order.
func watchReady(name string) func() []string {
	stop, done := make(chan struct{}), make(chan []string)
	go func() {
		var seen []string
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			if r := nodeReady(name); len(seen) == 0 || seen[len(seen)-1] != r {
				seen = append(seen, r)
			}
			select {
			case <-stop:
				done <- seen
				return
			case <-tick.C:
			}
		}
	}()
	return func() []string {
		close(stop)
		return <-done
	}
}

// One pod's image pull hangs in the runtime (the CRI proxy holds it)
// while three other pods need images of their own, with pulls serialized
// (the default): after runtimeRequestTimeout the stuck pull gives its
// slot up, the three pull and run, /healthz stays ok, and once released
// the stuck pod runs too.
func TestStuckPullHurtsOnePod(t *testing.T) {
	const others = 3
	record(t, row{scenario: "PullImage stuck for one pod", load: fmt.Sprintf("%d pods pulling their own images", others),
		fault:      "one pod's image pull hangs",
		invariants: []string{invNoneLost, invNoRestart, invNoCRILeak, "others unaffected", "healthz ok"}})
	reg := testbed.StartRegistry(t, cd)
	stuck := reg.Push(t, "stuck/busybox:1")
	var images []string
	for i := 0; i < others; i++ {
		images = append(images, reg.Push(t, fmt.Sprintf("other%d/busybox:1", i)))
	}
	proxy, err := testbed.StartCRIProxy(cd, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Stop)
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{RuntimeEndpoint: proxy.Endpoint,
		ExtraConfig: openAPI + "runtimeRequestTimeout: 5s\nserializeImagePulls: true\n"})
	idle := goroutines(t, n)
	proxy.Hold("PullImage", stuck)
	n.WriteManifest("victim.yaml", imagePod("victim", stuck))
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		return proxy.Held("PullImage", stuck) > 0, "the victim's pull was not attempted"
	})
	start := time.Now()
	var names []string
	for i, img := range images {
		names = append(names, fmt.Sprintf("other-%d", i))
		n.WriteManifest(names[i]+".yaml", imagePod(names[i], img))
	}
	allRunning(t, n, names)
	took := time.Since(start)
	if err := n.Healthz(); err != nil {
		t.Fatalf("healthz while one pull hangs: %v", err)
	}
	if c := n.RunningContainer("victim", "main"); c != nil {
		t.Fatal("the victim runs while its pull is held")
	}
	t.Logf("%d pods pulled and started in %v while one pull hung", others, took.Round(time.Millisecond))
	proxy.Release("PullImage", stuck)
	names = append(names, "victim")
	allRunning(t, n, names)
	setRow(t, took)
	checkNoRestarts(t, n, names)
	removePods(n, names)
	allGone(t, n)
	checkGoroutines(t, n, idle)
}

// imagePod is a pod whose one container sleeps, from image, always
// pulled.
func imagePod(name, image string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: %s
    imagePullPolicy: Always
    command: ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
`, name, image)
}

// A runtime that answers nothing about itself (its Status call fails)
// makes the node NotReady, with the reason, while other calls still
// work; once it answers again the node is Ready again.
func TestSilentRuntimeMakesTheNodeNotReady(t *testing.T) {
	record(t, row{scenario: "runtime Status failing", load: "1 pod running", fault: "CRI Status fails (Unavailable)",
		invariants: []string{invNoneLost, invNoRestart, "NotReady with the reason, then Ready"}})
	proxy, err := testbed.StartCRIProxy(cd, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Stop)
	const node = "silent"
	kubeconfig, err := cl.NodeKubeconfig(node)
	if err != nil {
		t.Fatal(err)
	}
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{RuntimeEndpoint: proxy.Endpoint, NodeName: node, Kubeconfig: kubeconfig,
		ExtraConfig: openAPI + "nodeStatusUpdateFrequency: 1s\n"})
	t.Cleanup(func() { _ = cl.Client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	n.WriteManifest("bystander.yaml", sleeper("bystander"))
	allRunning(t, n, []string{"bystander"})
	readyIs(t, node, v1.ConditionTrue, "")
	proxy.Fail("Status", "", codes.Unavailable)
	start := time.Now()
	readyIs(t, node, v1.ConditionFalse, "container runtime is unreachable")
	setRow(t, time.Since(start))
	proxy.Release("Status", "")
	readyIs(t, node, v1.ConditionTrue, "")
	checkNoRestarts(t, n, []string{"bystander"})
	removePods(n, []string{"bystander"})
	allGone(t, n)
}

// readyIs waits until the node's Ready condition has the status and a
// message containing text.
func readyIs(t *testing.T, node string, want v1.ConditionStatus, text string) {
	t.Helper()
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		n, err := cl.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady {
				return c.Status == want && strings.Contains(c.Message, text), fmt.Sprintf("Ready %s: %s", c.Status, c.Message)
			}
		}
		return false, "no Ready condition"
	})
}
