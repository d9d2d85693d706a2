//go:build integration

package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testbed"
)

// Bad input at the manifest door: each gets a clear error (a log line and
// an event) or is taken in its stride, and the pods already running are
// left alone.
func TestBadManifests(t *testing.T) {
	n := startNode(t, "maxPods: 12\n")
	idle := goroutines(t, n)
	bystanders := writePods(n, "bystander", 2)
	allRunning(t, n, bystanders)
	untouched := func(t *testing.T) {
		t.Helper()
		allRunning(t, n, bystanders)
		checkNoRestarts(t, n, bystanders)
		if err := n.Healthz(); err != nil {
			t.Errorf("nodelet unhealthy: %v", err)
		}
	}
	inputRow := func(t *testing.T, what string, invariants ...string) {
		record(t, row{scenario: "bad input: " + what, load: "2 pods running", fault: what,
			invariants: append([]string{invNoneLost, invNoRestart}, invariants...)})
	}

	t.Run("oversized", func(t *testing.T) {
		inputRow(t, "11 MiB manifest", "clear error")
		start := time.Now()
		big := sleeper("big") + "# " + strings.Repeat("x", 11<<20) + "\n"
		if err := os.WriteFile(filepath.Join(n.Manifests, "big.yaml"), []byte(big), 0o644); err != nil {
			t.Fatal(err)
		}
		waitLog(t, n, `"Could not process static pod manifest, ignoring it" err="manifest is larger than 10485760 bytes"`)
		setRow(t, time.Since(start))
		untouched(t)
		n.RemoveManifest("big.yaml")
	})
	t.Run("symlink loop", func(t *testing.T) {
		inputRow(t, "symlink loop in the manifest dir", "clear error")
		start := time.Now()
		for _, l := range [][2]string{{"loop-b.yaml", "loop-a.yaml"}, {"loop-a.yaml", "loop-b.yaml"}} {
			if err := os.Symlink(filepath.Join(n.Manifests, l[0]), filepath.Join(n.Manifests, l[1])); err != nil {
				t.Fatal(err)
			}
		}
		waitLog(t, n, "too many levels of symbolic links")
		setRow(t, time.Since(start))
		untouched(t)
		n.RemoveManifest("loop-a.yaml")
		n.RemoveManifest("loop-b.yaml")
	})
	t.Run("replaced 100 times a second", func(t *testing.T) {
		inputRow(t, "manifest rewritten 100/s for 3 s")
		n.WriteManifest("churn.yaml", sleeper("churn"))
		allRunning(t, n, []string{"churn"})
		start := time.Now()
		tick := time.NewTicker(10 * time.Millisecond)
		for i := 0; i < 300; i++ {
			<-tick.C // the fault's rate, not a wait for the code under test
			n.WriteManifest("churn.yaml", sleeper("churn"))
		}
		tick.Stop()
		names := append([]string{"churn"}, bystanders...)
		allRunning(t, n, names)
		setRow(t, time.Since(start))
		checkNoRestarts(t, n, names)
		untouched(t)
		n.RemoveManifest("churn.yaml")
	})
	t.Run("1000 pods in one file", func(t *testing.T) {
		inputRow(t, "PodList of 1000 pods, maxPods 12", "clear error")
		start := time.Now()
		var b strings.Builder
		b.WriteString("apiVersion: v1\nkind: PodList\nitems:\n")
		for i := 0; i < 1000; i++ {
			fmt.Fprintf(&b, "- %s\n", strings.ReplaceAll(strings.TrimSuffix(sleeper(fmt.Sprintf("many-%d", i)), "\n"), "\n", "\n  "))
		}
		n.WriteManifest("many.yaml", b.String())
		testbed.Eventually(t, convergeTimeout, func() (bool, string) {
			rejected := 0
			for _, l := range strings.Split(n.Log(), "\n") {
				if strings.Contains(l, `"Pod was rejected"`) && strings.Contains(l, `reason="OutOfpods"`) {
					rejected++
				}
			}
			return rejected >= 990, fmt.Sprintf("%d pods rejected", rejected)
		})
		setRow(t, time.Since(start))
		untouched(t)
		n.RemoveManifest("many.yaml")
	})
	deleteAndCheck(t, n, bystanders, idle)
}

func waitLog(t *testing.T, n *testbed.Nodelet, s string) {
	t.Helper()
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		return strings.Contains(n.Log(), s), "the log lacks " + s
	})
}
