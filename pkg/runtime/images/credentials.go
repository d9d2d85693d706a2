package images

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/pkg/runtime/credentialprovider"
)

// dockerConfigEntry is one registry's credentials in a docker config.
type dockerConfigEntry struct {
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	Auth     string `json:"auth,omitempty"`
	Email    string `json:"email,omitempty"`
}

// credentials are a docker config's entries by registry key.
type credentials map[string]dockerConfigEntry

// parseDockerConfig reads either format: config.json ({"auths": {...}},
// the kubernetes.io/dockerconfigjson secret) or .dockercfg (the bare map,
// the kubernetes.io/dockercfg secret).
func parseDockerConfig(data []byte) (credentials, error) {
	var wrapped struct {
		Auths credentials `json:"auths"`
	}
	if err := json.Unmarshal(data, &wrapped); err == nil && wrapped.Auths != nil {
		return wrapped.Auths.decoded()
	}
	var bare credentials
	if err := json.Unmarshal(data, &bare); err != nil {
		return nil, fmt.Errorf("not a docker config: %w", err)
	}
	return bare.decoded()
}

// decoded fills in username and password from the base64 "auth" field.
func (c credentials) decoded() (credentials, error) {
	out := credentials{}
	for k, e := range c {
		if e.Auth != "" && (e.Username == "" || e.Password == "") {
			raw, err := base64.StdEncoding.DecodeString(e.Auth)
			if err != nil {
				return nil, fmt.Errorf("credentials for %s: auth is not base64: %w", k, err)
			}
			user, pass, ok := strings.Cut(string(raw), ":")
			if !ok {
				return nil, fmt.Errorf("credentials for %s: auth is not user:password", k)
			}
			e.Username, e.Password = user, pass
		}
		out[k] = e
	}
	return out, nil
}

// secretCreds are a pull secret's credentials and the secret they came
// from, to record which secret pulled an image.
type secretCreds struct {
	creds  credentials
	secret kubeletv1beta1.ImagePullSecret
}

// secretCredentials reads the docker configs of pull secrets; other
// secrets are ignored.
func secretCredentials(secrets []v1.Secret) []secretCreds {
	var out []secretCreds
	for _, s := range secrets {
		var data []byte
		switch s.Type {
		case v1.SecretTypeDockerConfigJson:
			data = s.Data[v1.DockerConfigJsonKey]
		case v1.SecretTypeDockercfg:
			data = s.Data[v1.DockerConfigKey]
		default:
			continue
		}
		c, err := parseDockerConfig(data)
		if err != nil {
			klog.InfoS("Ignoring an unreadable image pull secret", "secret", klog.KRef(s.Namespace, s.Name), "err", err)
			continue
		}
		out = append(out, secretCreds{creds: c, secret: kubeletv1beta1.ImagePullSecret{
			UID: string(s.UID), Namespace: s.Namespace, Name: s.Name, CredentialHash: fmt.Sprintf("%x", sha256.Sum256(data))}})
	}
	return out
}

// secretIDs are the identities of a pod's pull secrets.
func secretIDs(secrets []secretCreds) []kubeletv1beta1.ImagePullSecret {
	out := make([]kubeletv1beta1.ImagePullSecret, 0, len(secrets))
	for _, s := range secrets {
		out = append(out, s.secret)
	}
	return out
}

// nodeKeyringPaths are where the kubelet looks for the node's own
// registry credentials, in order.
func nodeKeyringPaths(rootDir string) []string {
	paths := []string{filepath.Join(rootDir, "config.json"), filepath.Join(rootDir, ".dockercfg")}
	if home, err := os.UserHomeDir(); err == nil {
		paths = append(paths, filepath.Join(home, ".docker", "config.json"), filepath.Join(home, ".dockercfg"))
	}
	return paths
}

// nodeCredentials reads the node's keyring files, fresh on every pull so
// a fixed file takes effect without a restart.
func nodeCredentials(rootDir string) []credentials {
	if rootDir == "" {
		return nil
	}
	var out []credentials
	for _, p := range nodeKeyringPaths(rootDir) {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		c, err := parseDockerConfig(data)
		if err != nil {
			klog.InfoS("Ignoring an unreadable registry credentials file", "path", p, "err", err)
			continue
		}
		out = append(out, c)
	}
	return out
}

// pluginCredentials turns the credential plugins' answers into docker
// config entries.
func pluginCredentials(auth []credentialprovider.Auth) credentials {
	out := credentials{}
	for _, a := range auth {
		out[a.Glob] = dockerConfigEntry{Username: a.Username, Password: a.Password}
	}
	return out
}

// authOption is one set of credentials to try and whose they are.
type authOption struct {
	auth *runtimeapi.AuthConfig
	by   puller
}

// authConfigs lists the credentials to try for an image: those of the
// pod's pull secrets, then the node's (its keyring files and credential
// plugins), each most specific first. None means an anonymous pull.
func authConfigs(image string, secrets []secretCreds, node []credentials) []authOption {
	host, path, ok := credentialprovider.Repository(image)
	if !ok {
		return nil
	}
	type match struct {
		score int
		opt   authOption
	}
	var out []authOption
	nodeGroup := make([]secretCreds, 0, len(node))
	for _, c := range node {
		nodeGroup = append(nodeGroup, secretCreds{creds: c})
	}
	for gi, group := range [][]secretCreds{secrets, nodeGroup} {
		var ms []match
		for _, sc := range group {
			by := puller{node: true}
			if gi == 0 {
				by = puller{secret: &sc.secret}
			}
			for key, e := range sc.creds {
				if ok, score := credentialprovider.Match(key, host, path); ok {
					// ServerAddress stays empty: containerd 1.6 parses it as
					// a URL and rejects "host:port", and drops credentials
					// whose address lacks a scheme. The match above already
					// tied them to this image.
					ms = append(ms, match{score, authOption{&runtimeapi.AuthConfig{Username: e.Username, Password: e.Password}, by}})
				}
			}
		}
		sort.SliceStable(ms, func(i, j int) bool { return ms[i].score > ms[j].score })
		for _, m := range ms {
			out = append(out, m.opt)
		}
	}
	return out
}
