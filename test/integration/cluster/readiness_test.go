//go:build integration

package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testbed"
	"github.com/nodelet/nodelet/pkg/node/journal"
)

// A nodelet killed and started again neither unreadies a ready pod nor
// readies one whose startup probe has not passed: the API never sees
// Ready=False for the first or Ready=True for the second across the
// restart, while the restarted nodelet probes both.
func TestReadinessAcrossARestart(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-readiness", cd, "")
	waitNodeReady(t, n.NodeName, 10*time.Second)
	pods := cl.Client.CoreV1().Pods(ns)
	exec := func(cmd string) v1.ProbeHandler {
		return v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", cmd}}}
	}
	ready := busyboxPod("ready", n.NodeName)
	// A saved result is trusted for the period times the failure
	// threshold: 20 s, so a restart on a loaded machine (kill to first
	// sync took 8 s in one run, past the 6 s of a threshold of 3) still
	// finds it valid. The probe passes unless it times out.
	ready.Spec.Containers[0].ReadinessProbe = &v1.Probe{ProbeHandler: exec("echo x >> /tmp/probes"), PeriodSeconds: 2, FailureThreshold: 10}
	gated := busyboxPod("gated", n.NodeName)
	gated.Spec.Containers[0].StartupProbe = &v1.Probe{ProbeHandler: exec("echo x >> /tmp/probes; test -f /tmp/started"), PeriodSeconds: 2, FailureThreshold: 1000}
	for _, p := range []*v1.Pod{ready, gated} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitPod(t, 30*time.Second, ns, "ready", podReady(v1.ConditionTrue))
	waitPod(t, 30*time.Second, ns, "gated", running)
	ids := map[string]string{"ready": n.RunningPodContainer("ready", "main").Id, "gated": n.RunningPodContainer("gated", "main").Id}
	// The gated pod's startup probe has failed at least once.
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		return probeCount(t, n, ids["gated"]) > 0, "the startup probe has not run"
	})
	// SIGKILL loses what the journal has not committed: wait for the
	// ready pod's result to be on disk.
	path := filepath.Join(n.RootDir, "nodelet_journal.db")
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		s, _, err := journal.Inspect(path)
		if err != nil {
			return false, err.Error()
		}
		for _, r := range s.Probes {
			if r.ContainerID == ids["ready"] && r.Probe == "Readiness" && r.Result == "Success" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("probe records %+v", s.Probes)
	})

	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := watchReady(t, ns, list.ResourceVersion)
	n.Kill()
	// Nothing probes while nodelet is down: the count now is the mark
	// the restarted nodelet's probes must pass.
	counts := map[string]int{}
	for name, id := range ids {
		counts[name] = probeCount(t, n, id)
	}
	n.Start()
	waitNodeReady(t, n.NodeName, 20*time.Second)
	// The restarted nodelet synced both pods (its own view has them
	// Running with the right readiness) and probed each twice.
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		list, err := n.Pods()
		if err != nil {
			return false, err.Error()
		}
		got := map[string]string{}
		for _, p := range list {
			got[p.Name] = fmt.Sprintf("%s/%s", p.Status.Phase, condition(&p, v1.PodReady))
		}
		if got["ready"] != "Running/True" || got["gated"] != "Running/False" {
			return false, fmt.Sprintf("nodelet's view %v", got)
		}
		for name, id := range ids {
			if c := probeCount(t, n, id); c < counts[name]+2 {
				return false, fmt.Sprintf("%s probed %d times since the restart", name, c-counts[name])
			}
		}
		return true, ""
	})
	for name, id := range ids {
		if c := n.RunningPodContainer(name, "main"); c == nil || c.Id != id {
			t.Fatalf("%s's container was replaced", name)
		}
	}
	if s := seen(); strings.Contains(s["ready"], "False") || strings.Contains(s["gated"], "True") {
		t.Errorf("Ready conditions the API saw across the restart: %v", s)
	}

	// The startup probe still gates: once it passes, the pod is ready.
	if _, err := n.Exec(ids["gated"], "touch", "/tmp/started"); err != nil {
		t.Fatal(err)
	}
	waitPod(t, 30*time.Second, ns, "gated", podReady(v1.ConditionTrue))
}

func podReady(want v1.ConditionStatus) func(*v1.Pod) (bool, string) {
	return func(p *v1.Pod) (bool, string) {
		got := condition(p, v1.PodReady)
		return got == want, fmt.Sprintf("Ready=%s", got)
	}
}

// probeCount is how many times a test pod's probe ran (a line each).
func probeCount(t *testing.T, n *testbed.Nodelet, id string) int {
	t.Helper()
	out, err := n.Exec(id, "sh", "-c", "cat /tmp/probes 2>/dev/null || true")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(out, "\n")
}

// watchReady watches the namespace's pods from resourceVersion on and
// returns what it saw so far: per pod, every Ready status the API wrote,
// in order, joined by commas ("" when none was written).
func watchReady(t *testing.T, ns, resourceVersion string) func() map[string]string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := cl.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: resourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string][]string{}
	go func() {
		for e := range w.ResultChan() {
			p, ok := e.Object.(*v1.Pod)
			if !ok {
				continue
			}
			mu.Lock()
			seen[p.Name] = append(seen[p.Name], string(condition(p, v1.PodReady)))
			mu.Unlock()
		}
	}()
	return func() map[string]string {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]string{}
		for name, s := range seen {
			out[name] = strings.Join(s, ",")
		}
		return out
	}
}
