package credentialprovider

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1 "k8s.io/kubelet/config/v1"
	testingclock "k8s.io/utils/clock/testing"
)

// fakePlugin writes an executable plugin into dir that logs each request
// (with its arguments and GREETING) to dir/requests and answers with
// dir/response.
func fakePlugin(t *testing.T, dir, name, response string) {
	t.Helper()
	script := `#!/bin/sh
{ cat; echo " args=$* greeting=$GREETING"; } >> "$(dirname "$0")/requests"
cat "$(dirname "$0")/response"
`
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	setResponse(t, dir, response)
}

func setResponse(t *testing.T, dir, response string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "response"), []byte(response), 0o644); err != nil {
		t.Fatal(err)
	}
}

func requests(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "requests"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

const answer = `{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse",
"cacheKeyType":"%s",%s"auth":{"*.registry.example":{"username":"u","password":"p"}}}`

func response(keyType, duration string) string {
	if duration != "" {
		duration = `"cacheDuration":"` + duration + `",`
	}
	return strings.Replace(strings.Replace(answer, "%s", keyType, 1), "%s", duration, 1)
}

func provider(name string, match ...string) kubeletconfigv1.CredentialProvider {
	return kubeletconfigv1.CredentialProvider{Name: name, MatchImages: match, APIVersion: "credentialprovider.kubelet.k8s.io/v1",
		DefaultCacheDuration: &metav1.Duration{Duration: time.Minute}, Args: []string{"--flag"},
		Env: []kubeletconfigv1.ExecEnvVar{{Name: "GREETING", Value: "hi"}}}
}

// TestPluginExchange: a plugin runs only for images its matchImages
// cover, gets the repository, its arguments and environment, and its
// credentials come back with their glob.
func TestPluginExchange(t *testing.T) {
	dir := t.TempDir()
	fakePlugin(t, dir, "ecr", response("Image", "0s"))
	p := New(Options{Providers: []kubeletconfigv1.CredentialProvider{provider("ecr", "*.registry.example")}, PluginDir: dir, Clock: testingclock.NewFakeClock(time.Now())})
	ctx := context.Background()
	if auth, err := p.Credentials(ctx, "docker.io/library/busybox"); err != nil || len(auth) != 0 || len(requests(t, dir)) != 0 {
		t.Fatalf("an image no glob covers: %v %v, requests %v", auth, err, requests(t, dir))
	}
	auth, err := p.Credentials(ctx, "eu.registry.example/team/app")
	if err != nil || len(auth) != 1 || auth[0] != (Auth{Glob: "*.registry.example", Username: "u", Password: "p"}) {
		t.Fatalf("credentials %v %v", auth, err)
	}
	reqs := requests(t, dir)
	if len(reqs) != 1 || !strings.Contains(reqs[0], `"image":"eu.registry.example/team/app"`) ||
		!strings.Contains(reqs[0], `"kind":"CredentialProviderRequest"`) || !strings.Contains(reqs[0], "args=--flag greeting=hi") {
		t.Fatalf("requests %q", reqs)
	}
}

// TestPluginCache: answers are cached under the image, the registry or
// globally for the duration the plugin gives (its default without one;
// none for 0), and run again once it has passed.
func TestPluginCache(t *testing.T) {
	for _, tc := range []struct {
		keyType, duration string
		// runs after asking for a, a again, b in the same registry, and c
		// elsewhere, all within the TTL
		runs int
	}{
		{"Image", "", 3},
		{"Registry", "", 2},
		{"Global", "", 1},
		{"Image", "0s", 4},
	} {
		dir := t.TempDir()
		fakePlugin(t, dir, "p", response(tc.keyType, tc.duration))
		clk := testingclock.NewFakeClock(time.Now())
		p := New(Options{Providers: []kubeletconfigv1.CredentialProvider{provider("p", "*.registry.example")}, PluginDir: dir, Clock: clk})
		for _, repo := range []string{"a.registry.example/x", "a.registry.example/x", "a.registry.example/y", "b.registry.example/x"} {
			if _, err := p.Credentials(context.Background(), repo); err != nil {
				t.Fatal(err)
			}
		}
		if got := len(requests(t, dir)); got != tc.runs {
			t.Errorf("%s/%q: %d runs, want %d", tc.keyType, tc.duration, got, tc.runs)
		}
		clk.Step(time.Minute)
		before := len(requests(t, dir))
		if _, err := p.Credentials(context.Background(), "a.registry.example/x"); err != nil {
			t.Fatal(err)
		}
		if len(requests(t, dir)) != before+1 {
			t.Errorf("%s/%q: an expired answer was used", tc.keyType, tc.duration)
		}
	}
}

// TestPluginFailures: a failing plugin, one that answers another
// apiVersion or an unknown cacheKeyType, gives no credentials and an
// error naming it; the other plugins still answer.
func TestPluginFailures(t *testing.T) {
	for name, resp := range map[string]string{
		"exit":        "",
		"apiVersion":  strings.Replace(response("Image", ""), "/v1", "/v1beta1", 1),
		"keyType":     response("Pod", ""),
		"not-json":    "credentials please",
		"extra-field": strings.Replace(response("Image", ""), `"auth"`, `"token":"x","auth"`, 1),
	} {
		dir := t.TempDir()
		fakePlugin(t, dir, "good", response("Image", ""))
		bad := filepath.Join(dir, "bad")
		script := "#!/bin/sh\necho '" + resp + "'\n"
		if name == "exit" {
			script = "#!/bin/sh\necho broken >&2\nexit 3\n"
		}
		if err := os.WriteFile(bad, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		p := New(Options{Providers: []kubeletconfigv1.CredentialProvider{provider("bad", "*.registry.example"), provider("good", "*.registry.example")},
			PluginDir: dir, Clock: testingclock.NewFakeClock(time.Now())})
		auth, err := p.Credentials(context.Background(), "a.registry.example/x")
		if err == nil || !strings.Contains(err.Error(), "credential provider bad") || len(auth) != 1 {
			t.Errorf("%s: %v %v", name, auth, err)
		}
	}
}

// TestLoadConfig: a file or a directory of files; every mistake the
// kubelet refuses is refused, naming the provider, and so are
// tokenAttributes, which nodelet does not implement.
func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	fakePlugin(t, bin, "ecr", "")
	fakePlugin(t, bin, "gcr", "")
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const head = "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n"
	const ecr = "- name: ecr\n  matchImages: ['*.dkr.ecr.*.amazonaws.com']\n  defaultCacheDuration: 12h\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n"
	good := write("good.yaml", head+ecr)
	ps, err := LoadConfig(good, bin)
	if err != nil || len(ps) != 1 || ps[0].DefaultCacheDuration.Duration != 12*time.Hour {
		t.Fatalf("LoadConfig: %v %+v", err, ps)
	}
	confDir := filepath.Join(dir, "conf.d")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"10-ecr.yaml": head + ecr, "20-gcr.json": `{"apiVersion":"kubelet.config.k8s.io/v1","kind":"CredentialProviderConfig","providers":[{"name":"gcr","matchImages":["gcr.io"],"defaultCacheDuration":"1m","apiVersion":"credentialprovider.kubelet.k8s.io/v1"}]}`, "README": "not config"} {
		if err := os.WriteFile(filepath.Join(confDir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if ps, err := LoadConfig(confDir, bin); err != nil || len(ps) != 2 || ps[0].Name != "ecr" || ps[1].Name != "gcr" {
		t.Fatalf("directory: %v %+v", err, ps)
	}
	for body, want := range map[string]string{
		head + ecr + ecr: `"ecr" is named twice`,
		head + strings.Replace(ecr, "ecr\n", "missing\n", 1):                                       "no executable",
		head + strings.Replace(ecr, "  defaultCacheDuration: 12h\n", "", 1):                        "defaultCacheDuration is required",
		head + strings.Replace(ecr, "provider.kubelet.k8s.io/v1", "provider.kubelet.k8s.io/v2", 1): "apiVersion",
		head + ecr + "  tokenAttributes: {serviceAccountTokenAudience: x, cacheType: Token}\n":     "tokenAttributes",
		head + ecr + "  matchImage: typo\n":                                                        "unknown field",
		head + strings.Replace(ecr, "  matchImages: ['*.dkr.ecr.*.amazonaws.com']\n", "", 1):       "matchImages",
		strings.Replace(head, "CredentialProviderConfig", "KubeletConfiguration", 1) + ecr:         "CredentialProviderConfig",
		head + strings.Replace(ecr, "name: ecr", "name: ../ecr", 1):                                "file name",
	} {
		if _, err := LoadConfig(write("bad.yaml", body), bin); err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: error %v, want one line containing %q", body, err, want)
		}
	}
}

// TestMatch: registry globs as the kubelet matches them.
func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		glob, image string
		want        bool
	}{
		{"*.dkr.ecr.*.amazonaws.com", "123.dkr.ecr.eu-west-1.amazonaws.com/app", true},
		{"*.dkr.ecr.*.amazonaws.com", "dkr.ecr.eu-west-1.amazonaws.com/app", false},
		{"registry.example:5000", "registry.example:5000/app", true},
		{"registry.example:5000", "registry.example/app", false},
		{"registry.example/team", "registry.example/team/app", true},
		{"registry.example/team", "registry.example/teamster/app", false},
		{"index.docker.io", "docker.io/library/busybox", true},
	} {
		host, path, _ := strings.Cut(tc.image, "/")
		if got, _ := Match(tc.glob, host, path); got != tc.want {
			t.Errorf("Match(%q, %q) = %v", tc.glob, tc.image, got)
		}
	}
}
