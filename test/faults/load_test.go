//go:build integration

package faults

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/nodelet/nodelet/internal/testbed"
)

// loadPods is how many pods the churn scenario creates and deletes each
// round: make faults runs upstream's maxPods (110); a plain go test 15.
var loadPods = flag.Int("faults.pods", 15, "pods created and deleted per round in TestChurn")

// Pods created and deleted three times in a row leave nothing behind.
func TestChurn(t *testing.T) {
	record(t, row{scenario: "churn", load: fmt.Sprintf("%d pods x 3 rounds", *loadPods), fault: "none (load alone)",
		invariants: []string{invNoneLost, invNoRestart, invTruth, invNoCRILeak, invNoHostLeak, invNoGoroutine}})
	n := startNode(t, "")
	idle := goroutines(t, n)
	var worst time.Duration
	for round := 0; round < 3; round++ {
		start := time.Now()
		names := writePods(n, fmt.Sprintf("churn%d", round), *loadPods)
		allRunning(t, n, names)
		checkNoRestarts(t, n, names)
		checkTruth(t, n, names)
		deleteAndCheck(t, n, names, idle)
		worst = max(worst, time.Since(start))
	}
	setRow(t, worst)
}

// streams is how many log followers, and how many exec sessions, the
// kubelet API serves at once in TestStreamsUnderChurn.
const streams = 50

// The kubelet API serves 50 `logs -f` and 50 exec sessions at once while
// pods come and go: every session gets its output, and once they end no
// goroutine is left behind.
func TestStreamsUnderChurn(t *testing.T) {
	record(t, row{scenario: "logs -f and exec under churn", load: fmt.Sprintf("%d logs -f + %d exec", streams, streams), fault: "10 pods created and deleted meanwhile",
		invariants: []string{invNoneLost, invNoRestart, invNoCRILeak, invNoGoroutine, "every session served"}})
	n := startNode(t, "")
	idle := goroutines(t, n)
	talkers := []string{"talker-0", "talker-1", "talker-2", "talker-3", "talker-4"}
	for _, name := range talkers {
		n.WriteManifest(name+".yaml", talker(name))
	}
	allRunning(t, n, talkers)
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var lines atomic.Int64
	followers := followLogs(t, ctx, n, talkers, &lines)
	g := new(errgroup.Group)
	for i := 0; i < streams; i++ {
		g.Go(func() error { return execOnce(n, talkers[i%len(talkers)], i) })
	}
	churn := writePods(n, "churn", 10)
	allRunning(t, n, churn)
	removePods(n, churn)
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	// Every follower still streams: the count of lines keeps growing.
	before := lines.Load()
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		return lines.Load() > before+int64(streams), fmt.Sprintf("%d lines since the execs ended", lines.Load()-before)
	})
	cancel()
	followers.Wait()
	setRow(t, time.Since(start))
	checkNoRestarts(t, n, talkers)
	deleteAndCheck(t, n, talkers, idle)
}

// talker is a pod that logs a line every tenth of a second.
func talker(name string) string { return shPod(name, "while true; do echo tick; sleep 0.1; done") }

func apiClient() *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, MaxConnsPerHost: 2 * streams}}
}

// followLogs opens streams log followers over the pods, each counting
// the lines it reads into lines until ctx ends. It fails the test if one
// cannot open or ends early.
func followLogs(t *testing.T, ctx context.Context, n *testbed.Nodelet, pods []string, lines *atomic.Int64) *sync.WaitGroup {
	t.Helper()
	client := apiClient()
	var wg sync.WaitGroup
	opened := make(chan error, streams)
	for i := 0; i < streams; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u := fmt.Sprintf("https://127.0.0.1:%d/containerLogs/default/%s/main?follow=true&tailLines=1", n.APIPort, n.PodName(pods[i%len(pods)]))
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			resp, err := client.Do(req)
			if err != nil {
				opened <- err
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				opened <- fmt.Errorf("logs -f: HTTP %d", resp.StatusCode)
				return
			}
			opened <- nil
			s := bufio.NewScanner(resp.Body)
			for s.Scan() {
				lines.Add(1)
			}
			if ctx.Err() == nil {
				t.Errorf("a log follower of %s ended early: %v", pods[i%len(pods)], s.Err())
			}
		}()
	}
	for i := 0; i < streams; i++ {
		if err := <-opened; err != nil {
			t.Fatal(err)
		}
	}
	return &wg
}

// execOnce runs a command in the pod's container through the kubelet
// API, as the API server's exec does, and checks its output.
func execOnce(n *testbed.Nodelet, pod string, i int) error {
	q := url.Values{"command": {"sh", "-c", fmt.Sprintf("sleep 1; echo session-%d", i)}, "output": {"1"}, "error": {"1"}}
	u := &url.URL{Scheme: "https", Host: fmt.Sprintf("127.0.0.1:%d", n.APIPort), Path: fmt.Sprintf("/exec/default/%s/main", n.PodName(pod)), RawQuery: q.Encode()}
	cfg := &rest.Config{Host: u.Host, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	exec, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	if err != nil {
		return err
	}
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}); err != nil {
		return fmt.Errorf("exec %d in %s: %w (stderr %q)", i, pod, err, errOut.String())
	}
	if want := fmt.Sprintf("session-%d\n", i); out.String() != want {
		return fmt.Errorf("exec %d in %s: output %q, want %q", i, pod, out.String(), want)
	}
	return nil
}
