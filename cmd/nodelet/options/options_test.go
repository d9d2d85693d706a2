package options

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testutil"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDefaults(t *testing.T) {
	o, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := o.Config
	if c.ReadOnlyPort != 0 || c.Port != 10250 || c.MaxPods != 110 || c.SyncFrequency.Duration != time.Minute ||
		c.FileCheckFrequency.Duration != 20*time.Second || c.CgroupDriver != "cgroupfs" ||
		c.ContainerRuntimeEndpoint != "unix:///run/containerd/containerd.sock" || o.RootDir != "/var/lib/kubelet" ||
		o.CertDir != "/var/lib/kubelet/pki" || c.Logging.Format != "text" {
		t.Fatalf("defaults %+v", c)
	}
}

// TestJoinFlags: the flags kubeadm's systemd drop-in and kubeadm-flags.env
// pass are taken, and land where the node's identity and join need them.
func TestJoinFlags(t *testing.T) {
	o, err := Parse([]string{"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock", "--pod-infra-container-image=registry.k8s.io/pause:3.10",
		"--node-ip=10.1.2.3,fd00::3", "--hostname-override=worker-1", "--cloud-provider=external", "--root-dir=/srv/kubelet",
		"--register-with-taints=dedicated=infra:NoSchedule,gpu:NoExecute", "--logging-format=json", "-v=3"})
	if err != nil {
		t.Fatal(err)
	}
	if o.BootstrapKubeconfig != "/etc/kubernetes/bootstrap-kubelet.conf" || o.CertDir != "/srv/kubelet/pki" || !o.ExternalCloudProvider ||
		len(o.NodeIPs) != 2 || o.NodeIPs[0].String() != "10.1.2.3" || o.NodeIPs[1].String() != "fd00::3" ||
		o.Config.Logging.Format != "json" || o.Config.Logging.Verbosity != 3 {
		t.Fatalf("options %+v", o)
	}
	taints := o.Config.RegisterWithTaints
	if len(taints) != 2 || taints[0].Key != "dedicated" || taints[0].Value != "infra" || taints[0].Effect != "NoSchedule" ||
		taints[1].Key != "gpu" || taints[1].Effect != "NoExecute" {
		t.Fatalf("taints %+v", taints)
	}
	o, err = Parse([]string{"--cert-dir=/certs", "--kubeconfig=/k", "--client-ca-file=/etc/kubernetes/pki/ca.crt"})
	if err != nil || o.CertDir != "/certs" || o.Config.Authentication.X509.ClientCAFile != "/etc/kubernetes/pki/ca.crt" {
		t.Fatalf("--cert-dir, --client-ca-file: %v %+v", err, o)
	}
}

// TestKubeadmConfigurationAccepted: the KubeletConfiguration kubeadm
// v1.37 generates (kubeadm config print init-defaults --component-configs
// KubeletConfiguration) is taken as is: its zero values mean the
// defaults, and nothing it sets is refused or warned about.
func TestKubeadmConfigurationAccepted(t *testing.T) {
	o, err := Parse([]string{"--config", "../../../pkg/infra/kubeletconfig/testdata/kubeadm-kubelet-config.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	c := o.Config
	if c.CgroupDriver != "systemd" || !c.RotateCertificates || *c.HealthzPort != 10248 || c.SyncFrequency.Duration != time.Minute ||
		c.RuntimeRequestTimeout.Duration != 2*time.Minute || c.NodeStatusUpdateFrequency.Duration != 10*time.Second ||
		c.Authentication.Webhook.CacheTTL.Duration != 2*time.Minute || c.ReadOnlyPort != 0 || c.StaticPodPath != "/etc/kubernetes/manifests" {
		t.Fatalf("kubeadm configuration %+v", c)
	}
}

// TestLoggingBlock: the logging block's format is checked at start, and
// JSON is a known format.
func TestLoggingBlock(t *testing.T) {
	o, err := Parse([]string{"--config", writeConfig(t, "logging:\n  format: json\n  verbosity: 4\n")})
	if err != nil || o.Config.Logging.Format != "json" || o.Config.Logging.Verbosity != 4 {
		t.Fatalf("json logging: %v %+v", err, o)
	}
	o, err = Parse([]string{"--config", writeConfig(t, "logging:\n  verbosity: 4\n"), "-v=2"})
	if err != nil || o.Config.Logging.Verbosity != 2 {
		t.Fatalf("-v over the file: %v", err)
	}
	if _, err := Parse([]string{"--config", writeConfig(t, "logging:\n  format: xml\n")}); err == nil || !strings.Contains(err.Error(), "logging.format") {
		t.Fatalf("unknown format: %v", err)
	}
}

func TestConfigFileAndFlags(t *testing.T) {
	path := writeConfig(t, `staticPodPath: /etc/kubernetes/manifests
containerRuntimeEndpoint: unix:///custom.sock
syncFrequency: 30s
fileCheckFrequency: 5s
readOnlyPort: 0
port: 11250
maxPods: 7
cgroupDriver: cgroupfs
`)
	o, err := Parse([]string{"--config", path})
	if err != nil {
		t.Fatal(err)
	}
	c := o.Config
	if c.StaticPodPath != "/etc/kubernetes/manifests" || c.ContainerRuntimeEndpoint != "unix:///custom.sock" ||
		c.SyncFrequency.Duration != 30*time.Second || c.FileCheckFrequency.Duration != 5*time.Second ||
		c.ReadOnlyPort != 0 || c.Port != 11250 || c.MaxPods != 7 {
		t.Fatalf("from file: %+v", c)
	}
	// Flags override the file.
	o, err = Parse([]string{"--config", path, "--pod-manifest-path=/other", "--max-pods", "3", "--read-only-port=10300",
		"--container-runtime-endpoint", "unix:///flag.sock", "--root-dir=/tmp/r", "--hostname-override=Node-A", "-v=4",
		"--kubeconfig=/etc/kubeconfig", "--cluster-dns=10.0.0.10,fd00::a", "--cluster-domain=cluster.local", "--resolv-conf="})
	if err != nil {
		t.Fatal(err)
	}
	if o.Config.StaticPodPath != "/other" || o.Config.MaxPods != 3 || o.Config.ReadOnlyPort != 10300 ||
		o.Config.ContainerRuntimeEndpoint != "unix:///flag.sock" || o.RootDir != "/tmp/r" ||
		o.HostnameOverride != "Node-A" || o.Kubeconfig != "/etc/kubeconfig" ||
		strings.Join(o.Config.ClusterDNS, ",") != "10.0.0.10,fd00::a" || o.Config.ClusterDomain != "cluster.local" || *o.Config.ResolverConfig != "" {
		t.Fatalf("flags: %+v", o)
	}
	if name, _ := NodeName(o.HostnameOverride); name != "node-a" {
		t.Fatalf("node name %q", name)
	}
}

// --config-dir's drop-ins override the file, and flags override both, as
// upstream orders them; a drop-in alone (no --config) configures too.
func TestConfigDirPrecedence(t *testing.T) {
	path := writeConfig(t, "maxPods: 7\nsyncFrequency: 30s\nstaticPodPath: /from/file\n")
	dir := t.TempDir()
	dropIn := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	if err := os.WriteFile(filepath.Join(dir, "10-pods.conf"), []byte(dropIn+"maxPods: 20\nstaticPodPath: /from/dropin\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := Parse([]string{"--config", path, "--config-dir", dir, "--pod-manifest-path=/from/flag"})
	if err != nil {
		t.Fatal(err)
	}
	if c := o.Config; c.MaxPods != 20 || c.SyncFrequency.Duration != 30*time.Second || c.StaticPodPath != "/from/flag" {
		t.Fatalf("maxPods %d (want the drop-in's 20), syncFrequency %v (the file's 30s), staticPodPath %q (the flag's)", c.MaxPods, c.SyncFrequency.Duration, c.StaticPodPath)
	}
	if o, err = Parse([]string{"--config-dir", dir}); err != nil || o.Config.MaxPods != 20 || o.Config.SyncFrequency.Duration != time.Minute {
		t.Fatalf("drop-ins alone: %v, maxPods %d, syncFrequency %v (want 20 and the default 1m)", err, o.Config.MaxPods, o.Config.SyncFrequency.Duration)
	}
}

func TestErrorsAreOneLineAndNameTheProblem(t *testing.T) {
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
		want string
	}{
		{"missing file", func(t *testing.T) []string { return []string{"--config", "/nonexistent/config.yaml"} }, "/nonexistent/config.yaml"},
		{"unknown field", func(t *testing.T) []string { return []string{"--config", writeConfig(t, "staticPodPth: /x\n")} }, `unknown field "staticPodPth"`},
		{"invalid YAML", func(t *testing.T) []string { return []string{"--config", writeConfig(t, "maxPods: [\n")} }, "not valid YAML"},
		{"cluster DNS not an IP", func(t *testing.T) []string {
			return []string{"--config", writeConfig(t, "clusterDNS: [dns.example]\n")}
		}, `clusterDNS: "dns.example" is not an IP address`},
		{"bad cluster domain", func(t *testing.T) []string { return []string{"--cluster-domain", "Cluster_Local"} }, `clusterDomain "Cluster_Local"`},
		{"wrong type", func(t *testing.T) []string { return []string{"--config", writeConfig(t, "maxPods: lots\n")} }, "maxPods"},
		{"wrong kind", func(t *testing.T) []string {
			p := filepath.Join(t.TempDir(), "c.yaml")
			testutil.Must(t, os.WriteFile(p, []byte("apiVersion: v1\nkind: Pod\n"), 0o644))
			return []string{"--config", p}
		}, "KubeletConfiguration"},
		{"bad cgroup driver", func(t *testing.T) []string { return []string{"--cgroup-driver=weird"} }, "cgroupDriver"},
		{"bad port", func(t *testing.T) []string { return []string{"--read-only-port=70000"} }, "readOnlyPort"},
		{"unknown flag", func(t *testing.T) []string { return []string{"--no-such-flag"} }, "no-such-flag"},
		{"bad log size", func(t *testing.T) []string {
			return []string{"--config", writeConfig(t, "containerLogMaxSize: lots\n")}
		}, "containerLogMaxSize"},
		{"one log file", func(t *testing.T) []string { return []string{"--config", writeConfig(t, "containerLogMaxFiles: 1\n")} }, "containerLogMaxFiles"},
		{"bad manifest URL", func(t *testing.T) []string { return []string{"--manifest-url=ftp://x/pods"} }, "staticPodURL"},
		{"bad minimum reclaim", func(t *testing.T) []string {
			return []string{"--config", writeConfig(t, "evictionMinimumReclaim: {memory.available: lots}\n")}
		}, "evictionMinimumReclaim"},
		{"negative max pod grace", func(t *testing.T) []string {
			return []string{"--config", writeConfig(t, "evictionMaxPodGracePeriod: -1\n")}
		}, "evictionMaxPodGracePeriod"},
		{"soft without grace", func(t *testing.T) []string {
			return []string{"--config", writeConfig(t, "evictionSoft: {memory.available: 1Gi}\n")}
		}, "evictionSoftGracePeriod"},
		{"bad node IP", func(t *testing.T) []string { return []string{"--node-ip=10.0.0.1,10.0.0.2"} }, "--node-ip"},
		{"in-tree cloud provider", func(t *testing.T) []string { return []string{"--cloud-provider=aws"} }, "--cloud-provider"},
		{"bad taint", func(t *testing.T) []string { return []string{"--register-with-taints=a=b"} }, "--register-with-taints"},
		{"bootstrap without kubeconfig", func(t *testing.T) []string { return []string{"--bootstrap-kubeconfig=/b"} }, "--kubeconfig"},
		{"bad manifest URL header", func(t *testing.T) []string {
			return []string{"--manifest-url=http://x/", "--manifest-url-header=novalue"}
		}, "name:value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.args(t))
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q: want one line mentioning %q", err, tc.want)
			}
		})
	}
}

func TestManifestURLFlags(t *testing.T) {
	o, err := Parse([]string{"--manifest-url=http://10.0.0.1/pods", "--manifest-url-header=a:1,b:2", "--manifest-url-header=b:3",
		"--http-check-frequency=5s"})
	if err != nil {
		t.Fatal(err)
	}
	h := o.Config.StaticPodURLHeader
	if o.Config.StaticPodURL != "http://10.0.0.1/pods" || len(h["a"]) != 1 || strings.Join(h["b"], ",") != "2,3" ||
		o.Config.HTTPCheckFrequency.Duration != 5*time.Second {
		t.Fatalf("%+v", o.Config)
	}
}

// TestHelpAndVersionAreAnswers: --help lists every flag with the default
// nodelet uses, --version prints the upstream kubelet's format; both are
// answers, not failures, and an unknown flag points at --help.
func TestHelpAndVersionAreAnswers(t *testing.T) {
	var answer *Answer
	_, err := Parse([]string{"--help"})
	if !errors.As(err, &answer) {
		t.Fatalf("--help: %v", err)
	}
	for _, want := range []string{"Usage:\n  nodelet [flags]", "--config string", "--port int32", "(default 10250)",
		`(default "unix:///run/containerd/containerd.sock")`, "--version"} {
		if !strings.Contains(answer.Text, want) {
			t.Errorf("--help lacks %q:\n%s", want, answer.Text)
		}
	}
	if _, err := Parse([]string{"--version"}); !errors.As(err, &answer) || answer.Text != "Kubernetes "+Version+"\n" {
		t.Fatalf("--version: %v", err)
	}
	if _, err := Parse([]string{"--version=raw"}); !errors.As(err, &answer) || !strings.Contains(answer.Text, `"gitVersion": "`+Version+`"`) {
		t.Fatalf("--version=raw: %v", err)
	}
	_, err = Parse([]string{"--no-such-flag"})
	if errors.As(err, &answer) || err == nil || !strings.Contains(err.Error(), "nodelet --help") {
		t.Fatalf("unknown flag: %v", err)
	}
}
