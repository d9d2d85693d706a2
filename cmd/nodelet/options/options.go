// Package options reads nodelet's command line and KubeletConfiguration
// file (with its drop-ins) into Options: upstream's kubelet flags, the
// config file's fields, flags winning, and upstream's defaults for the
// rest. The composition root (package app) builds the node from them.
package options

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // logging.format: json
	"k8s.io/klog/v2"
	kubeletconfigv1 "k8s.io/kubelet/config/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/pkg/infra/kubeletconfig"
	"github.com/nodelet/nodelet/pkg/runtime/credentialprovider"
	"github.com/nodelet/nodelet/pkg/runtime/runtimeclass"
)

// Options is nodelet's resolved configuration: the config file's values
// with command-line flags applied on top, and defaults for the rest.
type Options struct {
	ConfigFile string
	// ConfigDir is --config-dir: drop-in KubeletConfiguration files laid
	// over ConfigFile (flags still win).
	ConfigDir        string
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
	// BootstrapKubeconfig is --bootstrap-kubeconfig: the credentials a
	// joining node asks for its client certificate with, when Kubeconfig
	// is missing or its certificate has expired.
	BootstrapKubeconfig string
	// CertDir holds the client and serving certificates nodelet obtains
	// (default <root-dir>/pki).
	CertDir string
	// NodeIPs are --node-ip: the node's addresses (one, or one per IP
	// family); none means the address of the default route's interface.
	NodeIPs []net.IP
	// ExternalCloudProvider is --cloud-provider=external: a cloud
	// controller initializes the Node and owns its addresses.
	ExternalCloudProvider bool
	// RuntimeClasses are --runtime-classes' RuntimeClasses (standalone
	// mode: in cluster mode they come from the API server).
	RuntimeClasses []*nodev1.RuntimeClass
	// CredentialProviders are the image credential provider plugins of
	// --image-credential-provider-config, in CredentialProviderBinDir.
	CredentialProviders      []kubeletconfigv1.CredentialProvider
	CredentialProviderBinDir string
	// RuntimeCgroups is --runtime-cgroups: the container runtime's
	// cgroup, reported by the summary API as "runtime".
	RuntimeCgroups string
	Config         kubeletv1beta1.KubeletConfiguration
}

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
	failSwapOn         bool
	protectKernel      bool
	healthzPort        int32
	healthzAddress     string
	registerTaints     []string
	nodeIP             string
	cloudProvider      string
	credentialConfig   string
	runtimeClasses     string
	clientCAFile       string
	kubeletCgroups     string
	imageEndpoint      string
	systemCgroups      string
	logging            logsapi.LoggingConfiguration
}

// Version is nodelet's version as the node reports it (nodeInfo's
// kubeletVersion): the Kubernetes release whose kubelet it replaces.
const Version = "v1.37.2-nodelet"

// Answer is what Parse returns for --help and --version: not a failure,
// but text to print on standard output before exiting with status 0.
type Answer struct{ Text string }

func (a *Answer) Error() string { return a.Text }

// Parse reads the command line (without the program name) and the config
// file it names. Errors are one line and name the problem.
func Parse(args []string) (*Options, error) {
	o := &Options{}
	var f flagValues
	var version string
	fs := newFlagSet(o, &f, &version)
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
	if o.ConfigFile != "" || o.ConfigDir != "" {
		cfg, err := kubeletconfig.LoadWithDropIns(o.ConfigFile, o.ConfigDir)
		if err != nil {
			return nil, err
		}
		o.Config = *cfg
	}
	if err := applyFlags(fs, &f, o); err != nil {
		return nil, err
	}
	kubeletconfig.SetDefaults(&o.Config)
	if o.CertDir == "" {
		o.CertDir = filepath.Join(o.RootDir, "pki")
	}
	if err := kubeletconfig.Validate(&o.Config); err != nil {
		return nil, err
	}
	return o, validateOptions(o)
}

// newFlagSet declares the flags: those of nodelet's own, and those that
// override a config file field, which land in f.
func newFlagSet(o *Options, f *flagValues, version *string) *pflag.FlagSet {
	fs := pflag.NewFlagSet("nodelet", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = true
	fs.BoolP("help", "h", false, "show this help and exit")
	fs.StringVar(version, "version", "", "print the version and exit (--version=raw for JSON)")
	fs.Lookup("version").NoOptDefVal = "true"
	fs.StringVar(&o.ConfigFile, "config", "", "path to a KubeletConfiguration (kubelet.config.k8s.io/v1beta1) file")
	fs.StringVar(&o.ConfigDir, "config-dir", "", "directory of drop-in KubeletConfiguration files (*.conf, in lexical order, subdirectories included) merged over --config; flags override both")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "path to a kubeconfig for the API server (cluster mode); written by TLS bootstrapping when --bootstrap-kubeconfig is set")
	fs.StringVar(&o.BootstrapKubeconfig, "bootstrap-kubeconfig", "", "kubeconfig with bootstrap credentials, used to obtain a client certificate when --kubeconfig is missing or expired")
	fs.StringVar(&o.CertDir, "cert-dir", "", "directory of the client and serving certificates nodelet obtains (default <root-dir>/pki)")
	fs.StringVar(&o.RootDir, "root-dir", kubeletconfig.DefaultRootDir, "directory for nodelet's files (pod directories)")
	fs.StringVar(&o.HostnameOverride, "hostname-override", "", "node name to use instead of the hostname")
	fs.IntVar(&o.DeadContainersKept, "maximum-dead-containers-per-container", 1, "dead instances of each container a pod keeps (their last state and logs)")
	fs.StringToStringVar(&o.NodeLabels, "node-labels", nil, "labels for the node, key=value,... (checked by nodeSelector and node affinity)")
	fs.StringVar(&o.PodInfraContainerImage, "pod-infra-container-image", kubeletconfig.DefaultSandboxImage, "the runtime's sandbox image, never garbage collected")
	fs.DurationVar(&o.ImageGCPeriod, "image-gc-period", 5*time.Minute, "how often image garbage collection runs")
	fs.DurationVar(&o.PLEGRelistPeriod, "pleg-relist-period", time.Second, "how often every pod is relisted; container exits are seen sooner through the runtime's event stream")
	fs.StringVar(&f.nodeIP, "node-ip", "", "the node's IP address, or comma-separated IPv4 and IPv6 addresses (0.0.0.0 or :: picks the default route's address of that family)")
	fs.StringVar(&f.cloudProvider, "cloud-provider", "", "\"external\" when a cloud controller manager initializes the node, else empty")
	fs.StringSliceVar(&f.registerTaints, "register-with-taints", nil, "taints of the registered Node, key=value:Effect,... (registerWithTaints)")
	fs.StringVar(&f.credentialConfig, "image-credential-provider-config", "", "CredentialProviderConfig file, or directory of them, naming the image credential provider plugins")
	fs.StringVar(&f.runtimeClasses, "runtime-classes", "", "file, or directory of files, of node.k8s.io/v1 RuntimeClass manifests naming the runtime handlers of pods' runtimeClassName in standalone mode (in cluster mode the API server's RuntimeClasses are read; nodelet only)")
	fs.StringVar(&o.RuntimeCgroups, "runtime-cgroups", "", "the container runtime's cgroup, such as /system.slice/containerd.service, which the summary API reports as \"runtime\" (the runtime is not moved, as upstream)")
	fs.StringVar(&o.CredentialProviderBinDir, "image-credential-provider-bin-dir", "", "directory of the image credential provider plugins' executables")
	addConfigFlags(fs, f)
	addLoggingFlags(fs, &f.logging)
	return fs
}

// addConfigFlags declares the flags that override config file fields.
// They have no default of their own; --help shows the value nodelet uses
// when neither sets one.
func addConfigFlags(fs *pflag.FlagSet, f *flagValues) {
	fs.StringVar(&f.podManifestPath, "pod-manifest-path", "", "directory or file with static pod manifests (staticPodPath)")
	fs.StringVar(&f.runtimeEndpoint, "container-runtime-endpoint", "", "CRI endpoint (containerRuntimeEndpoint)")
	fs.StringVar(&f.imageEndpoint, "image-service-endpoint", "", "CRI image service endpoint, when not the runtime's (imageServiceEndpoint)")
	fs.Int32Var(&f.readOnlyPort, "read-only-port", 0, "read-only port, 0 to disable (readOnlyPort)")
	fs.Int32Var(&f.port, "port", 0, "kubelet API port (port)")
	fs.Int32Var(&f.maxPods, "max-pods", 0, "maximum number of pods (maxPods)")
	fs.DurationVar(&f.syncFrequency, "sync-frequency", 0, "resync period of running pods (syncFrequency)")
	fs.DurationVar(&f.fileCheckFrequency, "file-check-frequency", 0, "re-read period of static pod manifests (fileCheckFrequency)")
	fs.StringVar(&f.cgroupDriver, "cgroup-driver", "", "cgroup driver: cgroupfs or systemd (cgroupDriver)")
	fs.StringVar(&f.address, "address", "", "IP address to serve on (address)")
	fs.StringVar(&f.manifestURL, "manifest-url", "", "URL serving static pods (staticPodURL)")
	fs.StringArrayVar(&f.manifestURLHeaders, "manifest-url-header", nil, "headers for --manifest-url, as 'name:value,name:value'; repeatable (staticPodURLHeader)")
	fs.DurationVar(&f.httpCheckFrequency, "http-check-frequency", 0, "poll period of --manifest-url (httpCheckFrequency)")
	fs.StringSliceVar(&f.clusterDNS, "cluster-dns", nil, "DNS server IPs for ClusterFirst pods, comma-separated (clusterDNS)")
	fs.StringVar(&f.clusterDomain, "cluster-domain", "", "the cluster's DNS domain, searched by ClusterFirst pods (clusterDomain)")
	fs.StringVar(&f.resolvConf, "resolv-conf", "", "resolver file that dnsPolicy Default pods get, \"\" for none (resolvConf)")
	fs.BoolVar(&f.failCgroupV1, "fail-cgroupv1", true, "refuse to start on a cgroup v1 host (failCgroupV1)")
	fs.BoolVar(&f.failSwapOn, "fail-swap-on", true, "refuse to start on a node with swap on (failSwapOn)")
	fs.BoolVar(&f.protectKernel, "protect-kernel-defaults", false, "refuse to start when a kernel setting differs from the kubelet's, rather than set it (protectKernelDefaults)")
	fs.Int32Var(&f.healthzPort, "healthz-port", 10248, "port of the plain-HTTP /healthz, 0 to disable it (healthzPort)")
	fs.StringVar(&f.healthzAddress, "healthz-bind-address", "127.0.0.1", "address of the plain-HTTP /healthz (healthzBindAddress)")
	fs.StringVar(&f.kubeletCgroups, "kubelet-cgroups", "", "cgroup nodelet puts itself in, such as /kubelet (kubeletCgroups)")
	fs.StringVar(&f.systemCgroups, "system-cgroups", "", "cgroup nodelet puts the root cgroup's other processes in, such as /system (systemCgroups)")
	fs.StringVar(&f.clientCAFile, "client-ca-file", "", "CA bundle that signs the client certificates the kubelet API accepts, the API server's among them (authentication.x509.clientCAFile)")
	for name, def := range map[string]string{
		"container-runtime-endpoint": kubeletconfig.DefaultRuntimeEndpoint, "read-only-port": "0",
		"port": fmt.Sprint(kubeletconfig.DefaultPort), "max-pods": fmt.Sprint(kubeletconfig.DefaultMaxPods), "sync-frequency": "1m0s",
		"file-check-frequency": "20s", "http-check-frequency": "20s", "cgroup-driver": "cgroupfs",
		"address": "0.0.0.0", "resolv-conf": "/etc/resolv.conf",
	} {
		fs.Lookup(name).DefValue = def
	}
}

// addLoggingFlags declares the flags of the config file's logging block,
// as the kubelet's: -v, --vmodule, --logging-format, --log-flush-frequency.
func addLoggingFlags(fs *pflag.FlagSet, l *logsapi.LoggingConfiguration) {
	fs.VarP(logsapi.VerbosityLevelPflag(&l.Verbosity), "v", "v", "log verbosity (logging.verbosity)")
	fs.Var(logsapi.VModuleConfigurationPflag(&l.VModule), "vmodule", "per-file verbosity, pattern=N,... (logging.vmodule; text format only)")
	fs.StringVar(&l.Format, "logging-format", "", "log format: text or json (logging.format)")
	fs.DurationVar(&l.FlushFrequency.Duration.Duration, "log-flush-frequency", 0, "longest time between log flushes (logging.flushFrequency)")
	fs.Lookup("logging-format").DefValue = "text"
	fs.Lookup("log-flush-frequency").DefValue = "5s"
}

// applyFlags lays the flags that were given over the config file's fields.
func applyFlags(fs *pflag.FlagSet, f *flagValues, o *Options) error {
	c := &o.Config
	set := func(name string, apply func()) {
		if fs.Changed(name) {
			apply()
		}
	}
	set("pod-manifest-path", func() { c.StaticPodPath = f.podManifestPath })
	set("container-runtime-endpoint", func() { c.ContainerRuntimeEndpoint = f.runtimeEndpoint })
	set("image-service-endpoint", func() { c.ImageServiceEndpoint = f.imageEndpoint })
	set("read-only-port", func() { c.ReadOnlyPort = f.readOnlyPort })
	set("port", func() { c.Port = f.port })
	set("max-pods", func() { c.MaxPods = f.maxPods })
	set("sync-frequency", func() { c.SyncFrequency = metav1.Duration{Duration: f.syncFrequency} })
	set("file-check-frequency", func() { c.FileCheckFrequency = metav1.Duration{Duration: f.fileCheckFrequency} })
	set("cgroup-driver", func() { c.CgroupDriver = f.cgroupDriver })
	set("address", func() { c.Address = f.address })
	set("manifest-url", func() { c.StaticPodURL = f.manifestURL })
	set("http-check-frequency", func() { c.HTTPCheckFrequency = metav1.Duration{Duration: f.httpCheckFrequency} })
	set("cluster-dns", func() { c.ClusterDNS = f.clusterDNS })
	set("cluster-domain", func() { c.ClusterDomain = f.clusterDomain })
	set("resolv-conf", func() { c.ResolverConfig = &f.resolvConf })
	set("fail-cgroupv1", func() { c.FailCgroupV1 = &f.failCgroupV1 })
	set("fail-swap-on", func() { c.FailSwapOn = &f.failSwapOn })
	set("protect-kernel-defaults", func() { c.ProtectKernelDefaults = f.protectKernel })
	set("healthz-port", func() { c.HealthzPort = &f.healthzPort })
	set("healthz-bind-address", func() { c.HealthzBindAddress = f.healthzAddress })
	set("client-ca-file", func() { c.Authentication.X509.ClientCAFile = f.clientCAFile })
	set("kubelet-cgroups", func() { c.KubeletCgroups = f.kubeletCgroups })
	set("system-cgroups", func() { c.SystemCgroups = f.systemCgroups })
	set("v", func() { c.Logging.Verbosity = f.logging.Verbosity })
	set("vmodule", func() { c.Logging.VModule = f.logging.VModule })
	set("logging-format", func() { c.Logging.Format = f.logging.Format })
	set("log-flush-frequency", func() { c.Logging.FlushFrequency = f.logging.FlushFrequency })
	var errs []error
	if fs.Changed("manifest-url-header") {
		h, err := parseHeaders(f.manifestURLHeaders)
		errs = append(errs, err)
		c.StaticPodURLHeader = h
	}
	if fs.Changed("register-with-taints") {
		taints, err := parseTaints(f.registerTaints)
		errs = append(errs, err)
		c.RegisterWithTaints = taints
	}
	ips, err := parseNodeIPs(f.nodeIP)
	o.NodeIPs = ips
	errs = append(errs, err)
	if f.credentialConfig != "" || o.CredentialProviderBinDir != "" {
		if f.credentialConfig == "" || o.CredentialProviderBinDir == "" {
			errs = append(errs, errors.New("--image-credential-provider-config and --image-credential-provider-bin-dir go together"))
		} else {
			ps, err := credentialprovider.LoadConfig(f.credentialConfig, o.CredentialProviderBinDir)
			errs = append(errs, err)
			o.CredentialProviders = ps
		}
	}
	if f.runtimeClasses != "" {
		if o.Kubeconfig != "" || o.BootstrapKubeconfig != "" {
			errs = append(errs, errors.New("--runtime-classes is for standalone mode: with --kubeconfig the API server's RuntimeClasses are read"))
		} else {
			rcs, err := runtimeclass.Load(f.runtimeClasses)
			errs = append(errs, err)
			o.RuntimeClasses = rcs
		}
	}
	switch f.cloudProvider {
	case "":
	case "external":
		o.ExternalCloudProvider = true
	default:
		errs = append(errs, fmt.Errorf("--cloud-provider %q: only \"external\" (a cloud controller manager) or none is supported; the in-tree cloud providers were removed upstream in v1.31", f.cloudProvider))
	}
	return errors.Join(errs...)
}

// validateOptions checks what the flags alone set.
func validateOptions(o *Options) error {
	if o.DeadContainersKept < 0 {
		return fmt.Errorf("--maximum-dead-containers-per-container (%d) must not be negative", o.DeadContainersKept)
	}
	for name, d := range map[string]time.Duration{"--image-gc-period": o.ImageGCPeriod, "--pleg-relist-period": o.PLEGRelistPeriod} {
		if d <= 0 {
			return fmt.Errorf("%s (%v) must be positive", name, d)
		}
	}
	if o.BootstrapKubeconfig != "" && o.Kubeconfig == "" {
		return errors.New("--bootstrap-kubeconfig needs --kubeconfig: the path where the kubeconfig it obtains is written")
	}
	if o.Kubeconfig == "" && o.Config.ServerTLSBootstrap {
		return errors.New("serverTLSBootstrap needs --kubeconfig: the serving certificate is requested from the API server")
	}
	if o.Kubeconfig == "" && o.Config.RotateCertificates {
		klog.InfoS("rotateCertificates has nothing to rotate on a standalone node (no --kubeconfig)")
	}
	return nil
}

// parseTaints reads --register-with-taints: key[=value]:Effect, as
// upstream's flag does.
func parseTaints(specs []string) ([]v1.Taint, error) {
	var out []v1.Taint
	for _, spec := range specs {
		kv, effect, ok := strings.Cut(spec, ":")
		key, value, _ := strings.Cut(kv, "=")
		t := v1.Taint{Key: key, Value: value, Effect: v1.TaintEffect(effect)}
		switch t.Effect {
		case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		default:
			ok = false
		}
		if !ok || len(validation.IsQualifiedName(key)) > 0 {
			return nil, fmt.Errorf("--register-with-taints %q: want key[=value]:NoSchedule|PreferNoSchedule|NoExecute", spec)
		}
		out = append(out, t)
	}
	return out, nil
}

// parseNodeIPs reads --node-ip: one address, or two of different
// families (dual stack), as upstream accepts.
func parseNodeIPs(value string) ([]net.IP, error) {
	if value == "" {
		return nil, nil
	}
	var ips []net.IP
	for _, s := range strings.Split(value, ",") {
		ip := net.ParseIP(strings.TrimSpace(s))
		if ip == nil {
			return nil, fmt.Errorf("--node-ip %q: %q is not an IP address", value, s)
		}
		ips = append(ips, ip)
	}
	if len(ips) > 2 || (len(ips) == 2 && (ips[0].To4() == nil) == (ips[1].To4() == nil)) {
		return nil, fmt.Errorf("--node-ip %q: want one address, or one IPv4 and one IPv6 address", value)
	}
	return ips, nil
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

// ApplyLogging sets up logging as the configuration's logging block says
// (format, verbosity, vmodule, flush frequency). It must run once, before
// anything logs from another goroutine.
func ApplyLogging(o *Options) error {
	if err := logsapi.ValidateAndApply(&o.Config.Logging, nil); err != nil {
		return fmt.Errorf("logging: %w", err)
	}
	return nil
}

// usage lists every flag with its default, as the upstream kubelet's
// --help does.
func usage(fs *pflag.FlagSet) string {
	return "nodelet runs pods from static manifests, an HTTP URL or a kube-apiserver on a CRI runtime,\n" +
		"in place of the kubelet (" + kubeletconfig.KubernetesVersion + "). Most settings belong in the --config file\n" +
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
			"major": "1", "minor": "37", "gitVersion": Version, "kubernetesVersion": kubeletconfig.KubernetesVersion,
		}, "", "  ")
		if err != nil {
			return err
		}
		return &Answer{Text: string(b) + "\n"}
	default:
		return fmt.Errorf("--version=%s: want --version or --version=raw", format)
	}
}

// NodeName is the name the node goes by: --hostname-override or the
// machine's hostname, lower-cased as the API requires.
func NodeName(override string) (string, error) {
	name := override
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("cannot determine the node name: %w", err)
		}
		name = h
	}
	name = strings.ToLower(strings.TrimSpace(name))
	if name == "" {
		return "", fmt.Errorf("node name is empty")
	}
	return name, nil
}
