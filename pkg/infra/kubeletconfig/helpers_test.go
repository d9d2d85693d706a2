package kubeletconfig

import (
	"os"
	"path/filepath"
	"testing"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// loadDefaulted is what nodelet does with a config file and no flags.
func loadDefaulted(path string) (*kubeletv1beta1.KubeletConfiguration, error) {
	c, err := Load(path)
	if err != nil {
		return nil, err
	}
	SetDefaults(c)
	return c, Validate(c)
}

func defaulted() (*kubeletv1beta1.KubeletConfiguration, error) {
	c := &kubeletv1beta1.KubeletConfiguration{}
	SetDefaults(c)
	return c, Validate(c)
}
