//go:build integration

package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testbed"
)

const burst = 30

// containerd is SIGKILLed in the middle of a 30-pod burst, and started
// again: every pod ends running once, on one sandbox, and nothing leaks.
func TestContainerdKilledDuringBurst(t *testing.T) {
	record(t, row{scenario: "containerd SIGKILL during creates", load: fmt.Sprintf("%d pods created at once", burst), fault: "SIGKILL containerd, restart",
		invariants: []string{invNoneLost, invTruth, invNoCRILeak, invNoHostLeak, invNoGoroutine}})
	n := startNode(t, "")
	idle := goroutines(t, n)
	names := writePods(n, "burst", burst)
	waitSandboxes(t, burst/3)
	crashAndRestart(t)
	start := time.Now()
	allRunning(t, n, names)
	setRow(t, time.Since(start))
	checkTruth(t, n, names)
	deleteAndCheck(t, n, names, idle)
}

// containerd is SIGKILLed in the middle of deleting 30 pods, and started
// again: every pod goes, leaving nothing.
func TestContainerdKilledDuringDeletes(t *testing.T) {
	record(t, row{scenario: "containerd SIGKILL during deletes", load: fmt.Sprintf("%d pods deleted at once", burst), fault: "SIGKILL containerd, restart",
		invariants: []string{invNoneLost, invNoCRILeak, invNoHostLeak, invNoGoroutine}})
	n := startNode(t, "")
	idle := goroutines(t, n)
	names := writePods(n, "doomed", burst)
	allRunning(t, n, names)
	removePods(n, names)
	testbed.Eventually(t, convergeTimeout, func() (bool, string) {
		left := len(sandboxes(t))
		return left <= burst*2/3, fmt.Sprintf("%d sandboxes left", left)
	})
	crashAndRestart(t)
	setRow(t, allGone(t, n))
	checkNoHostLeaks(t, n)
	checkGoroutines(t, n, idle)
}

func sandboxes(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sbs, err := cd.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range sbs {
		ids = append(ids, s.Id)
	}
	return ids
}

func waitSandboxes(t *testing.T, count int) {
	t.Helper()
	testbed.Eventually(t, convergeTimeout, func() (bool, string) {
		have := len(sandboxes(t))
		return have >= count, fmt.Sprintf("%d sandboxes", have)
	})
}

// crashAndRestart kills the test containerd and starts it again at once.
func crashAndRestart(t *testing.T) {
	t.Helper()
	if err := cd.Crash(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cd.Restart(ctx); err != nil {
		t.Fatal(err)
	}
}
