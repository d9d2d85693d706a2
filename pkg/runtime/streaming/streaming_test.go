package streaming

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubelettypes "k8s.io/kubelet/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/fakecri"
	"github.com/nodelet/nodelet/internal/testutil"
)

// syncWriter is a follower's output, read while it is written.
type syncWriter struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

type fixture struct {
	rt    *fakecri.Runtime
	clock *testingclock.FakeClock
}

func newFixture(t *testing.T) *fixture {
	clk := testingclock.NewFakeClock(time.Unix(1796000000, 0))
	return &fixture{rt: fakecri.New(clk, "img"), clock: clk}
}

// start runs a sandbox and a container in it, labelled as kubelets
// label them, and returns the container's ID.
func (f *fixture) start(t *testing.T, ns, pod, name string) string {
	t.Helper()
	ctx := context.Background()
	logs := t.TempDir()
	testutil.Must(t, os.MkdirAll(filepath.Join(logs, name), 0o755)) // as the runtime manager makes it
	labels := map[string]string{kubelettypes.KubernetesPodNameLabel: pod, kubelettypes.KubernetesPodNamespaceLabel: ns,
		kubelettypes.KubernetesPodUIDLabel: "uid"}
	sb, err := f.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: pod, Namespace: ns, Uid: "uid"}, Labels: labels, LogDirectory: logs,
	}})
	testutil.Must(t, err)
	cl := maps.Clone(labels)
	cl[kubelettypes.KubernetesContainerNameLabel] = name
	c, err := f.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name}, Image: &runtimeapi.ImageSpec{Image: "img"}, Labels: cl, LogPath: name + "/0.log",
	}})
	testutil.Must(t, err)
	_, err = f.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId})
	testutil.Must(t, err)
	return c.ContainerId
}

// TestFollowAcrossRotations: a followed log loses no line and repeats
// none across rotations, the first one right after the follower reached
// the end of the file (where upstream's CRI log reader, k8s.io/cri-client
// logs.ReadLogs, misses the new file until the next rotation and drops
// everything in between), and the rotation after it before the follower
// polled again.
func TestFollowAcrossRotations(t *testing.T) {
	f := newFixture(t)
	id := f.start(t, "ns", "p", "app")
	cctx := context.Background()
	st, err := f.rt.ContainerStatus(cctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	testutil.Must(t, err)
	path := st.Status.LogPath
	line := 0
	write := func(n int) {
		t.Helper()
		out, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o640)
		testutil.Must(t, err)
		defer out.Close()
		for range n {
			line++
			_, err := fmt.Fprintf(out, "2026-11-26T10:00:00.000000000Z stdout F line %d\n", line)
			testutil.Must(t, err)
		}
	}
	rotate := func() {
		t.Helper()
		testutil.Must(t, os.Rename(path, fmt.Sprintf("%s.%d", path, line)))
		_, err := f.rt.ReopenContainerLog(cctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: id})
		testutil.Must(t, err)
	}
	write(5)
	s := NewStreamer(f.rt, f.clock, time.Second)
	out := &syncWriter{}
	ctx, cancel := context.WithCancel(cctx)
	done := make(chan error, 1)
	go func() {
		done <- s.ContainerLogs(ctx, "ns", "p", "app", LogOptions{Follow: true, TailLines: -1}, out)
	}()
	seen := func(n int) {
		t.Helper()
		testutil.WaitFor(t, fmt.Sprintf("line %d followed", n), func() bool {
			return strings.Contains(out.String(), fmt.Sprintf("line %d\n", n))
		})
	}
	seen(5)
	testutil.WaitFor(t, "the follower waiting", func() bool { return f.clock.HasWaiters() })
	rotate()
	write(5) // lines 6-10, in the new file
	f.clock.Step(logFollowPoll)
	seen(10)
	testutil.WaitFor(t, "the follower waiting", func() bool { return f.clock.HasWaiters() })
	write(2) // lines 11-12 into the file about to be rotated
	rotate()
	write(3) // 13-15
	f.clock.Step(logFollowPoll)
	seen(15)
	cancel()
	if err := <-done; err != nil && err != io.EOF {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := 1; i <= 15; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if got := out.String(); got != want.String() {
		t.Fatalf("followed:\n%s\nwant lines 1 to 15 once each", got)
	}
}
