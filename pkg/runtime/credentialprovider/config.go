// Package credentialprovider runs the kubelet's image credential provider
// plugins (--image-credential-provider-config and
// --image-credential-provider-bin-dir): executables that hand out
// registry credentials for the images their matchImages globs cover, as
// cloud nodes get them for their private registries (ECR, ACR, Artifact
// Registry). The exchange is the credentialprovider.kubelet.k8s.io API
// over stdin and stdout; answers are cached per image, registry or
// globally, as the plugin says, for as long as it says.
package credentialprovider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	kubeletconfigv1 "k8s.io/kubelet/config/v1"
	"sigs.k8s.io/yaml"
)

// Accepted API versions: the configuration's, and the exchange's with a
// plugin. Each version has the same fields that nodelet reads.
var (
	configVersions = []string{"kubelet.config.k8s.io/v1", "kubelet.config.k8s.io/v1beta1", "kubelet.config.k8s.io/v1alpha1"}
	pluginVersions = []string{"credentialprovider.kubelet.k8s.io/v1", "credentialprovider.kubelet.k8s.io/v1beta1", "credentialprovider.kubelet.k8s.io/v1alpha1"}
)

// LoadConfig reads a CredentialProviderConfig file, or every .json,
// .yaml and .yml file of a directory in name order, as the kubelet does,
// and checks it; pluginDir must hold each provider's executable.
func LoadConfig(path, pluginDir string) ([]kubeletconfigv1.CredentialProvider, error) {
	files, err := configFiles(path)
	if err != nil {
		return nil, err
	}
	var providers []kubeletconfigv1.CredentialProvider
	for _, f := range files {
		ps, err := decodeConfig(f)
		if err != nil {
			return nil, err
		}
		providers = append(providers, ps...)
	}
	if len(providers) == 0 {
		return nil, fmt.Errorf("image credential provider config %s: no providers", path)
	}
	var errs []error
	seen := map[string]bool{}
	for _, p := range providers {
		if seen[p.Name] {
			errs = append(errs, fmt.Errorf("provider %q is named twice", p.Name))
		}
		seen[p.Name] = true
		errs = append(errs, validate(p, pluginDir))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("image credential provider config %s: %s", path, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return providers, nil
}

func configFiles(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("image credential provider config: %w", err)
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("image credential provider config: %w", err)
	}
	var files []string
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".json" || ext == ".yaml" || ext == ".yml") {
			files = append(files, filepath.Join(path, e.Name()))
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("image credential provider config: no .json, .yaml or .yml file in %s", path)
	}
	return files, nil // ReadDir sorts by name
}

// decodeConfig reads one file strictly: unknown fields are errors.
func decodeConfig(path string) ([]kubeletconfigv1.CredentialProvider, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("image credential provider config: %w", err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("image credential provider config %s is not valid YAML: %w", path, err)
	}
	var cfg kubeletconfigv1.CredentialProviderConfig
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("image credential provider config %s: %w", path, err)
	}
	if cfg.Kind != "CredentialProviderConfig" || !slices.Contains(configVersions, cfg.APIVersion) {
		return nil, fmt.Errorf("image credential provider config %s: want kind CredentialProviderConfig of %s, got %q of %q",
			path, strings.Join(configVersions, ", "), cfg.Kind, cfg.APIVersion)
	}
	return cfg.Providers, nil
}

// validate checks a provider as the kubelet does. Service account tokens
// for plugins (tokenAttributes) are not implemented: a provider asking
// for them is refused rather than run without them.
func validate(p kubeletconfigv1.CredentialProvider, pluginDir string) error {
	var errs []error
	if p.Name == "" || p.Name == "." || p.Name == ".." || strings.ContainsAny(p.Name, "/ ") {
		errs = append(errs, fmt.Errorf("provider name %q must be a file name in the plugin directory", p.Name))
	} else if info, err := os.Stat(filepath.Join(pluginDir, p.Name)); err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
		errs = append(errs, fmt.Errorf("provider %q: no executable %s in --image-credential-provider-bin-dir", p.Name, filepath.Join(pluginDir, p.Name)))
	}
	if !slices.Contains(pluginVersions, p.APIVersion) {
		errs = append(errs, fmt.Errorf("provider %q: apiVersion %q is not one of %s", p.Name, p.APIVersion, strings.Join(pluginVersions, ", ")))
	}
	if len(p.MatchImages) == 0 {
		errs = append(errs, fmt.Errorf("provider %q: matchImages needs at least one image", p.Name))
	}
	for _, m := range p.MatchImages {
		if _, err := url.Parse("https://" + m); err != nil || strings.Contains(m, "://") {
			errs = append(errs, fmt.Errorf("provider %q: matchImages %q is not a registry glob", p.Name, m))
		}
	}
	if p.DefaultCacheDuration == nil {
		errs = append(errs, fmt.Errorf("provider %q: defaultCacheDuration is required", p.Name))
	} else if p.DefaultCacheDuration.Duration < 0 {
		errs = append(errs, fmt.Errorf("provider %q: defaultCacheDuration must not be negative", p.Name))
	}
	if p.TokenAttributes != nil {
		errs = append(errs, fmt.Errorf("provider %q: tokenAttributes (service account tokens for plugins) is not supported by nodelet", p.Name))
	}
	return errors.Join(errs...)
}
