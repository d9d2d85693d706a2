//go:build integration

package faults

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// The root directory fills up (a small tmpfs, filled to the last byte):
// a new pod waits with a clear event, the running pod is left alone, and
// once space returns the new pod starts; deleting everything leaves
// nothing behind.
func TestRootDirFull(t *testing.T) {
	record(t, row{scenario: "root dir full", load: "1 pod running, 1 created", fault: "ENOSPC on the root dir, then space back",
		invariants: []string{invNoneLost, invNoRestart, invTruth, invNoCRILeak, invNoHostLeak, "clear error"}})
	n := startNode(t, "")
	// The root directory moves onto a 4 MiB tmpfs while nodelet is down.
	n.Stop()
	if err := syscall.Mount("tmpfs", n.RootDir, "tmpfs", 0, "size=4m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.Stop()
		if err := syscall.Unmount(n.RootDir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting the root dir: %v", err)
		}
	})
	n.Start()
	idle := goroutines(t, n)
	allRunning(t, n, writePods(n, "running", 1))

	filler := fill(t, n.RootDir)
	n.WriteManifest("newcomer.yaml", withEmptyDir("newcomer"))
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		return strings.Contains(n.Log(), "no space left on device") && strings.Contains(n.Log(), `object="default/newcomer-node1"`), "no error about the full disk for the new pod"
	})
	for _, l := range strings.Split(n.Log(), "\n") {
		if strings.Contains(l, "no space left on device") && strings.Contains(l, "newcomer") {
			t.Logf("the error: %s", l)
			break
		}
	}
	if p, _ := n.Pod("newcomer"); p == nil || p.Status.Phase != v1.PodPending {
		t.Fatalf("the new pod on a full disk: %+v", p)
	}
	start := time.Now()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	names := []string{"running-0", "newcomer"}
	allRunning(t, n, names)
	setRow(t, time.Since(start))
	checkNoRestarts(t, n, names)
	checkTruth(t, n, names)
	deleteAndCheck(t, n, names, idle)
}

// fill writes a file into dir until the filesystem has no space left.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	// Small writes too, down to the last block.
	for _, err := f.Write(chunk[:1]); err == nil; _, err = f.Write(chunk[:1]) {
	}
	return path
}

func withEmptyDir(name string) string {
	return strings.Replace(sleeper(name), "  containers:\n", "  volumes: [{name: scratch, emptyDir: {}}]\n  containers:\n", 1) +
		"    volumeMounts: [{name: scratch, mountPath: /scratch}]\n"
}
