package prober

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/infra/httpget"
)

// Executor runs a command in a container (CRI ExecSync).
type Executor interface {
	ExecSync(ctx context.Context, in *runtimeapi.ExecSyncRequest, opts ...grpc.CallOption) (*runtimeapi.ExecSyncResponse, error)
}

// outcome is one probe run: whether it passed, and what to say if not.
// An errored run is one the runtime could not take (unavailable,
// overloaded): it says nothing about the container.
type outcome struct {
	ok      bool
	errored bool
	// warning is said of a run that passed (an HTTP redirect to another
	// host, not followed).
	warning string
	output  string
}

// execAttempts is how often an exec probe is tried when the runtime
// cannot take it, as upstream's maxProbeRetries.
const execAttempts = 3

// userAgent is what HTTP probes identify as, as upstream's kube-probe.
const userAgent = "kube-probe/nodelet"

// maxOutput bounds what a probe's output may add to an event.
const maxOutput = 10 * 1024

// runProbe runs one probe against a container.
func runProbe(ctx context.Context, exec Executor, p *v1.Probe, c *v1.Container, containerID, podIP string) outcome {
	timeout := time.Duration(p.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = time.Second
	}
	if p.Exec != nil {
		var o outcome
		for range execAttempts {
			if o = execProbe(ctx, exec, containerID, p.Exec.Command, timeout); !o.errored || ctx.Err() != nil {
				break
			}
		}
		return o
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case p.HTTPGet != nil:
		return httpProbe(ctx, p.HTTPGet, c, podIP)
	case p.TCPSocket != nil:
		return tcpProbe(ctx, p.TCPSocket, c, podIP)
	case p.GRPC != nil:
		return grpcProbe(ctx, p.GRPC, podIP)
	}
	return outcome{output: "probe has no action"}
}

// execGrace is what an exec probe's CRI call gets beyond the probe's
// timeout. The runtime times the command itself, from its start; the exec's
// set-up before it (runc exec, a shim round trip) takes seconds on a loaded
// node and is not the command's time. Upstream gives the call the runtime
// request timeout on top (2 min); this also bounds a runtime that never
// answers, so one hung exec does not hold the probe that long.
const execGrace = 10 * time.Second

func execProbe(ctx context.Context, exec Executor, id string, cmd []string, timeout time.Duration) outcome {
	ctx, cancel := context.WithTimeout(ctx, timeout+execGrace)
	defer cancel()
	resp, err := exec.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: int64(timeout.Seconds())})
	if err != nil {
		// The runtime says DeadlineExceeded when the command outlived its
		// timeout (containerd, CRI-O), as upstream reads it.
		if status.Code(err) == codes.DeadlineExceeded || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return outcome{output: fmt.Sprintf("command %q timed out", strings.Join(cmd, " "))}
		}
		switch status.Code(err) {
		case codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.Canceled:
			// The runtime could not take the call: nothing is known of
			// the container.
			return outcome{errored: true, output: err.Error()}
		}
		// The runtime's answer about the command (it does not exist in
		// the image, the container is gone): a failure. Upstream throws
		// every error away, so a probe naming a missing command never
		// fails (kubernetes#106682, an accepted bug).
		return outcome{output: err.Error()}
	}
	out := strings.TrimSpace(string(resp.Stdout) + string(resp.Stderr))
	if len(out) > maxOutput {
		out = out[:maxOutput]
	}
	if resp.ExitCode != 0 {
		if out == "" {
			out = fmt.Sprintf("command %q exited with %d", strings.Join(cmd, " "), resp.ExitCode)
		}
		return outcome{output: out}
	}
	return outcome{ok: true, output: out}
}

func httpProbe(ctx context.Context, g *v1.HTTPGetAction, c *v1.Container, podIP string) outcome {
	req, err := httpget.NewRequest(ctx, g, c, podIP, userAgent)
	if err != nil {
		return outcome{output: err.Error()}
	}
	resp, err := httpget.NewClient().Do(req)
	if err != nil {
		return outcome{output: err.Error()}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxOutput))
	if err != nil {
		return outcome{output: fmt.Sprintf("HTTP probe failed with statuscode: %d (reading the body: %v)", resp.StatusCode, err)}
	}
	switch code := resp.StatusCode; {
	case code >= http.StatusMultipleChoices && code < http.StatusBadRequest:
		// A redirect to another host, not followed: the container
		// answered, so it passed, with upstream's warning.
		return outcome{ok: true, warning: fmt.Sprintf("Probe terminated redirects, Response body: %s", body)}
	case httpget.Success(code):
		return outcome{ok: true}
	}
	// As upstream's, the failure never carries the response body: what a
	// container answers must not reach the pod's events (kubernetes#99425).
	return outcome{output: fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode)}
}

func tcpProbe(ctx context.Context, t *v1.TCPSocketAction, c *v1.Container, podIP string) outcome {
	host := t.Host
	if host == "" {
		host = podIP
	}
	port, err := httpget.ResolvePort(t.Port, c)
	if err != nil {
		return outcome{output: err.Error()}
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return outcome{output: err.Error()}
	}
	conn.Close()
	return outcome{ok: true}
}

func grpcProbe(ctx context.Context, g *v1.GRPCAction, podIP string) outcome {
	conn, err := grpc.NewClient(net.JoinHostPort(podIP, strconv.Itoa(int(g.Port))),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUserAgent(userAgent))
	if err != nil {
		return outcome{output: err.Error()}
	}
	defer conn.Close()
	service := ""
	if g.Service != nil {
		service = *g.Service
	}
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return outcome{output: fmt.Sprintf("failed to connect service %q within %v: %v", net.JoinHostPort(podIP, strconv.Itoa(int(g.Port))), time.Until(deadline(ctx)).Round(time.Second), err)}
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return outcome{output: fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus())}
	}
	return outcome{ok: true}
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}
