package kubeletconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Drop-ins merge over the file as upstream merges them: in lexical order
// of their paths (subdirectories included), as JSON merge patches (a map
// merges key by key, null removes a field), only *.conf files.
func TestDropInsMergeInLexicalOrder(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "config.yaml")
	writeFile(t, base, header+"maxPods: 7\nsyncFrequency: 30s\nevictionHard:\n  memory.available: 100Mi\n  nodefs.available: 10%\nkubeAPIQPS: 12\n")
	d := filepath.Join(dir, "conf.d")
	writeFile(t, filepath.Join(d, "20-last.conf"), header+"maxPods: 30\n")
	writeFile(t, filepath.Join(d, "10-first.conf"), header+"maxPods: 20\nevictionHard:\n  memory.available: 250Mi\nkubeAPIQPS: null\n")
	writeFile(t, filepath.Join(d, "15-sub", "a.conf"), header+"fileCheckFrequency: 5s\n")
	writeFile(t, filepath.Join(d, "99-ignored.yaml"), header+"maxPods: 99\n")
	cfg, err := LoadWithDropIns(base, d)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxPods != 30 {
		t.Errorf("maxPods %d, want the last drop-in's 30 (the .yaml file is not a drop-in)", cfg.MaxPods)
	}
	if cfg.SyncFrequency.Duration.String() != "30s" || cfg.FileCheckFrequency.Duration.String() != "5s" {
		t.Errorf("syncFrequency %v (the file's), fileCheckFrequency %v (a subdirectory's drop-in)", cfg.SyncFrequency.Duration, cfg.FileCheckFrequency.Duration)
	}
	if got := cfg.EvictionHard; got["memory.available"] != "250Mi" || got["nodefs.available"] != "10%" {
		t.Errorf("evictionHard %v: the drop-in's key should replace the file's, the other key stay", got)
	}
	if cfg.KubeAPIQPS != nil {
		t.Errorf("kubeAPIQPS %v: null in a drop-in removes the file's value", *cfg.KubeAPIQPS)
	}
}

// A drop-in is checked as strictly as the file: its kind, its fields, and
// the field table (a refused setting fails wherever it is set).
func TestDropInErrorsNameTheFile(t *testing.T) {
	for name, body := range map[string]string{
		"wrong kind":     "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: Other\n",
		"no apiVersion":  "maxPods: 3\n",
		"unknown field":  header + "maxPodz: 3\n",
		"refused field":  header + "runOnce: true\n",
		"not valid YAML": header + "maxPods: [\n",
	} {
		t.Run(name, func(t *testing.T) {
			d := t.TempDir()
			f := filepath.Join(d, "50-bad.conf")
			writeFile(t, f, body)
			_, err := LoadWithDropIns("", d)
			if err == nil {
				t.Fatal("accepted")
			}
			if name != "refused field" && !strings.Contains(err.Error(), f) {
				t.Fatalf("error %q does not name %s", err, f)
			}
			if name == "refused field" && !strings.Contains(err.Error(), "runOnce") {
				t.Fatalf("error %q does not name the field", err)
			}
		})
	}
	if _, err := LoadWithDropIns("", filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "drop-in directory") {
		t.Fatalf("a missing drop-in directory: %v", err)
	}
}
