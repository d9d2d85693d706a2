package kuberuntime

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/infra/httpget"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/crierr"
)

// hookUserAgent is what HTTP hooks identify as, as upstream's
// kube-lifecycle.
const hookUserAgent = "kube-lifecycle/nodelet"

// hookRunner runs postStart and preStop handlers.
type hookRunner struct {
	runtime  ContainerService
	clock    clock.Clock
	recorder record.EventRecorder
}

// runHook runs a postStart or preStop handler and returns a message for the
// event when it fails. budget bounds exec hooks that have no deadline of
// their own (0: until ctx ends).
func (r *hookRunner) runHook(ctx context.Context, pod *v1.Pod, c *v1.Container, id container.ContainerID, h *v1.LifecycleHandler, podIPs []string, budget time.Duration) (string, error) {
	switch {
	case h.Exec != nil:
		timeout := int64(0)
		if budget > 0 {
			timeout = int64(budget.Seconds())
		}
		resp, err := r.runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id.ID, Cmd: h.Exec.Command, Timeout: timeout})
		if err != nil {
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v", h.Exec.Command, c.Name, pod.Name, crierr.Message(err)), err
		}
		if resp.ExitCode != 0 {
			out := strings.TrimSpace(string(resp.Stdout) + string(resp.Stderr))
			err := fmt.Errorf("command %v exited with %d", h.Exec.Command, resp.ExitCode)
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v, message: %q", h.Exec.Command, c.Name, pod.Name, err, out), err
		}
		return "", nil
	case h.HTTPGet != nil:
		if err := r.runHTTPHook(ctx, pod, c, h.HTTPGet, podIPs); err != nil {
			return fmt.Sprintf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: %v", h.HTTPGet.Path, c.Name, pod.Name, err), err
		}
		return "", nil
	case h.Sleep != nil:
		d := time.Duration(h.Sleep.Seconds) * time.Second
		select {
		case <-r.clock.After(d):
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

// runHTTPHook sends a hook's GET. An HTTPS hook answered in plain HTTP is
// sent again over HTTP, as upstream does (with a warning event), so hooks
// written before HTTPS was honoured keep working.
func (r *hookRunner) runHTTPHook(ctx context.Context, pod *v1.Pod, c *v1.Container, g *v1.HTTPGetAction, podIPs []string) error {
	podIP := pod.Status.PodIP
	if len(podIPs) > 0 {
		podIP = podIPs[0]
	}
	if g.Host == "" && podIP == "" {
		return fmt.Errorf("pod has no IP to send the hook to")
	}
	req, err := httpget.NewRequest(ctx, g, c, podIP, hookUserAgent)
	if err != nil {
		return err
	}
	client := httpget.NewClient()
	resp, err := client.Do(req)
	if err != nil && strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		req = req.Clone(ctx)
		req.URL.Scheme = "http"
		req.Header.Del("Authorization")
		if resp, err = client.Do(req); err == nil {
			r.recorder.Eventf(pod, v1.EventTypeWarning, "LifecycleHTTPFallback", "request to HTTPS lifecycle hook %s got HTTP response, retry with HTTP succeeded", req.URL.Host)
		}
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 10*1024)); err != nil {
		return fmt.Errorf("reading the answer of %s: %w", req.URL, err)
	}
	if !httpget.Success(resp.StatusCode) {
		return fmt.Errorf("HTTP %d from %s", resp.StatusCode, req.URL)
	}
	return nil
}
