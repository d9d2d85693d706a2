package kubeletconfig

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

var rewrite = flag.Bool("rewrite", false, "rewrite docs/config-fields.md from the table")

// TestEveryConfigFieldIsClassified: the table covers exactly the fields
// of KubeletConfiguration, so a new field cannot slip through unjudged.
func TestEveryConfigFieldIsClassified(t *testing.T) {
	names := jsonFieldNames()
	for _, name := range names {
		if _, ok := configFields[name]; !ok {
			t.Errorf("KubeletConfiguration field %s is not in configFields", name)
		}
	}
	if len(configFields) != len(names) {
		t.Errorf("configFields has %d entries for %d fields", len(configFields), len(names))
	}
	for name, f := range configFields {
		if f.def == "" {
			continue
		}
		if same, err := sameValue(name, []byte(f.def), f.def); err != nil || !same {
			t.Errorf("%s: default %s does not decode: %v", name, f.def, err)
		}
	}
}

func jsonFieldNames() []string {
	var out []string
	t := reflect.TypeOf(kubeletv1beta1.KubeletConfiguration{})
	for i := 0; i < t.NumField(); i++ {
		if name := strings.Split(t.Field(i).Tag.Get("json"), ",")[0]; name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// TestEachFieldClass: a refused field stops start-up naming it unless set
// to its default; an ignored one only warns; an honoured one just works.
func TestEachFieldClass(t *testing.T) {
	for _, tc := range []struct {
		body    string
		wantErr string
	}{
		{"cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\ncpuManagerPolicyOptions: {full-pcpus-only: \"true\"}\n", ""},
		{"cpuManagerPolicy: none\n", ""},
		{"cpuManagerPolicy: dynamic\n", `cpuManagerPolicy "dynamic" is not one of none, static`},
		{"cpuManagerPolicyOptions: {full-pcpus-only: \"true\"}\n", "cpuManagerPolicyOptions need cpuManagerPolicy static"},
		{"reservedSystemCPUs: \"0-\"\n", `reservedSystemCPUs "0-" is not a CPU list`},
		{"memoryManagerPolicy: Static\nreservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]\n", ""},
		{"reservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]\n", "reservedMemory needs memoryManagerPolicy Static"},
		{"topologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\n", ""},
		{"topologyManagerPolicy: strict\n", `topologyManagerPolicy "strict" is not one of`},
		{"memorySwap: {swapBehavior: LimitedSwap}\n", ""},
		{"memorySwap: {swapBehavior: Unlimited}\n", `memorySwap.swapBehavior "Unlimited" is not one of NoSwap, LimitedSwap`},
		{"shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n", ""},
		{"shutdownGracePeriod: 0s\n", ""},
		{"shutdownGracePeriod: 500ms\n", "shutdownGracePeriod (500ms) must be zero or at least 1s"},
		{"shutdownGracePeriod: 5s\nshutdownGracePeriodCriticalPods: 10s\n", "shutdownGracePeriodCriticalPods (10s) must not exceed shutdownGracePeriod (5s)"},
		{"shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 10}]\n", ""},
		{"shutdownGracePeriod: 5s\nshutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 10}]\n", "cannot both be set"},
		{"shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: -1}]\n", "shutdownGracePeriodSeconds (-1) must not be negative"},
		{"enforceNodeAllocatable: [pods, system-reserved]\n", "enforceNodeAllocatable"},
		{"enforceNodeAllocatable: [pods]\n", ""},
		{"registryPullQPS: 7\n", ""},
		{"registerNode: false\nregisterWithTaints: [{key: k, effect: NoSchedule}]\nproviderID: aws:///x\n", ""},
		{"featureGates: {NoSuchGate: true}\n", `featureGates: unknown feature gate "NoSuchGate"`},
		{"featureGates: {ContextualLogging: false}\n", "featureGates: ContextualLogging=false is not supported"},
		{"featureGates: {ContextualLogging: true}\n", ""},
		{"evictionSoft: {memory.available: 200Mi}\n", "evictionSoft memory.available has no evictionSoftGracePeriod"},
		{"evictionSoft: {memory.available: 200Mi}\nevictionSoftGracePeriod: {memory.available: 1m}\n", ""},
		{"evictionSoft: {memory.available: lots}\nevictionSoftGracePeriod: {memory.available: 1m}\n", "evictionSoft: memory.available"},
		{"tlsMinVersion: VersionTLS13\ntlsCipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n", ""},
		{"tlsMinVersion: TLS9\n", "tlsMinVersion"},
		{"tlsCipherSuites: [NOPE]\n", "tlsCipherSuites"},
		{"podsPerCore: -1\n", "podsPerCore (-1) must not be negative"},
		{"crashLoopBackOff: {maxContainerRestartPeriod: 1s}\n", ""},
		{"crashLoopBackOff: {maxContainerRestartPeriod: 500ms}\n", "CrashLoopBackOff.MaxContainerRestartPeriod (got: 0.5 seconds) must be set between 1s and 300s"},
		{"crashLoopBackOff: {maxContainerRestartPeriod: 301s}\n", "CrashLoopBackOff.MaxContainerRestartPeriod (got: 301 seconds) must be set between 1s and 300s"},
	} {
		_, err := loadDefaulted(writeConfig(t, tc.body))
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%q: %v", tc.body, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q: error %v, want one containing %q", tc.body, err, tc.wantErr)
		case err != nil && strings.Contains(err.Error(), "\n"):
			t.Errorf("%q: error is not one line: %q", tc.body, err)
		}
	}
}

// TestIgnoredFieldsWarn: an ignored field away from its default is
// reported, at its default it is not.
func TestIgnoredFieldsWarn(t *testing.T) {
	warnings, err := checkFields(map[string]json.RawMessage{"registryPullQPS": json.RawMessage("7"), "hairpinMode": json.RawMessage(`"promiscuous-bridge"`), "maxPods": json.RawMessage("3")})
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || !strings.HasPrefix(warnings[0], "registryPullQPS: ") {
		t.Fatalf("warnings %q", warnings)
	}
}

// TestServingSettingsApply: the defaults and the settings reach the
// options the servers and the reporter are built from.
func TestServingSettingsApply(t *testing.T) {
	o, err := defaulted()
	if err != nil {
		t.Fatal(err)
	}
	if !*o.EnableServer || *o.HealthzPort != 10248 || o.HealthzBindAddress != "127.0.0.1" || !*o.RegisterNode {
		t.Fatalf("serving defaults %+v", o)
	}
	o, err = loadDefaulted(writeConfig(t, "enableServer: false\nhealthzPort: 0\nregisterNode: false\n"))
	if err != nil {
		t.Fatal(err)
	}
	if *o.EnableServer || *o.HealthzPort != 0 || *o.RegisterNode {
		t.Fatalf("settings not kept: %+v", o)
	}
}

// TestConfigFieldsDoc: docs/config-fields.md is the table (go test
// ./cmd/nodelet/app -run ConfigFieldsDoc -rewrite after a change).
func TestConfigFieldsDoc(t *testing.T) {
	const path = "../../../docs/config-fields.md"
	want := configFieldsDoc()
	if *rewrite {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("docs/config-fields.md is out of date: rerun with -rewrite")
	}
}

func configFieldsDoc() []byte {
	var b bytes.Buffer
	b.WriteString("# KubeletConfiguration fields\n\n")
	b.WriteString("What nodelet does with each field of `kubelet.config.k8s.io/v1beta1` `KubeletConfiguration`\n")
	b.WriteString("(written from `pkg/infra/kubeletconfig/fields.go`; do not edit). **honoured**: nodelet does what the field\n")
	b.WriteString("says. **ignored**: nodelet does not act on it; a value other than the default is logged as a\n")
	b.WriteString("warning at start. **refused**: a value other than the default stops nodelet at start with an error\n")
	b.WriteString("naming the field. Flags that set a field behave as the field.\n\n")
	b.WriteString("| field | nodelet | upstream default | what nodelet does |\n|---|---|---|---|\n")
	names := make([]string, 0, len(configFields))
	for n := range configFields {
		names = append(names, n)
	}
	sort.Strings(names)
	counts := map[support]int{}
	for _, n := range names {
		f := configFields[n]
		counts[f.support]++
		def := "—"
		if f.def != "" {
			def = "`" + f.def + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", n, f.support, def, f.note)
	}
	fmt.Fprintf(&b, "\n%d fields: %d honoured, %d ignored with a warning, %d refused.\n", len(names), counts[honoured], counts[ignored], counts[refused])
	b.WriteString("\n`featureGates` accepts every gate the upstream kubelet v1.37 knows, set to its v1.37 default;\n")
	b.WriteString("nodelet implements each feature as that release does by default, so any other value is refused.\n")
	return b.Bytes()
}

// TestKubeadmConfigurationHasNothingToWarnAbout: nothing in the
// KubeletConfiguration kubeadm v1.37 generates is refused or warned about.
func TestKubeadmConfigurationHasNothingToWarnAbout(t *testing.T) {
	data, err := os.ReadFile("testdata/kubeadm-kubelet-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	raw := map[string]json.RawMessage{}
	if err := json.Unmarshal(js, &raw); err != nil {
		t.Fatal(err)
	}
	warnings, err := checkFields(raw)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("kubeadm's configuration draws %v, warnings %q", err, warnings)
	}
}
