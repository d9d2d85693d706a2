//go:build integration

package standalone

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testbed"
)

// Touching a manifest, or rewriting it with the same content reformatted,
// restarts nothing.
func TestTouchedManifestRestartsNothing(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	n.WriteManifest("web.yaml", sleeper("web", "x"))
	before := waitRunning(t, n, "web", "main")
	p, _ := n.Pod("web")
	uid := p.UID

	path := filepath.Join(n.Manifests, "web.yaml")
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	n.WriteManifest("web.yaml", "# a comment changes the file, not the pod\n"+sleeper("web", "x"))
	// Events are handled in order: once a pod written afterwards runs,
	// the touch and the rewrite have been seen.
	n.WriteManifest("marker.yaml", sleeper("marker", "m"))
	waitRunning(t, n, "marker", "main")

	after := n.RunningContainer("web", "main")
	if after == nil || after.Id != before.Id || after.PodSandboxId != before.PodSandboxId {
		t.Fatalf("container %v replaced by %v", before.Id, after)
	}
	p, _ = n.Pod("web")
	if p.UID != uid || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Fatalf("pod uid %s (was %s), restarts %d", p.UID, uid, p.Status.ContainerStatuses[0].RestartCount)
	}
}

// countingServer serves static pods and counts requests.
type countingServer struct {
	mu       sync.Mutex
	status   int
	body     string
	requests int
}

func (s *countingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	w.WriteHeader(s.status)
	_, _ = fmt.Fprint(w, s.body) // a failed write is nodelet's to see
}

func (s *countingServer) set(status int, body string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.body = status, body
	return s.requests
}

func (s *countingServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// urlNode runs nodelet on pods from a URL, served from body, polled
// every 200 ms.
func urlNode(t *testing.T, body string) (*countingServer, *testbed.Nodelet) {
	srv := &countingServer{status: 200, body: body}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return srv, testbed.StartNodelet(t, cd, testbed.NodeletOptions{
		ExtraConfig: fmt.Sprintf("staticPodURL: %s\nhttpCheckFrequency: 200ms\n", hs.URL),
	})
}

// The HTTP source: pods from a URL run, follow changes, and survive the
// server failing.
func TestPodsFromURL(t *testing.T) {
	srv, n := urlNode(t, sleeper("fromurl", "one"))
	first := waitRunning(t, n, "fromurl", "main")
	p, _ := n.Pod("fromurl")
	if p.Annotations["kubernetes.io/config.source"] != "http" {
		t.Fatalf("source annotation %q", p.Annotations["kubernetes.io/config.source"])
	}

	// The server fails for a few polls: the pod stays.
	seen := srv.set(500, "down for maintenance")
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		return srv.count() >= seen+3, "nodelet stopped polling"
	})
	if c := n.RunningContainer("fromurl", "main"); c == nil || c.Id != first.Id {
		t.Fatalf("the pod did not survive the server failing: %v", c)
	}
	if !strings.Contains(n.Log(), "keeping the last good set") {
		t.Error("the failure was not logged")
	}

	// A changed body replaces the pod.
	srv.set(200, sleeper("fromurl", "two"))
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		c := n.RunningContainer("fromurl", "main")
		return c != nil && c.Id != first.Id, "pod not replaced"
	})
	c := waitRunning(t, n, "fromurl", "main")
	if out, err := n.Exec(c.Id, "cat", "/proc/1/cmdline"); err != nil || !strings.Contains(out, "two") {
		t.Fatalf("new container runs %q (%v)", out, err)
	}
}

// Killed and started again while the static pod URL fails, nodelet runs
// the URL's pods from its journal: the pod is known and Running, with the
// container it had. Once the URL answers with the same pod, nothing
// restarts.
func TestURLPodsRestoredFromTheJournal(t *testing.T) {
	srv, n := urlNode(t, sleeper("fromurl", "one"))
	first := waitRunning(t, n, "fromurl", "main")

	srv.set(500, "down for maintenance")
	n.Kill()
	testbed.Eventually(t, 30*time.Second, func() (bool, string) { return n.Exited(), "nodelet still runs" })
	n.Start()
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		return strings.Contains(n.Log(), `running the node journal's" source="http" pods=1`), "the journal's pods not restored"
	})
	// Only the journal can have told nodelet about the pod: the URL fails.
	if c := waitRunning(t, n, "fromurl", "main"); c.Id != first.Id {
		t.Fatalf("container %s replaced by %s", first.Id, c.Id)
	}

	seen := srv.set(200, sleeper("fromurl", "one"))
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		return srv.count() >= seen+3, "nodelet stopped polling"
	})
	c := waitRunning(t, n, "fromurl", "main")
	p, _ := n.Pod("fromurl")
	if c.Id != first.Id || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Fatalf("container %s replaced by %s, restarts %d", first.Id, c.Id, p.Status.ContainerStatuses[0].RestartCount)
	}
}
