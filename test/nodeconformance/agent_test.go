//go:build integration

package nodeconformance

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testbed"
)

// healthzURL is where upstream's launcher, and this test, wait for the
// agent (the kubelet's default healthz port).
const healthzURL = "http://127.0.0.1:10248/healthz"

// agent is the node agent under test, nodelet or the upstream kubelet.
type agent struct {
	name string
	// bin is the agent's binary; binDir holds it as "kubelet", where
	// upstream's launcher looks for the kubelet (beside the suite's
	// binary).
	bin, binDir string
	suite       string
	cd          *testbed.Containerd
	t           *testing.T
	logPath     string
	cmd         *exec.Cmd
	done        chan error
}

func newAgent(t *testing.T, name, suite string, cd *testbed.Containerd) *agent {
	t.Helper()
	a := &agent{name: name, suite: suite, cd: cd, t: t, binDir: t.TempDir()}
	switch name {
	case "nodelet":
		bin, err := testbed.ReleaseBinary()
		if err != nil {
			t.Fatal(err)
		}
		a.bin = bin
	case "upstream":
		out, err := exec.Command("bash", filepath.Join(testbed.RepoRoot(), "hack", "cluster", "build.sh")).Output()
		if err != nil {
			t.Fatalf("hack/cluster/build.sh: %v", err)
		}
		a.bin = filepath.Join(strings.TrimSpace(string(out)), "kubelet")
	default:
		t.Fatalf("-conformance.agent=%q: want nodelet or upstream", name)
	}
	if err := os.Symlink(a.bin, filepath.Join(a.binDir, "kubelet")); err != nil {
		t.Fatal(err)
	}
	// The node's pods go with the run: stop the agent, then the runtime
	// removes every sandbox (containerd's Stop), then the pods' cgroups
	// go (startRuntime's clean-ups, which run after this one).
	t.Cleanup(a.stop)
	return a
}

// baseConfig is the suite's kubelet configuration
// (test/e2e_node/jenkins/default-kubelet-config.yaml) and what this host
// needs on top: it is a cgroup v1 host, which v1.35 and later refuse
// unless told (so does nodelet).
func (a *agent) baseConfig() string {
	b, err := os.ReadFile(filepath.Join(a.suite, "default-kubelet-config.yaml"))
	if err != nil {
		a.t.Fatal(err)
	}
	return string(b) + "\nfailCgroupV1: false\n"
}

// harnessArgs are the suite's flags that have its launcher start this
// agent (harness mode), or none.
func (a *agent) harnessArgs(work string) []string {
	if *modeFlag != "harness" {
		return nil
	}
	path := filepath.Join(work, "base-kubelet-config.yaml")
	if err := os.WriteFile(path, []byte(a.baseConfig()), 0o644); err != nil {
		a.t.Fatal(err)
	}
	a.logPath = filepath.Join(work, "report", "kubelet.log")
	return []string{"--kubelet-config-file=" + path}
}

// suiteBinary is the suite's test binary as the run starts it: in harness
// mode from the agent's directory, where the suite's launcher looks for
// "kubelet" beside it (its --k8s-bin-dir belongs to upstream's runner,
// not to the test binary).
func (a *agent) suiteBinary() string {
	bin := filepath.Join(a.suite, "e2e_node.test")
	if *modeFlag != "harness" {
		return bin
	}
	link := filepath.Join(a.binDir, "e2e_node.test")
	if err := os.Symlink(bin, link); err != nil && !os.IsExist(err) {
		a.t.Fatal(err)
	}
	return link
}

// start runs the agent against the suite's API server with the settings
// upstream's launcher gives the kubelet (anonymous AlwaysAllow access to
// its API, the read-only port, a static pod directory of the run's own),
// and waits for its /healthz.
func (a *agent) start(t *testing.T, work, token string) {
	t.Helper()
	kubeconfig := filepath.Join(work, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
users:
- name: kubelet
  user: {token: %s}
clusters:
- cluster: {server: %s, insecure-skip-tls-verify: true}
  name: local
contexts:
- context: {cluster: local, user: kubelet}
  name: local-context
current-context: local-context
`, token, apiServer)), 0o600); err != nil {
		t.Fatal(err)
	}
	static := filepath.Join(work, "static-pods")
	if err := os.MkdirAll(static, 0o755); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(work, "kubelet-config")
	if err := os.WriteFile(config, []byte(a.baseConfig()+fmt.Sprintf(`authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
readOnlyPort: 10255
staticPodPath: %s
`, static)), 0o644); err != nil {
		t.Fatal(err)
	}
	a.logPath = filepath.Join(work, a.name+".log")
	logf, err := os.Create(a.logPath)
	if err != nil {
		t.Fatal(err)
	}
	a.cmd = exec.Command(a.bin, "--config", config, "--kubeconfig", kubeconfig, "--root-dir", rootDir, "--v", "4",
		"--container-runtime-endpoint", a.cd.Endpoint)
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.done = make(chan error, 1)
	go func() { a.done <- a.cmd.Wait(); logf.Close() }()
	testbed.Eventually(t, 2*time.Minute, func() (bool, string) {
		select {
		case err := <-a.done:
			a.done <- err
			a.keepLogs()
			t.Fatalf("%s exited while starting (%v); its log's end:\n%s", a.name, err, tail(a.logPath, 40))
		default:
		}
		resp, err := http.Get(healthzURL)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("healthz %d", resp.StatusCode)
	})
	t.Logf("%s started (log: %s)", a.name, a.logPath)
}

// stop ends the agent this test started (SIGTERM, as a service stop).
func (a *agent) stop() {
	if a.cmd == nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
		<-a.done
	}
}

// keepLogs keeps the agent's and the runtime's logs past the test.
func (a *agent) keepLogs() {
	if a.logPath != "" {
		testbed.KeepLogs(a.t, a.logPath, filepath.Join(a.cd.Dir, "containerd.log"))
	}
}
