package kuberuntime

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/container"
)

// runHook runs a postStart or preStop handler and returns a message for the
// event when it fails. budget bounds exec hooks that have no deadline of
// their own (0: until ctx ends).
func (m *Manager) runHook(ctx context.Context, pod *v1.Pod, c *v1.Container, id container.ContainerID, h *v1.LifecycleHandler, podIPs []string, budget time.Duration) (string, error) {
	switch {
	case h.Exec != nil:
		timeout := int64(0)
		if budget > 0 {
			timeout = int64(budget.Seconds())
		}
		resp, err := m.runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id.ID, Cmd: h.Exec.Command, Timeout: timeout})
		if err != nil {
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v", h.Exec.Command, c.Name, pod.Name, errMessage(err)), err
		}
		if resp.ExitCode != 0 {
			out := strings.TrimSpace(string(resp.Stdout) + string(resp.Stderr))
			err := fmt.Errorf("command %v exited with %d", h.Exec.Command, resp.ExitCode)
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v, message: %q", h.Exec.Command, c.Name, pod.Name, err, out), err
		}
		return "", nil
	case h.HTTPGet != nil:
		if err := m.runHTTPHook(ctx, pod, c, h.HTTPGet, podIPs); err != nil {
			return fmt.Sprintf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: %v", h.HTTPGet.Path, c.Name, pod.Name, err), err
		}
		return "", nil
	case h.Sleep != nil:
		d := time.Duration(h.Sleep.Seconds) * time.Second
		select {
		case <-m.clock.After(d):
			return "", nil
		case <-ctx.Done():
			// Cut short by the grace period: the container is stopped next.
			return "", nil
		}
	case h.TCPSocket != nil:
		// Deprecated and never run upstream either; accepted for compatibility.
		return "", nil
	default:
		err := fmt.Errorf("lifecycle handler of container %q has no action", c.Name)
		return err.Error(), err
	}
}

func (m *Manager) runHTTPHook(ctx context.Context, pod *v1.Pod, c *v1.Container, g *v1.HTTPGetAction, podIPs []string) error {
	host := g.Host
	if host == "" {
		if len(podIPs) > 0 {
			host = podIPs[0]
		} else if pod.Status.PodIP != "" {
			host = pod.Status.PodIP
		} else {
			return fmt.Errorf("pod has no IP to send the hook to")
		}
	}
	port, err := resolvePort(g.Port, c)
	if err != nil {
		return err
	}
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	u := &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port)), Path: g.Path}
	if i := strings.Index(g.Path, "?"); i >= 0 {
		u.Path, u.RawQuery = g.Path[:i], g.Path[i+1:]
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	for _, h := range g.HTTPHeaders {
		req.Header.Add(h.Name, h.Value)
	}
	req.Header.Set("User-Agent", "kube-lifecycle/nodelet")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 10*1024))
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("HTTP %d from %s", resp.StatusCode, u)
	}
	return nil
}

// resolvePort turns a port given by number or by name into a number.
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
