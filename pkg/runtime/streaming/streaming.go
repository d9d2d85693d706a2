// Package streaming serves what the kubelet API asks of containers: their
// logs (followed across rotations), exec, attach and port-forward (the
// runtime's streaming URLs) and commands run for their output. It finds
// containers by the upstream labels, so it reads the containers of either
// kubelet.
package streaming

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubelettypes "k8s.io/kubelet/pkg/types"
	"k8s.io/utils/clock"
)

// Runtime is what the streamer asks of the container runtime.
type Runtime interface {
	ListContainers(ctx context.Context, in *runtimeapi.ListContainersRequest, opts ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error)
	ContainerStatus(ctx context.Context, in *runtimeapi.ContainerStatusRequest, opts ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error)
	ListPodSandbox(ctx context.Context, in *runtimeapi.ListPodSandboxRequest, opts ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error)
	Exec(ctx context.Context, in *runtimeapi.ExecRequest, opts ...grpc.CallOption) (*runtimeapi.ExecResponse, error)
	ExecSync(ctx context.Context, in *runtimeapi.ExecSyncRequest, opts ...grpc.CallOption) (*runtimeapi.ExecSyncResponse, error)
	Attach(ctx context.Context, in *runtimeapi.AttachRequest, opts ...grpc.CallOption) (*runtimeapi.AttachResponse, error)
	PortForward(ctx context.Context, in *runtimeapi.PortForwardRequest, opts ...grpc.CallOption) (*runtimeapi.PortForwardResponse, error)
}

// ErrNotFound classifies a request for a pod or container the runtime
// does not have (the server answers 404).
var ErrNotFound = errors.New("not found")

// logFollowPoll is how often a followed log is checked for new lines.
const logFollowPoll = 100 * time.Millisecond

// Streamer serves what the kubelet API asks of containers: logs, exec,
// attach and port-forward (the runtime's streaming URLs), and commands run
// for their output.
type Streamer struct {
	runtime        Runtime
	clock          clock.Clock
	requestTimeout time.Duration
}

// NewStreamer returns the streamer over a runtime; each unary call is
// bounded by requestTimeout.
func NewStreamer(runtime Runtime, clk clock.Clock, requestTimeout time.Duration) *Streamer {
	return &Streamer{runtime: runtime, clock: clk, requestTimeout: requestTimeout}
}

func (s *Streamer) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.requestTimeout)
}

// LogOptions are kubectl logs' options, as the kubelet API takes them.
type LogOptions struct {
	Follow     bool
	Previous   bool
	Timestamps bool
	// TailLines < 0 means all.
	TailLines  int64
	SinceTime  *time.Time
	LimitBytes int64
}

// findContainer returns the container of the pod with the name: the
// newest instance, or with previous the one before it.
func (s *Streamer) findContainer(ctx context.Context, namespace, pod, uid, name string, previous bool) (*runtimeapi.Container, error) {
	labels := map[string]string{kubelettypes.KubernetesPodNameLabel: pod, kubelettypes.KubernetesPodNamespaceLabel: namespace, kubelettypes.KubernetesContainerNameLabel: name}
	if uid != "" {
		labels[kubelettypes.KubernetesPodUIDLabel] = uid
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.runtime.ListContainers(cctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: labels}})
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	cs := resp.Containers
	sort.Slice(cs, func(i, j int) bool { return cs[i].CreatedAt > cs[j].CreatedAt })
	idx := 0
	if previous {
		idx = 1
	}
	if len(cs) <= idx {
		what := "container"
		if previous {
			what = "previous terminated container"
		}
		return nil, fmt.Errorf("%w: %s %q in pod %s/%s", ErrNotFound, what, name, namespace, pod)
	}
	return cs[idx], nil
}

// ContainerLogs writes a container's log, as kubectl logs shows it: the
// container's own output (or with timestamps, each line prefixed with
// its time), optionally the last lines only, since a time, up to a byte
// limit, and followed while the container runs.
func (s *Streamer) ContainerLogs(ctx context.Context, namespace, pod, name string, opts LogOptions, w io.Writer) error {
	c, err := s.findContainer(ctx, namespace, pod, "", name, opts.Previous)
	if err != nil {
		return err
	}
	cctx, cancel := s.call(ctx)
	st, err := s.runtime.ContainerStatus(cctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
	cancel()
	if err != nil {
		return fmt.Errorf("container status: %w", err)
	}
	path := st.GetStatus().GetLogPath()
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening the log of container %q: %w", name, err)
	}
	var next *os.File
	defer func() {
		f.Close()
		if next != nil {
			next.Close()
		}
	}()
	lw := &limitWriter{w: w, left: opts.LimitBytes}
	if opts.TailLines >= 0 {
		if err := seekTail(f, opts.TailLines); err != nil {
			return err
		}
	}
	r := bufio.NewReader(f)
	running := func() bool {
		cctx, cancel := s.call(ctx)
		defer cancel()
		s, err := s.runtime.ContainerStatus(cctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
		return err == nil && s.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING
	}
	var pending []byte
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			line = append(pending, line[:len(line)-1]...)
			pending = nil
			if werr := writeLogLine(lw, line, opts); werr != nil {
				return werr
			}
			continue
		}
		pending = append(pending, line...)
		if !errors.Is(err, io.EOF) {
			return err
		}
		if !opts.Follow {
			return nil
		}
		// Rotated: the runtime now writes to a fresh file under the old
		// name. The old one is read to its end once more, for what was
		// written to it before the runtime reopened, then left.
		if next != nil {
			f.Close()
			f, r, next = next, bufio.NewReader(next), nil
			continue
		}
		if n, ok := reopened(f, path); ok {
			next = n
			continue
		}
		if !running() {
			return nil
		}
		if fl, ok := w.(interface{ Flush() }); ok {
			fl.Flush()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.clock.After(logFollowPoll):
		}
	}
}

// reopened opens path when it names another file than f, as it does
// once the log has been rotated.
func reopened(f *os.File, path string) (*os.File, bool) {
	cur, err := f.Stat()
	if err != nil {
		return nil, false
	}
	now, err := os.Stat(path)
	if err != nil || os.SameFile(cur, now) {
		return nil, false
	}
	next, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	return next, true
}

// errLimit ends a log read at limitBytes.
var errLimit = errors.New("log limit reached")

type limitWriter struct {
	w    io.Writer
	left int64 // 0: no limit
	used int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.left > 0 {
		if l.used >= l.left {
			return 0, errLimit
		}
		if rest := l.left - l.used; int64(len(p)) > rest {
			p = p[:rest]
		}
	}
	n, err := l.w.Write(p)
	l.used += int64(n)
	return n, err
}

// writeLogLine writes one CRI log line ("<time> <stream> <P|F> <text>").
func writeLogLine(w *limitWriter, line []byte, opts LogOptions) error {
	fields := bytes.SplitN(line, []byte(" "), 4)
	if len(fields) < 3 {
		return nil
	}
	if opts.SinceTime != nil {
		if t, err := time.Parse(time.RFC3339Nano, string(fields[0])); err == nil && t.Before(*opts.SinceTime) {
			return nil
		}
	}
	var out []byte
	if opts.Timestamps {
		out = append(append(out, fields[0]...), ' ')
	}
	if len(fields) == 4 {
		out = append(out, fields[3]...)
	}
	if string(fields[2]) == "F" {
		out = append(out, '\n')
	}
	_, err := w.Write(out)
	if errors.Is(err, errLimit) {
		return nil
	}
	return err
}

// seekTail positions f at the start of its last n lines.
func seekTail(f *os.File, n int64) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	const chunk = 32 * 1024
	size := fi.Size()
	if n == 0 {
		_, err := f.Seek(size, io.SeekStart)
		return err
	}
	pos := size
	var newlines int64
	buf := make([]byte, chunk)
	for pos > 0 {
		step := min(int64(chunk), pos)
		pos -= step
		if _, err := f.ReadAt(buf[:step], pos); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		for i := step - 1; i >= 0; i-- {
			if buf[i] != '\n' || pos+i == size-1 {
				continue
			}
			newlines++
			if newlines == n {
				_, err := f.Seek(pos+i+1, io.SeekStart)
				return err
			}
		}
	}
	_, err = f.Seek(0, io.SeekStart)
	return err
}

// GetExec asks the runtime's streaming server for an exec session.
func (s *Streamer) GetExec(ctx context.Context, namespace, pod, uid, name string, cmd []string, stdin, stdout, stderr, tty bool) (*url.URL, error) {
	c, err := s.findRunning(ctx, namespace, pod, uid, name)
	if err != nil {
		return nil, err
	}
	resp, err := s.runtime.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: c.Id, Cmd: cmd, Stdin: stdin, Stdout: stdout, Stderr: stderr && !tty, Tty: tty})
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	return url.Parse(resp.Url)
}

// GetAttach asks the runtime's streaming server for an attach session.
func (s *Streamer) GetAttach(ctx context.Context, namespace, pod, uid, name string, stdin, stdout, stderr, tty bool) (*url.URL, error) {
	c, err := s.findRunning(ctx, namespace, pod, uid, name)
	if err != nil {
		return nil, err
	}
	resp, err := s.runtime.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: c.Id, Stdin: stdin, Stdout: stdout, Stderr: stderr && !tty, Tty: tty})
	if err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	return url.Parse(resp.Url)
}

// GetPortForward asks the runtime's streaming server for a port-forward
// session into the pod's sandbox.
func (s *Streamer) GetPortForward(ctx context.Context, namespace, pod, uid string, ports []int32) (*url.URL, error) {
	labels := map[string]string{kubelettypes.KubernetesPodNameLabel: pod, kubelettypes.KubernetesPodNamespaceLabel: namespace}
	if uid != "" {
		labels[kubelettypes.KubernetesPodUIDLabel] = uid
	}
	cctx, cancel := s.call(ctx)
	resp, err := s.runtime.ListPodSandbox(cctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: labels, State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
	}})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	if len(resp.Items) == 0 {
		return nil, fmt.Errorf("%w: no running sandbox for pod %s/%s", ErrNotFound, namespace, pod)
	}
	pf, err := s.runtime.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: resp.Items[0].Id, Port: ports})
	if err != nil {
		return nil, fmt.Errorf("port-forward: %w", err)
	}
	return url.Parse(pf.Url)
}

// RunInContainer runs a command in a container and returns its output.
func (s *Streamer) RunInContainer(ctx context.Context, namespace, pod, uid, name string, cmd []string) ([]byte, error) {
	c, err := s.findRunning(ctx, namespace, pod, uid, name)
	if err != nil {
		return nil, err
	}
	resp, err := s.runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: c.Id, Cmd: cmd, Timeout: int64(s.requestTimeout / time.Second)})
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	return append(resp.Stdout, resp.Stderr...), nil
}

func (s *Streamer) findRunning(ctx context.Context, namespace, pod, uid, name string) (*runtimeapi.Container, error) {
	c, err := s.findContainer(ctx, namespace, pod, uid, name, false)
	if err != nil {
		return nil, err
	}
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil, fmt.Errorf("container %q in pod %s/%s is not running", name, namespace, pod)
	}
	return c, nil
}
