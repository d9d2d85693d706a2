// Package app is nodelet's composition root: it reads the command line
// and the KubeletConfiguration file, builds every component and wires
// them into the pipeline.
package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// Options is nodelet's resolved configuration: the config file's values
// with command-line flags applied on top, and defaults for the rest.
type Options struct {
	ConfigFile       string
	Kubeconfig       string
	RootDir          string
	HostnameOverride string
	// DeadContainersKept is --maximum-dead-containers-per-container.
	DeadContainersKept int
	// NodeLabels are --node-labels.
	NodeLabels map[string]string
	// PodInfraContainerImage is the sandbox image, pinned against image
	// garbage collection (the runtime chooses which image it uses).
	PodInfraContainerImage string
	// ImageGCPeriod is how often image garbage collection runs.
	ImageGCPeriod time.Duration
	// PLEGRelistPeriod is how often every pod is relisted, the safety net
	// under the container event stream.
	PLEGRelistPeriod time.Duration
	Config           kubeletv1beta1.KubeletConfiguration
}

// Defaults nodelet applies to fields left unset. The v1beta1 package has
// no defaulting code of its own; these are upstream's defaults, except
// that the read-only port is on by default (standalone nodes have no
// other way to show their pods).
const (
	DefaultRootDir         = "/var/lib/kubelet"
	DefaultRuntimeEndpoint = "unix:///run/containerd/containerd.sock"
	DefaultPodLogsDir      = "/var/log/pods"
	DefaultReadOnlyPort    = 10255
	DefaultPort            = 10250
	DefaultMaxPods         = 110
	DefaultSandboxImage    = "registry.k8s.io/pause:3.10"
)

// flagValues holds the flags that override config file fields.
type flagValues struct {
	podManifestPath    string
	runtimeEndpoint    string
	readOnlyPort       int32
	port               int32
	maxPods            int32
	syncFrequency      time.Duration
	fileCheckFrequency time.Duration
	cgroupDriver       string
	address            string
	manifestURL        string
	manifestURLHeaders []string
	httpCheckFrequency time.Duration
	clusterDNS         []string
	clusterDomain      string
	resolvConf         string
	failCgroupV1       bool
}

// Answer is what Parse returns for --help and --version: not a failure,
// but text to print on standard output before exiting with status 0.
type Answer struct{ Text string }

func (a *Answer) Error() string { return a.Text }

// kubernetesVersion is the Kubernetes release nodelet implements.
const kubernetesVersion = "v1.37.2"

// Parse reads the command line (without the program name) and the config
// file it names. Errors are one line and name the problem.
func Parse(args []string) (*Options, error) {
	fs := pflag.NewFlagSet("nodelet", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = true
	o := &Options{}
	var f flagValues
	var version string
	fs.BoolP("help", "h", false, "show this help and exit")
	fs.StringVar(&version, "version", "", "print the version and exit (--version=raw for JSON)")
	fs.Lookup("version").NoOptDefVal = "true"
	fs.StringVar(&o.ConfigFile, "config", "", "path to a KubeletConfiguration (kubelet.config.k8s.io/v1beta1) file")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "path to a kubeconfig for the API server (cluster mode)")
	fs.StringVar(&o.RootDir, "root-dir", DefaultRootDir, "directory for nodelet's files (pod directories)")
	fs.StringVar(&o.HostnameOverride, "hostname-override", "", "node name to use instead of the hostname")
	fs.IntVar(&o.DeadContainersKept, "maximum-dead-containers-per-container", 1, "dead instances of each container a pod keeps (their last state and logs)")
	fs.StringToStringVar(&o.NodeLabels, "node-labels", nil, "labels for the node, key=value,... (checked by nodeSelector and node affinity)")
	fs.StringVar(&o.PodInfraContainerImage, "pod-infra-container-image", DefaultSandboxImage, "the runtime's sandbox image, never garbage collected")
	fs.DurationVar(&o.ImageGCPeriod, "image-gc-period", 5*time.Minute, "how often image garbage collection runs")
	fs.DurationVar(&o.PLEGRelistPeriod, "pleg-relist-period", time.Second, "how often every pod is relisted; container exits are seen sooner through the runtime's event stream")
	fs.StringVar(&f.podManifestPath, "pod-manifest-path", "", "directory or file with static pod manifests (staticPodPath)")
	fs.StringVar(&f.runtimeEndpoint, "container-runtime-endpoint", "", "CRI endpoint (containerRuntimeEndpoint)")
	fs.Int32Var(&f.readOnlyPort, "read-only-port", 0, "read-only port, 0 to disable (readOnlyPort)")
	fs.Int32Var(&f.port, "port", 0, "kubelet API port (port)")
	fs.Int32Var(&f.maxPods, "max-pods", 0, "maximum number of pods (maxPods)")
	fs.DurationVar(&f.syncFrequency, "sync-frequency", 0, "resync period of running pods (syncFrequency)")
	fs.DurationVar(&f.fileCheckFrequency, "file-check-frequency", 0, "re-read period of static pod manifests (fileCheckFrequency)")
	fs.StringVar(&f.cgroupDriver, "cgroup-driver", "", "cgroup driver: cgroupfs (cgroupDriver)")
	fs.StringVar(&f.address, "address", "", "IP address to serve on (address)")
	fs.StringVar(&f.manifestURL, "manifest-url", "", "URL serving static pods (staticPodURL)")
	fs.StringArrayVar(&f.manifestURLHeaders, "manifest-url-header", nil, "headers for --manifest-url, as 'name:value,name:value'; repeatable (staticPodURLHeader)")
	fs.DurationVar(&f.httpCheckFrequency, "http-check-frequency", 0, "poll period of --manifest-url (httpCheckFrequency)")
	fs.StringSliceVar(&f.clusterDNS, "cluster-dns", nil, "DNS server IPs for ClusterFirst pods, comma-separated (clusterDNS)")
	fs.StringVar(&f.clusterDomain, "cluster-domain", "", "the cluster's DNS domain, searched by ClusterFirst pods (clusterDomain)")
	fs.StringVar(&f.resolvConf, "resolv-conf", "", "resolver file that dnsPolicy Default pods get, \"\" for none (resolvConf)")
	fs.BoolVar(&f.failCgroupV1, "fail-cgroupv1", true, "refuse to start on a cgroup v1 host (failCgroupV1)")
	// The flags override the config file, so they have no default of their
	// own; --help shows the value nodelet uses when neither sets one.
	for name, def := range map[string]string{
		"container-runtime-endpoint": DefaultRuntimeEndpoint, "read-only-port": fmt.Sprint(DefaultReadOnlyPort),
		"port": fmt.Sprint(DefaultPort), "max-pods": fmt.Sprint(DefaultMaxPods), "sync-frequency": "1m0s",
		"file-check-frequency": "20s", "http-check-frequency": "20s", "cgroup-driver": "cgroupfs",
		"address": "0.0.0.0", "resolv-conf": "/etc/resolv.conf",
	} {
		fs.Lookup(name).DefValue = def
	}
	gofs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(gofs)
	for _, name := range []string{"v", "vmodule"} {
		fs.AddGoFlag(gofs.Lookup(name))
	}
	fs.Lookup("v").Shorthand = "v"
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w (nodelet --help lists the flags)", err)
	}
	if help, _ := fs.GetBool("help"); help {
		return nil, &Answer{Text: usage(fs)}
	}
	if fs.Changed("version") {
		return nil, versionAnswer(version)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}

	readOnlySet := false
	if o.ConfigFile != "" {
		cfg, set, err := LoadConfigFile(o.ConfigFile)
		if err != nil {
			return nil, err
		}
		o.Config, readOnlySet = *cfg, set
	}
	c := &o.Config
	if fs.Changed("pod-manifest-path") {
		c.StaticPodPath = f.podManifestPath
	}
	if fs.Changed("container-runtime-endpoint") {
		c.ContainerRuntimeEndpoint = f.runtimeEndpoint
	}
	if fs.Changed("read-only-port") {
		c.ReadOnlyPort, readOnlySet = f.readOnlyPort, true
	}
	if fs.Changed("port") {
		c.Port = f.port
	}
	if fs.Changed("max-pods") {
		c.MaxPods = f.maxPods
	}
	if fs.Changed("sync-frequency") {
		c.SyncFrequency = metav1.Duration{Duration: f.syncFrequency}
	}
	if fs.Changed("file-check-frequency") {
		c.FileCheckFrequency = metav1.Duration{Duration: f.fileCheckFrequency}
	}
	if fs.Changed("cgroup-driver") {
		c.CgroupDriver = f.cgroupDriver
	}
	if fs.Changed("address") {
		c.Address = f.address
	}
	if fs.Changed("manifest-url") {
		c.StaticPodURL = f.manifestURL
	}
	if fs.Changed("http-check-frequency") {
		c.HTTPCheckFrequency = metav1.Duration{Duration: f.httpCheckFrequency}
	}
	if fs.Changed("cluster-dns") {
		c.ClusterDNS = f.clusterDNS
	}
	if fs.Changed("cluster-domain") {
		c.ClusterDomain = f.clusterDomain
	}
	if fs.Changed("resolv-conf") {
		c.ResolverConfig = &f.resolvConf
	}
	if fs.Changed("fail-cgroupv1") {
		c.FailCgroupV1 = &f.failCgroupV1
	}
	if fs.Changed("manifest-url-header") {
		h, err := parseHeaders(f.manifestURLHeaders)
		if err != nil {
			return nil, err
		}
		c.StaticPodURLHeader = h
	}
	setDefaults(c, readOnlySet)
	if err := validate(c); err != nil {
		return nil, err
	}
	if o.DeadContainersKept < 0 {
		return nil, fmt.Errorf("--maximum-dead-containers-per-container (%d) must not be negative", o.DeadContainersKept)
	}
	for name, d := range map[string]time.Duration{"--image-gc-period": o.ImageGCPeriod, "--pleg-relist-period": o.PLEGRelistPeriod} {
		if d <= 0 {
			return nil, fmt.Errorf("%s (%v) must be positive", name, d)
		}
	}
	return o, nil
}

// LoadConfigFile reads a KubeletConfiguration strictly: a wrong
// apiVersion or kind, or any unknown field, is an error. It also reports
// whether readOnlyPort was set (its zero value means "disabled").
func LoadConfigFile(path string) (*kubeletv1beta1.KubeletConfiguration, bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, false, fmt.Errorf("reading config file: %w", err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, false, fmt.Errorf("config file %s is not valid YAML: %v", path, oneLine(err))
	}
	var head struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		ReadOnly   json.RawMessage `json:"readOnlyPort"`
	}
	if err := json.Unmarshal(js, &head); err != nil {
		return nil, false, fmt.Errorf("config file %s: %v", path, oneLine(err))
	}
	if want := kubeletv1beta1.SchemeGroupVersion.String(); head.APIVersion != want || head.Kind != "KubeletConfiguration" {
		return nil, false, fmt.Errorf("config file %s: want apiVersion %s and kind KubeletConfiguration, got %q and %q", path, want, head.APIVersion, head.Kind)
	}
	cfg := &kubeletv1beta1.KubeletConfiguration{}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cfg); err != nil {
		return nil, false, fmt.Errorf("config file %s: %v", path, oneLine(err))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, false, fmt.Errorf("config file %s: %v", path, oneLine(err))
	}
	warnings, err := checkFields(raw)
	for _, w := range warnings {
		klog.Warningf("config file %s: %s", path, w)
	}
	if err != nil {
		return nil, false, fmt.Errorf("config file %s: %w", path, err)
	}
	return cfg, len(head.ReadOnly) > 0, nil
}

// parseHeaders reads --manifest-url-header values: comma-separated
// name:value pairs; a name given again adds a value.
func parseHeaders(values []string) (map[string][]string, error) {
	h := map[string][]string{}
	for _, v := range values {
		for _, pair := range strings.Split(v, ",") {
			name, value, ok := strings.Cut(pair, ":")
			if !ok || strings.TrimSpace(name) == "" {
				return nil, fmt.Errorf("--manifest-url-header %q: want name:value", pair)
			}
			name = strings.TrimSpace(name)
			h[name] = append(h[name], value)
		}
	}
	return h, nil
}

func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

func setDefaults(c *kubeletv1beta1.KubeletConfiguration, readOnlySet bool) {
	if c.ContainerRuntimeEndpoint == "" {
		c.ContainerRuntimeEndpoint = DefaultRuntimeEndpoint
	}
	if c.SyncFrequency.Duration == 0 {
		c.SyncFrequency.Duration = time.Minute
	}
	if c.FileCheckFrequency.Duration == 0 {
		c.FileCheckFrequency.Duration = 20 * time.Second
	}
	if c.HTTPCheckFrequency.Duration == 0 {
		c.HTTPCheckFrequency.Duration = 20 * time.Second
	}
	if c.Address == "" {
		c.Address = "0.0.0.0"
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if !readOnlySet {
		c.ReadOnlyPort = DefaultReadOnlyPort
	}
	if c.MaxPods == 0 {
		c.MaxPods = DefaultMaxPods
	}
	if c.CgroupDriver == "" {
		c.CgroupDriver = "cgroupfs"
	}
	if c.ResolverConfig == nil {
		c.ResolverConfig = new("/etc/resolv.conf")
	}
	if c.PodLogsDir == "" {
		c.PodLogsDir = DefaultPodLogsDir
	}
	// Container log rotation, as upstream's defaults.
	if c.ContainerLogMaxSize == "" {
		c.ContainerLogMaxSize = "10Mi"
	}
	if c.ContainerLogMaxFiles == nil {
		c.ContainerLogMaxFiles = new(int32(5))
	}
	if c.ContainerLogMaxWorkers == nil {
		c.ContainerLogMaxWorkers = new(int32(1))
	}
	if c.ContainerLogMonitorInterval == nil {
		c.ContainerLogMonitorInterval = &metav1.Duration{Duration: 10 * time.Second}
	}
	if c.RuntimeRequestTimeout.Duration == 0 {
		c.RuntimeRequestTimeout.Duration = 2 * time.Minute
	}
	if c.ImageGCHighThresholdPercent == nil {
		high := int32(85)
		c.ImageGCHighThresholdPercent = &high
	}
	if c.ImageGCLowThresholdPercent == nil {
		low := int32(80)
		c.ImageGCLowThresholdPercent = &low
	}
	if c.EvictionPressureTransitionPeriod.Duration == 0 {
		c.EvictionPressureTransitionPeriod = metav1.Duration{Duration: 5 * time.Minute}
	}
	if c.ImageMinimumGCAge.Duration == 0 {
		c.ImageMinimumGCAge.Duration = 2 * time.Minute
	}
	if c.SerializeImagePulls == nil {
		serialize := true
		c.SerializeImagePulls = &serialize
	}
	// Cluster mode: the kubelet's client rates and reporting periods.
	if c.KubeAPIQPS == nil {
		c.KubeAPIQPS = new(int32(50))
	}
	if c.KubeAPIBurst == 0 {
		c.KubeAPIBurst = 100
	}
	if c.EventRecordQPS == nil {
		c.EventRecordQPS = new(int32(50))
	}
	if c.EventBurst == 0 {
		c.EventBurst = 100
	}
	if c.ContentType == "" {
		c.ContentType = "application/vnd.kubernetes.protobuf"
	}
	if c.NodeStatusUpdateFrequency.Duration == 0 {
		c.NodeStatusUpdateFrequency.Duration = 10 * time.Second
	}
	if c.NodeStatusReportFrequency.Duration == 0 {
		c.NodeStatusReportFrequency.Duration = 5 * time.Minute
	}
	if c.NodeLeaseDurationSeconds == 0 {
		c.NodeLeaseDurationSeconds = 40
	}
	// The kubelet API's security, with the v1beta1 defaults: no
	// anonymous access, tokens and access checked with the API server.
	if c.Authentication.Anonymous.Enabled == nil {
		c.Authentication.Anonymous.Enabled = new(false)
	}
	if c.Authentication.Webhook.Enabled == nil {
		c.Authentication.Webhook.Enabled = new(true)
	}
	if c.Authentication.Webhook.CacheTTL.Duration == 0 {
		c.Authentication.Webhook.CacheTTL.Duration = 2 * time.Minute
	}
	if c.Authorization.Mode == "" {
		c.Authorization.Mode = kubeletv1beta1.KubeletAuthorizationModeWebhook
	}
	if c.Authorization.Webhook.CacheAuthorizedTTL.Duration == 0 {
		c.Authorization.Webhook.CacheAuthorizedTTL.Duration = 5 * time.Minute
	}
	if c.Authorization.Webhook.CacheUnauthorizedTTL.Duration == 0 {
		c.Authorization.Webhook.CacheUnauthorizedTTL.Duration = 30 * time.Second
	}
	setServingDefaults(c)
}

// setServingDefaults fills in upstream's defaults for serving,
// registration and the host: the servers on, the plain /healthz on
// 127.0.0.1:10248, the Node registered, cgroup v1 refused.
func setServingDefaults(c *kubeletv1beta1.KubeletConfiguration) {
	if c.EnableServer == nil {
		c.EnableServer = new(true)
	}
	if c.HealthzPort == nil {
		c.HealthzPort = new(int32(10248))
	}
	if c.HealthzBindAddress == "" {
		c.HealthzBindAddress = "127.0.0.1"
	}
	if c.RegisterNode == nil {
		c.RegisterNode = new(true)
	}
	if c.FailCgroupV1 == nil {
		c.FailCgroupV1 = new(true)
	}
	if c.CPUCFSQuota == nil {
		c.CPUCFSQuota = new(true)
	}
}

func validate(c *kubeletv1beta1.KubeletConfiguration) error {
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
	if c.PodsPerCore < 0 {
		errs = append(errs, fmt.Errorf("podsPerCore (%d) must not be negative", c.PodsPerCore))
	}
	switch c.CgroupDriver {
	case "cgroupfs":
	case "systemd":
		errs = append(errs, errors.New("cgroupDriver systemd is not supported: nodelet drives cgroupfs"))
	default:
		errs = append(errs, fmt.Errorf("cgroupDriver %q is not one of cgroupfs, systemd", c.CgroupDriver))
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

// usage lists every flag with its default, as the upstream kubelet's
// --help does.
func usage(fs *pflag.FlagSet) string {
	return "nodelet runs pods from static manifests, an HTTP URL or a kube-apiserver on a CRI runtime,\n" +
		"in place of the kubelet (" + kubernetesVersion + "). Most settings belong in the --config file\n" +
		"(a KubeletConfiguration); the flags below override it.\n\n" +
		"Usage:\n  nodelet [flags]\n\nFlags:\n" + fs.FlagUsages()
}

// versionAnswer prints the version as the upstream kubelet does:
// "Kubernetes <version>", or with raw the version information as JSON.
func versionAnswer(format string) error {
	switch format {
	case "true":
		return &Answer{Text: "Kubernetes " + Version + "\n"}
	case "raw":
		b, err := json.MarshalIndent(map[string]string{
			"major": "1", "minor": "37", "gitVersion": Version, "kubernetesVersion": kubernetesVersion,
		}, "", "  ")
		if err != nil {
			return err
		}
		return &Answer{Text: string(b) + "\n"}
	default:
		return fmt.Errorf("--version=%s: want --version or --version=raw", format)
	}
}
