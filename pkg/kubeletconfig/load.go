// Package kubeletconfig reads the upstream kubelet's configuration file
// (KubeletConfiguration v1beta1) as the kubelet does: strictly decoded,
// defaulted with upstream's defaults (a zero value meaning the default,
// as kubeadm relies on), and validated. Each field is classified
// (fields.go): honoured, ignored with a warning, or refused at start
// naming the field; docs/config-fields.md is generated from that table.
// Command-line flags are the composition root's (cmd/nodelet/app): they
// are laid over the file before SetDefaults.
package kubeletconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// Load reads a KubeletConfiguration strictly: a wrong
// apiVersion or kind, or any unknown field, is an error.
func Load(path string) (*kubeletv1beta1.KubeletConfiguration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config file: %w", err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("config file %s is not valid YAML: %v", path, oneLine(err))
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(js, &head); err != nil {
		return nil, fmt.Errorf("config file %s: %v", path, oneLine(err))
	}
	if want := kubeletv1beta1.SchemeGroupVersion.String(); head.APIVersion != want || head.Kind != "KubeletConfiguration" {
		return nil, fmt.Errorf("config file %s: want apiVersion %s and kind KubeletConfiguration, got %q and %q", path, want, head.APIVersion, head.Kind)
	}
	cfg := &kubeletv1beta1.KubeletConfiguration{}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cfg); err != nil {
		return nil, fmt.Errorf("config file %s: %v", path, oneLine(err))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, fmt.Errorf("config file %s: %v", path, oneLine(err))
	}
	warnings, err := checkFields(raw)
	for _, w := range warnings {
		klog.Warningf("config file %s: %s", path, w)
	}
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return cfg, nil
}

func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// KubernetesVersion is the Kubernetes release whose kubelet nodelet
// replaces; feature gates and defaults are that release's.
const KubernetesVersion = "v1.37.2"
