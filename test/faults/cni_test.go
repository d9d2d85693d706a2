//go:build integration

package faults

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testbed"
)

// cniWrapper is a "bridge" plugin that fails ADD for a pod whose name has
// a fail-<pod> file beside it, and is the real bridge plugin otherwise.
const cniWrapper = `#!/bin/sh
dir=$(dirname "$0")
if [ "$CNI_COMMAND" = ADD ]; then
	pod=$(echo "$CNI_ARGS" | tr ';' '\n' | sed -n 's/^K8S_POD_NAME=//p')
	if [ -n "$pod" ] && [ -e "$dir/fail-$pod" ]; then
		echo '{"cniVersion":"1.0.0","code":999,"msg":"injected CNI failure"}'
		exit 1
	fi
fi
exec /usr/lib/cni/bridge
`

// The CNI plugin fails for one pod: that pod's sandbox is retried with
// back-off and events, the others start; once the plugin works again the
// pod starts, and nothing failed along the way is left behind.
func TestCNIFailsForOnePod(t *testing.T) {
	record(t, row{scenario: "CNI plugin failing for one pod", load: "4 pods created at once", fault: "CNI ADD fails for 1 pod, then heals",
		invariants: []string{invNoneLost, invNoRestart, invTruth, invNoCRILeak, invNoHostLeak, invNoGoroutine, "clear error"}})
	bin := t.TempDir()
	entries, err := os.ReadDir("/usr/lib/cni")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "bridge" {
			if err := os.Symlink(filepath.Join("/usr/lib/cni", e.Name()), filepath.Join(bin, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(bin, "bridge"), []byte(cniWrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(bin, "fail-victim-node1")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	wrapped, err := testbed.StartContainerdWith(ctx, 1, testbed.ContainerdOptions{CNIBinDir: bin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := wrapped.Stop(); err != nil {
			t.Errorf("stopping the second containerd: %v", err)
		}
	})
	n := testbed.StartNodelet(t, wrapped, testbed.NodeletOptions{CgroupRoot: testbed.CgroupRoot() + "/cni", ExtraConfig: openAPI})
	idle := goroutines(t, n)
	others := writePods(n, "other", 3)
	n.WriteManifest("victim.yaml", sleeper("victim"))
	allRunning(t, n, others)
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		return strings.Count(n.Log(), "injected CNI failure") >= 2 && strings.Contains(n.Log(), `reason="FailedCreatePodSandBox"`),
			"no retried FailedCreatePodSandBox event naming the CNI failure"
	})
	start := time.Now()
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	names := append(others, "victim")
	allRunning(t, n, names)
	setRow(t, time.Since(start))
	checkNoRestarts(t, n, names)
	checkTruth(t, n, names)
	deleteAndCheck(t, n, names, idle)
}
