package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/logs"
	"k8s.io/utils/clock"
)

// ErrNotFound classifies a request for a pod or container the runtime
// does not have (the server answers 404).
var ErrNotFound = errors.New("not found")

// logFollowPoll is how often a followed log is checked for new lines.
const logFollowPoll = 100 * time.Millisecond

// Streamer serves what the kubelet API asks of containers: logs, exec,
// attach and port-forward (the runtime's streaming URLs), and commands run
// for their output.
type Streamer struct {
	runtime        RuntimeService
	clock          clock.Clock
	requestTimeout time.Duration
}

// NewStreamer returns the streamer over a runtime; each unary call is
// bounded by requestTimeout.
func NewStreamer(runtime RuntimeService, clk clock.Clock, requestTimeout time.Duration) *Streamer {
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
	labels := map[string]string{labelPodName: pod, labelPodNamespace: namespace, LabelContainerName: name}
	if uid != "" {
		labels[LabelPodUID] = uid
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
// limit, and followed (across rotations) while the container runs. The
// reading is the CRI log reader upstream's kubelet uses
// (k8s.io/cri-client/pkg/logs).
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
	lo := &logs.LogOptions{Follow: opts.Follow, Timestamp: opts.Timestamps}
	if opts.TailLines >= 0 {
		lo.TailLines = &opts.TailLines
	}
	if opts.LimitBytes > 0 {
		lo.LimitBytes = &opts.LimitBytes
	}
	if opts.SinceTime != nil {
		lo.Since = *opts.SinceTime
	}
	if err := logs.ReadLogs(ctx, st.GetStatus().GetLogPath(), c.Id, lo, statusReader{s: s}, w, w); err != nil {
		return fmt.Errorf("reading the log of container %q: %w", name, err)
	}
	return nil
}

// statusReader is what the CRI log reader asks of the runtime: whether a
// followed container still runs (ContainerStatus, the only call
// logs.ReadLogs makes). It takes the reader's interface by embedding it,
// nil: any other call would be a change in the reader, and panics.
type statusReader struct {
	internalapi.RuntimeService
	s *Streamer
}

func (r statusReader) ContainerStatus(ctx context.Context, id string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	cctx, cancel := r.s.call(ctx)
	defer cancel()
	return r.s.runtime.ContainerStatus(cctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: verbose})
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
	labels := map[string]string{labelPodName: pod, labelPodNamespace: namespace}
	if uid != "" {
		labels[LabelPodUID] = uid
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
