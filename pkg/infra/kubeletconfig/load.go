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
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// Load reads a KubeletConfiguration strictly: a wrong
// apiVersion or kind, or any unknown field, is an error.
func Load(path string) (*kubeletv1beta1.KubeletConfiguration, error) {
	return LoadWithDropIns(path, "")
}

// DropInExtension is the extension of the drop-in files of --config-dir;
// others are skipped, as upstream skips them.
const DropInExtension = ".conf"

// LoadWithDropIns reads the config file (none when path is "") and lays
// the drop-in files of dir (none when "") over it as upstream's kubelet
// does: every file named *.conf in dir and below, in lexical order, each a
// KubeletConfiguration merged as a JSON merge patch (RFC 7386: a field it
// sets replaces the file's, a map merges, null removes). Each file is
// read strictly, and the fields the result sets are checked against the
// field table, whichever file set them.
func LoadWithDropIns(path, dir string) (*kubeletv1beta1.KubeletConfiguration, error) {
	merged := []byte("{}")
	var err error
	if path != "" {
		if merged, err = readConfigJSON(path); err != nil {
			return nil, err
		}
	}
	from := path
	if dir != "" {
		dropIns, err := dropInFiles(dir)
		if err != nil {
			return nil, err
		}
		for _, f := range dropIns {
			js, err := readConfigJSON(f)
			if err != nil {
				return nil, err
			}
			if merged, err = jsonpatch.MergePatch(merged, js); err != nil {
				return nil, fmt.Errorf("merging the drop-in %s: %v", f, oneLine(err))
			}
		}
		if len(dropIns) > 0 {
			from = fmt.Sprintf("%s with the drop-ins of %s", path, dir)
		}
	}
	cfg := &kubeletv1beta1.KubeletConfiguration{}
	if err := decodeStrict(merged, cfg); err != nil {
		return nil, fmt.Errorf("config %s: %v", from, oneLine(err))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(merged, &raw); err != nil {
		return nil, fmt.Errorf("config %s: %v", from, oneLine(err))
	}
	// The merged document's own apiVersion and kind are the files'.
	delete(raw, "apiVersion")
	delete(raw, "kind")
	warnings, err := checkFields(raw)
	for _, w := range warnings {
		klog.Warningf("config %s: %s", from, w)
	}
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", from, err)
	}
	return cfg, nil
}

// readConfigJSON reads one configuration file as JSON, checking that it is
// a KubeletConfiguration v1beta1 and that every field it sets exists.
func readConfigJSON(path string) ([]byte, error) {
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
	if err := decodeStrict(js, &kubeletv1beta1.KubeletConfiguration{}); err != nil {
		return nil, fmt.Errorf("config file %s: %v", path, oneLine(err))
	}
	return js, nil
}

func decodeStrict(js []byte, cfg *kubeletv1beta1.KubeletConfiguration) error {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	return dec.Decode(cfg)
}

// dropInFiles lists the drop-ins of dir in the order they apply: a walk
// of dir in lexical order (subdirectories included), files named *.conf.
// Other files are logged and skipped, as upstream skips them.
func dropInFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir():
			return nil
		case filepath.Ext(d.Name()) != DropInExtension:
			klog.InfoS("Skipping a file of the config drop-in directory: only *.conf files are read", "file", p)
			return nil
		}
		files = append(files, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the config drop-in directory %s: %w", dir, err)
	}
	return files, nil
}

func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// KubernetesVersion is the Kubernetes release whose kubelet nodelet
// replaces; feature gates and defaults are that release's.
const KubernetesVersion = "v1.37.2"
