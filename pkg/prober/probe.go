package prober

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Executor runs a command in a container (CRI ExecSync).
type Executor interface {
	ExecSync(ctx context.Context, in *runtimeapi.ExecSyncRequest, opts ...grpc.CallOption) (*runtimeapi.ExecSyncResponse, error)
}

// outcome is one probe run: whether it passed, and what to say if not.
type outcome struct {
	ok     bool
	output string
}

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
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case p.Exec != nil:
		return execProbe(ctx, exec, containerID, p.Exec.Command, timeout)
	case p.HTTPGet != nil:
		return httpProbe(ctx, p.HTTPGet, c, podIP)
	case p.TCPSocket != nil:
		return tcpProbe(ctx, p.TCPSocket, c, podIP)
	case p.GRPC != nil:
		return grpcProbe(ctx, p.GRPC, podIP)
	}
	return outcome{output: "probe has no action"}
}

func execProbe(ctx context.Context, exec Executor, id string, cmd []string, timeout time.Duration) outcome {
	resp, err := exec.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: int64(timeout.Seconds())})
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return outcome{output: fmt.Sprintf("command %q timed out", strings.Join(cmd, " "))}
		}
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

// resolvePort turns a port given by number or name into a number.
func resolvePort(p intstr.IntOrString, c *v1.Container) (int, error) {
	if p.Type == intstr.Int {
		if p.IntVal <= 0 || p.IntVal > 65535 {
			return 0, fmt.Errorf("invalid port %d", p.IntVal)
		}
		return int(p.IntVal), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil && n > 0 && n <= 65535 {
		return n, nil
	}
	return 0, fmt.Errorf("container %q has no port named %q", c.Name, p.StrVal)
}

func httpProbe(ctx context.Context, g *v1.HTTPGetAction, c *v1.Container, podIP string) outcome {
	host := g.Host
	if host == "" {
		host = podIP
	}
	port, err := resolvePort(g.Port, c)
	if err != nil {
		return outcome{output: err.Error()}
	}
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	u := &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port))}
	path := g.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	u.Path, u.RawQuery, _ = strings.Cut(path, "?")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return outcome{output: err.Error()}
	}
	for _, h := range g.HTTPHeaders {
		if strings.EqualFold(h.Name, "Host") {
			req.Host = h.Value
			continue
		}
		req.Header.Add(h.Name, h.Value)
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", userAgent)
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "*/*")
	}
	client := &http.Client{
		// Probes check the container, not its certificate.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true},
		// Redirects are followed only within the same host; a redirect
		// elsewhere means the container answered, which is a success.
		CheckRedirect: func(r *http.Request, via []*http.Request) error {
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			if r.URL.Hostname() != via[0].URL.Hostname() {
				return http.ErrUseLastResponse
			}
			return nil
		},
	}
	resp, err := client.Do(req)
	if err != nil {
		return outcome{output: err.Error()}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxOutput))
	if resp.StatusCode >= 200 && resp.StatusCode < 400 {
		return outcome{ok: true}
	}
	return outcome{output: fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode) + bodySuffix(body)}
}

func bodySuffix(b []byte) string {
	if s := strings.TrimSpace(string(b)); s != "" {
		return ": " + s
	}
	return ""
}

func tcpProbe(ctx context.Context, t *v1.TCPSocketAction, c *v1.Container, podIP string) outcome {
	host := t.Host
	if host == "" {
		host = podIP
	}
	port, err := resolvePort(t.Port, c)
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
