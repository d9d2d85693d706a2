package app

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/pkg/cluster/certificates"
	"github.com/nodelet/nodelet/pkg/kubeletapi/podresources"
	"github.com/nodelet/nodelet/pkg/kubeletapi/server"
	"github.com/nodelet/nodelet/pkg/node/health"
	"github.com/nodelet/nodelet/pkg/node/stats"
	"github.com/nodelet/nodelet/pkg/observe/metrics"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/streaming"
)

// buildServers opens the read-only and kubelet API ports (unless
// enableServer is false) and the plain /healthz, so a port in use fails
// start-up before anything runs.
func buildServers(b *base, rt *runtimeConn, node *nodeParts, runtime *runtimeParts, core *coreParts, health *health.Node, reporter *reporterParts, res *resourceParts) ([]component, error) {
	c := b.cfg
	// The pod-resources API is a local socket, served whatever
	// enableServer says, as upstream's.
	podResources := podresources.New(podresources.Options{RootDir: b.opts.RootDir, Pods: core.kubelet.View(),
		Devices: res.devices, CPUs: res.cpus, Memory: res.memory, Claims: res.claims, Clock: b.clock})
	out := []component{{"pod-resources API", podResources.Run}}
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
	runningPods := func(ctx context.Context) ([]*container.Pod, error) { return runtime.manager.GetPods(ctx) }
	monitoring := server.Monitoring{Stats: node.stats, Metrics: rt.metrics.Handler(runningPods),
		MetricsResource: metrics.ResourceHandler(node.stats.Summary), MetricsProbes: rt.metrics.Probes().Handler(),
		MetricsCadvisor: metrics.CadvisorHandler(node.stats.Summary, metrics.RuntimeIdentities(runningPods), stats.NewDetails(rt.runtime), node.machine()),
	}
	if c.ReadOnlyPort > 0 {
		l, err := server.Listen(net.JoinHostPort(c.Address, strconv.Itoa(int(c.ReadOnlyPort))), server.NewReadOnly(core.kubelet.View(), health.Healthz, monitoring), nil)
		if err != nil {
			return nil, fmt.Errorf("read-only server: %w", err)
		}
		klog.InfoS("Serving the read-only API", "address", l.Addr().String())
		out = append(out, component{"read-only server", l.Run})
	}
	if c.Port > 0 {
		components, err := kubeletAPI(b, server.NewAPI(server.APISources{
			Pods: core.kubelet.View(), Healthz: health.Healthz, Runtime: streaming.NewStreamer(rt.runtime, b.clock, c.RuntimeRequestTimeout.Duration),
			Monitoring: monitoring, Profiling: c.EnableProfilingHandler == nil || *c.EnableProfilingHandler, Timelines: b.timelines, Configz: c,
		}), reporter)
		if err != nil {
			return nil, fmt.Errorf("kubelet API: %w", err)
		}
		out = append(out, components...)
	}
	return out, nil
}

// kubeletAPI opens the kubelet API over HTTPS on the node's port, behind
// the configured authentication and authorization, with its certificate
// from the CSR API (serverTLSBootstrap) or from files reloaded as they
// change (tlsCertFile, or a self-signed kubelet.crt).
func kubeletAPI(b *base, h http.Handler, reporter *reporterParts) ([]component, error) {
	c := b.cfg
	tlsSources, components, err := servingTLS(b, reporter)
	if err != nil {
		return nil, err
	}
	// Validated at start.
	if c.TLSMinVersion != "" {
		tlsSources.MinVersion, _ = cliflag.TLSVersion(c.TLSMinVersion)
	}
	tlsSources.CipherSuites, _ = cliflag.TLSCipherSuites(c.TLSCipherSuites)
	h = server.WithAuth(h, server.AuthOptions{
		NodeName: b.nodeName, Anonymous: *c.Authentication.Anonymous.Enabled, Client: b.client,
		TokenWebhook: *c.Authentication.Webhook.Enabled, TokenCacheTTL: c.Authentication.Webhook.CacheTTL.Duration,
		AuthorizeWebhook: c.Authorization.Mode == kubeletv1beta1.KubeletAuthorizationModeWebhook,
		AuthorizedTTL:    c.Authorization.Webhook.CacheAuthorizedTTL.Duration,
		UnauthorizedTTL:  c.Authorization.Webhook.CacheUnauthorizedTTL.Duration,
	})
	l, err := server.Listen(net.JoinHostPort(c.Address, strconv.Itoa(int(c.Port))), h, server.TLSConfig(tlsSources))
	if err != nil {
		return nil, err
	}
	klog.InfoS("Serving the kubelet API", "address", l.Addr().String(), "authorization", c.Authorization.Mode, "serverTLSBootstrap", c.ServerTLSBootstrap)
	return append(components, component{"kubelet API", l.Run}), nil
}

// servingTLS works out where the kubelet API's certificate and client CAs
// come from, and the components that keep them current.
func servingTLS(b *base, reporter *reporterParts) (server.TLSOptions, []component, error) {
	c := b.cfg
	files := certificates.FileOptions{ClientCAFile: c.Authentication.X509.ClientCAFile, Clock: b.clock, Failed: func(err error) {
		klog.ErrorS(err, "A changed certificate file does not load; the previous one stays in force")
		b.recorder.Eventf(nodeRef(b.nodeName), v1.EventTypeWarning, "CertificateFileInvalid", "A changed certificate file does not load; the previous one stays in force: %v", err)
	}}
	var out server.TLSOptions
	var components []component
	if c.ServerTLSBootstrap {
		serving, err := certificates.NewServing(certificates.ServingOptions{
			CSRs: b.client.CertificatesV1().CertificateSigningRequests(), NodeName: b.nodeName, CertDir: b.opts.CertDir, CertFile: c.TLSCertFile, KeyFile: c.TLSPrivateKeyFile, Clock: b.clock,
			Addresses: func() []v1.NodeAddress { return reporter.node().Status.Addresses },
		})
		if err != nil {
			return out, nil, err
		}
		b.metrics.Register(serving.Collectors()...)
		out.Certificate = serving.Current
		components = append(components, component{"serving certificate", serving.Run})
	} else {
		files.CertFile, files.KeyFile = c.TLSCertFile, c.TLSPrivateKeyFile
		if files.CertFile == "" {
			var err error
			if files.CertFile, files.KeyFile, err = certificates.SelfSigned(b.opts.CertDir, b.nodeName, b.hostIPs); err != nil {
				return out, nil, err
			}
		}
	}
	f, err := certificates.NewFiles(files)
	if err != nil {
		return out, nil, err
	}
	if out.Certificate == nil {
		out.Certificate = f.Certificate
	}
	out.ClientCAs = f.ClientCAs
	return out, append(components, component{"certificate files", f.Run}), nil
}

// nodeRef is the node as events name it.
func nodeRef(name string) *v1.ObjectReference {
	return &v1.ObjectReference{Kind: "Node", Name: name, UID: types.UID(name), APIVersion: "v1"}
}
