package app

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"

	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/pkg/container"
	"github.com/nodelet/nodelet/pkg/health"
	"github.com/nodelet/nodelet/pkg/kuberuntime"
	"github.com/nodelet/nodelet/pkg/server"
)

// buildServers opens the read-only and kubelet API ports (unless
// enableServer is false) and the plain /healthz, so a port in use fails
// start-up before anything runs.
func buildServers(b *base, rt *runtimeConn, node *nodeParts, runtime *runtimeParts, core *coreParts, health *health.Node) ([]component, error) {
	c := b.c
	var out []component
	if p := *c.HealthzPort; p > 0 {
		l, err := server.Listen(net.JoinHostPort(c.HealthzBindAddress, strconv.Itoa(int(p))), server.Healthz(health.Healthz), nil)
		if err != nil {
			return nil, fmt.Errorf("healthz server: %w", err)
		}
		klog.InfoS("Serving /healthz", "address", l.Addr().String())
		out = append(out, component{"healthz server", l.Run})
	}
	if !*c.EnableServer {
		klog.InfoS("Not serving the kubelet API or the read-only port: enableServer is false")
		return out, nil
	}
	if c.ReadOnlyPort > 0 {
		l, err := server.Listen(net.JoinHostPort(c.Address, strconv.Itoa(int(c.ReadOnlyPort))), server.NewReadOnly(core.kubelet, health.Healthz), nil)
		if err != nil {
			return nil, fmt.Errorf("read-only server: %w", err)
		}
		klog.InfoS("Serving the read-only API", "address", l.Addr().String())
		out = append(out, component{"read-only server", l.Run})
	}
	if c.Port > 0 {
		runningPods := func(ctx context.Context) ([]*container.Pod, error) { return runtime.manager.GetPods(ctx) }
		l, err := kubeletAPI(b, server.NewKubelet(server.KubeletSources{
			Pods: core.kubelet, Healthz: health.Healthz, Runtime: kuberuntime.NewStreamer(rt.runtime, b.clock, c.RuntimeRequestTimeout.Duration), Metrics: rt.metrics.Handler(runningPods),
			Stats: node.stats, Profiling: c.EnableProfilingHandler == nil || *c.EnableProfilingHandler, Timelines: b.timelines,
		}))
		if err != nil {
			return nil, fmt.Errorf("kubelet API: %w", err)
		}
		out = append(out, component{"kubelet API", l.Run})
	}
	return out, nil
}

// kubeletAPI opens the kubelet API over HTTPS on the node's port, behind
// the configured authentication and authorization.
func kubeletAPI(b *base, h http.Handler) (*server.Listener, error) {
	c := b.c
	tlsConfig, err := server.ServingTLS(c.TLSCertFile, c.TLSPrivateKeyFile, filepath.Join(b.o.RootDir, "pki"), b.nodeName, b.hostIPs, c.Authentication.X509.ClientCAFile)
	if err != nil {
		return nil, err
	}
	// Validated at start.
	if c.TLSMinVersion != "" {
		tlsConfig.MinVersion, _ = cliflag.TLSVersion(c.TLSMinVersion)
	}
	tlsConfig.CipherSuites, _ = cliflag.TLSCipherSuites(c.TLSCipherSuites)
	h = server.WithAuth(h, server.AuthOptions{
		NodeName: b.nodeName, Anonymous: *c.Authentication.Anonymous.Enabled, Client: b.client,
		TokenWebhook: *c.Authentication.Webhook.Enabled, TokenCacheTTL: c.Authentication.Webhook.CacheTTL.Duration,
		AuthorizeWebhook: c.Authorization.Mode == kubeletv1beta1.KubeletAuthorizationModeWebhook,
		AuthorizedTTL:    c.Authorization.Webhook.CacheAuthorizedTTL.Duration,
		UnauthorizedTTL:  c.Authorization.Webhook.CacheUnauthorizedTTL.Duration,
	})
	l, err := server.Listen(net.JoinHostPort(c.Address, strconv.Itoa(int(c.Port))), h, tlsConfig)
	if err != nil {
		return nil, err
	}
	klog.InfoS("Serving the kubelet API", "address", l.Addr().String(), "authorization", c.Authorization.Mode)
	return l, nil
}
