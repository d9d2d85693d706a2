//go:build integration

// Package security attacks a node as someone with only the right to
// create pods (or to reach the kubelet port) would, one attack per
// scenario, and checks what the node answered and the invariant a node
// owes: the host's files, processes and credentials were not reachable.
// Each scenario adds a row to the table printed at the end; see
// docs/security.md.
package security

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

var (
	cd *testbed.Containerd
	// cl is the control plane of the kubelet API and image credential
	// attacks.
	cl *testbed.Cluster
)

// canary is a host directory holding a secret no pod is granted: every
// attack tries to read it, and its token must never show in a pod's log.
var canary struct {
	dir, secret, token string
}

func TestMain(m *testing.M) {
	testbed.Main(m, &cd, setUpCanary, func(context.Context) (func(), error) { return printTable, nil },
		testbed.WithCluster(&cl, "nodelet-security-cluster-"))
}

func setUpCanary(context.Context) (func(), error) {
	dir, err := os.MkdirTemp("/var/lib", "nodelet-security-")
	if err != nil {
		return nil, err
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	canary.dir, canary.secret, canary.token = dir, filepath.Join(dir, "secret"), "canary-"+hex.EncodeToString(b)
	if err := os.WriteFile(canary.secret, []byte(canary.token), 0o600); err != nil {
		return nil, err
	}
	return func() { testbed.RemoveDir(dir) }, nil
}

// hostUntouched checks the invariant after an attack: the secret is as
// it was, nothing new appeared beside it, and its token is in no pod log.
func hostUntouched(t *testing.T, n *testbed.Nodelet) string {
	t.Helper()
	if got, err := os.ReadFile(canary.secret); err != nil || string(got) != canary.token {
		t.Errorf("the host's secret changed: %q, %v", got, err)
	}
	err := filepath.WalkDir(n.LogsDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if data, err := os.ReadFile(path); err == nil && strings.Contains(string(data), canary.token) {
			t.Errorf("a pod read the host's secret: %s holds its token", path)
		}
		return nil
	})
	if err != nil {
		t.Errorf("reading the pod logs: %v", err)
	}
	return "host secret unread and unchanged"
}

// row is one attack's line in the table.
type row struct {
	scenario, attack, answer, invariant string
	failed                              bool
}

var (
	tableMu sync.Mutex
	table   []row
)

// record adds the attack's row once its test ends, marked if it failed.
func record(t *testing.T, r *row) {
	t.Cleanup(func() {
		tableMu.Lock()
		defer tableMu.Unlock()
		r.failed = t.Failed()
		table = append(table, *r)
	})
}

func printTable() {
	tableMu.Lock()
	defer tableMu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-34s | %-50s | %-70s | %s\n", "scenario", "attack", "node's answer", "invariant")
	fmt.Fprintf(&b, "%s\n", strings.Repeat("-", 190))
	for _, r := range table {
		inv := r.invariant
		if r.failed {
			inv = "FAILED"
		}
		fmt.Fprintf(&b, "%-34s | %-50s | %-70s | %s\n", r.scenario, r.attack, clip(r.answer, 70), inv)
	}
	fmt.Fprint(os.Stderr, b.String())
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n-3] + "..."
	}
	return s
}

const podTimeout = 90 * time.Second

// refused waits until the container is held in Waiting with reason and
// returns the message, the node's answer.
func refused(t *testing.T, n *testbed.Nodelet, pod, container, reason string) string {
	t.Helper()
	p := n.WaitPod(t, pod, podTimeout, func(p *v1.Pod) (bool, string) {
		w := testbed.ContainerStatus(p, container).State.Waiting
		return w != nil && w.Reason == reason, fmt.Sprintf("%s: %+v", container, testbed.ContainerStatus(p, container).State)
	})
	return reason + ": " + testbed.ContainerStatus(p, container).State.Waiting.Message
}

// finished waits until the pod's container ran to its end and returns
// what it printed (its termination message).
func finished(t *testing.T, n *testbed.Nodelet, pod, container string) string {
	t.Helper()
	p := n.WaitPod(t, pod, podTimeout, func(p *v1.Pod) (bool, string) {
		return testbed.ContainerStatus(p, container).State.Terminated != nil, fmt.Sprintf("%s: %+v", container, testbed.ContainerStatus(p, container).State)
	})
	return testbed.ContainerStatus(p, container).State.Terminated.Message
}

// hostProcess finds the host process whose command line holds marker and
// returns its pid and real uid as the host sees them.
func hostProcess(t *testing.T, marker string) (pid, uid int) {
	t.Helper()
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, d := range dirs {
			cmdline, err := os.ReadFile(d + "/cmdline")
			if err != nil || !strings.Contains(string(cmdline), marker) {
				continue
			}
			st, err := os.ReadFile(d + "/status")
			if err != nil {
				continue
			}
			for _, l := range strings.Split(string(st), "\n") {
				if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" {
					fmt.Sscan(f[1], &uid)
					fmt.Sscan(filepath.Base(d), &pid)
					return true, ""
				}
			}
		}
		return false, "no host process runs " + marker
	})
	return pid, uid
}

// podLog is everything a static pod's containers wrote to their logs.
func podLog(t *testing.T, n *testbed.Nodelet, name string) string {
	t.Helper()
	return podLogOf(t, n, "default", n.PodName(name), "*")
}

// podLogOf is everything the containers of the pod with that namespace,
// name and UID (a glob) wrote to their logs.
func podLogOf[U ~string](t *testing.T, n *testbed.Nodelet, ns, name string, uid U) string {
	t.Helper()
	var b strings.Builder
	dirs, _ := filepath.Glob(filepath.Join(n.LogsDir, fmt.Sprintf("%s_%s_%s", ns, name, uid)))
	for _, d := range dirs {
		_ = filepath.WalkDir(d, func(path string, e os.DirEntry, err error) error {
			if err == nil && !e.IsDir() {
				data, _ := os.ReadFile(path)
				b.Write(data)
			}
			return nil
		})
	}
	return b.String()
}
