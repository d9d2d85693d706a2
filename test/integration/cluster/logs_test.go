//go:build integration

package cluster

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// TestLogRotation has a container log fast enough to be rotated every
// second or so, with at most three files per container. The files never
// exceed the limit, old rotations are compressed, and `kubectl logs -f`
// follows the log across rotations without losing a line.
func TestLogRotation(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-logs", cd, "containerLogMaxSize: 8Ki\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 100ms\n")
	waitNodeReady(t, n.NodeName, 10*time.Second)
	pod := busyboxPod("chatty", n.NodeName, "sh", "-c",
		`i=0; while true; do i=$((i+1)); echo "line $i padding-padding-padding-padding-padding-padding"; sleep 0.01; done`)
	created, err := cl.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitPod(t, 30*time.Second, ns, "chatty", running)

	fctx, stop := context.WithCancel(ctx)
	defer stop()
	follow := exec.CommandContext(fctx, filepath.Join(cl.BinDir, "kubectl"), "--kubeconfig", cl.AdminKubeconfig, "-n", ns, "logs", "-f", "chatty")
	out, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var followed []string
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			mu.Lock()
			followed = append(followed, sc.Text())
			mu.Unlock()
		}
	}()

	dir := filepath.Join(n.LogsDir, fmt.Sprintf("%s_chatty_%s", ns, created.UID), "main")
	most, compressed := 0, map[string]bool{}
	testbed.Eventually(t, 60*time.Second, func() (bool, string) {
		entries, _ := os.ReadDir(dir)
		var names []string
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".tmp") {
				names = append(names, e.Name())
			}
			if strings.HasSuffix(e.Name(), ".gz") {
				compressed[e.Name()] = true
			}
		}
		most = max(most, len(names))
		return len(compressed) >= 3, fmt.Sprintf("files %v, compressed so far %v", names, compressed)
	})
	if most > 3 {
		t.Errorf("saw %d log files for one container; containerLogMaxFiles is 3", most)
	}
	for _, e := range mustReadDir(t, dir) {
		if fi, _ := e.Info(); !strings.HasSuffix(e.Name(), ".gz") && fi.Size() > 64<<10 {
			t.Errorf("%s has %d bytes: not rotated at 8Ki", e.Name(), fi.Size())
		}
	}

	// The current file still grows: the runtime reopened it.
	tail, code := kubectl(ctx, "", "-n", ns, "logs", "chatty", "--tail", "1")
	if code != 0 || !strings.HasPrefix(tail, "line ") {
		t.Fatalf("kubectl logs --tail 1: %d %q", code, tail)
	}

	stop()
	<-readDone
	_ = follow.Wait() // stopped: its exit status says nothing
	mu.Lock()
	defer mu.Unlock()
	num := regexp.MustCompile(`^line (\d+) `)
	// The follow starts at the beginning of the current file: on a busy
	// machine kubectl may start after the first rotation. From there on,
	// no line may be lost or repeated.
	first, want := 0, 0
	for _, l := range followed {
		m := num.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("followed an unexpected line %q", l)
		}
		got, _ := strconv.Atoi(m[1])
		if want == 0 {
			first, want = got, got
		}
		if got != want {
			t.Fatalf("followed line %d after line %d: lines were lost or repeated across a rotation", got, want-1)
		}
		want++
	}
	// At least four rotations at 8Ki (some 75 lines) each.
	if want-first < 300 {
		t.Fatalf("followed only %d lines", want-first)
	}
	t.Logf("followed %d lines (from line %d) across %d rotations", want-first, first, len(compressed)+1)
}

func mustReadDir(t *testing.T, dir string) []os.DirEntry {
	t.Helper()
	e, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
