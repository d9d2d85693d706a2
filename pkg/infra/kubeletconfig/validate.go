package kubeletconfig

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	fieldpath "k8s.io/apimachinery/pkg/util/validation/field"
	logsapi "k8s.io/component-base/logs/api/v1"
	tracingapi "k8s.io/component-base/tracing/api/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// Validate checks a defaulted configuration; the error names every field
// that is wrong, on one line.
func Validate(c *kubeletv1beta1.KubeletConfiguration) error {
	var errs []error
	if c.SyncFrequency.Duration < 0 {
		errs = append(errs, fmt.Errorf("syncFrequency (%v) must not be negative", c.SyncFrequency.Duration))
	}
	if c.HTTPCheckFrequency.Duration < 0 {
		errs = append(errs, fmt.Errorf("httpCheckFrequency (%v) must not be negative", c.HTTPCheckFrequency.Duration))
	}
	for _, ip := range c.ClusterDNS {
		if net.ParseIP(ip) == nil {
			errs = append(errs, fmt.Errorf("clusterDNS: %q is not an IP address", ip))
		}
	}
	if c.ClusterDomain != "" {
		if msgs := validation.IsDNS1123Subdomain(strings.TrimSuffix(c.ClusterDomain, ".")); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("clusterDomain %q: %s", c.ClusterDomain, strings.Join(msgs, "; ")))
		}
	}
	if c.StaticPodURL != "" {
		if u, err := url.Parse(c.StaticPodURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("staticPodURL %q is not an http(s) URL", c.StaticPodURL))
		}
	}
	if c.FileCheckFrequency.Duration < 0 {
		errs = append(errs, fmt.Errorf("fileCheckFrequency (%v) must not be negative", c.FileCheckFrequency.Duration))
	}
	if c.MaxPods < 0 {
		errs = append(errs, fmt.Errorf("maxPods (%d) must not be negative", c.MaxPods))
	}
	for name, p := range map[string]int32{"port": c.Port, "readOnlyPort": c.ReadOnlyPort} {
		if p < 0 || p > 65535 {
			errs = append(errs, fmt.Errorf("%s (%d) must be between 0 and 65535", name, p))
		}
	}
	high, low := *c.ImageGCHighThresholdPercent, *c.ImageGCLowThresholdPercent
	if high < 0 || high > 100 || low < 0 || low > 100 || low > high {
		errs = append(errs, fmt.Errorf("imageGCHighThresholdPercent (%d) and imageGCLowThresholdPercent (%d) must be percentages with low <= high", high, low))
	}
	if *c.KubeAPIQPS < 0 || c.KubeAPIBurst < 0 || *c.EventRecordQPS < 0 || c.EventBurst < 0 {
		errs = append(errs, errors.New("kubeAPIQPS, kubeAPIBurst, eventRecordQPS and eventBurst must not be negative"))
	}
	if c.NodeLeaseDurationSeconds < 0 {
		errs = append(errs, fmt.Errorf("nodeLeaseDurationSeconds (%d) must not be negative", c.NodeLeaseDurationSeconds))
	}
	if p := c.MaxParallelImagePulls; p != nil && *p < 1 {
		errs = append(errs, fmt.Errorf("maxParallelImagePulls (%d) must be at least 1", *p))
	}
	if q, err := resource.ParseQuantity(c.ContainerLogMaxSize); err != nil || q.Sign() <= 0 {
		errs = append(errs, fmt.Errorf("containerLogMaxSize %q must be a positive quantity such as 10Mi", c.ContainerLogMaxSize))
	}
	if *c.ContainerLogMaxFiles < 2 {
		errs = append(errs, fmt.Errorf("containerLogMaxFiles (%d) must be at least 2", *c.ContainerLogMaxFiles))
	}
	if *c.ContainerLogMaxWorkers < 1 {
		errs = append(errs, fmt.Errorf("containerLogMaxWorkers (%d) must be at least 1", *c.ContainerLogMaxWorkers))
	}
	// Upstream's message; KubeletCrashLoopBackOffMax is beta, on by default.
	if d := c.CrashLoopBackOff.MaxContainerRestartPeriod.Duration; d < time.Second || d > 300*time.Second {
		errs = append(errs, fmt.Errorf("invalid configuration: CrashLoopBackOff.MaxContainerRestartPeriod (got: %v seconds) must be set between 1s and 300s", d.Seconds()))
	}
	if c.ContainerLogMonitorInterval.Duration <= 0 {
		errs = append(errs, fmt.Errorf("containerLogMonitorInterval (%v) must be positive", c.ContainerLogMonitorInterval.Duration))
	}
	switch c.Authorization.Mode {
	case kubeletv1beta1.KubeletAuthorizationModeWebhook, kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow:
	default:
		errs = append(errs, fmt.Errorf("authorization.mode %q is not one of Webhook, AlwaysAllow", c.Authorization.Mode))
	}
	if (c.TLSCertFile == "") != (c.TLSPrivateKeyFile == "") {
		errs = append(errs, errors.New("tlsCertFile and tlsPrivateKeyFile go together"))
	}
	errs = append(errs, validateServing(c)...)
	errs = append(errs, validateFeatureGates(c.FeatureGates)...)
	errs = append(errs, validateEvictionSoft(c)...)
	errs = append(errs, validateShutdown(c)...)
	errs = append(errs, validateResourceManagers(c)...)
	if c.PodsPerCore < 0 {
		errs = append(errs, fmt.Errorf("podsPerCore (%d) must not be negative", c.PodsPerCore))
	}
	switch c.CgroupDriver {
	case "cgroupfs", "systemd":
	default:
		errs = append(errs, fmt.Errorf("cgroupDriver %q is not one of cgroupfs, systemd", c.CgroupDriver))
	}
	for _, e := range logsapi.Validate(&c.Logging, nil, fieldpath.NewPath("logging")) {
		errs = append(errs, e)
	}
	for _, e := range tracingapi.ValidateTracingConfiguration(c.Tracing, nil, fieldpath.NewPath("tracing")) {
		errs = append(errs, e)
	}
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return fmt.Errorf("invalid configuration: %s", strings.Join(msgs, "; "))
}
