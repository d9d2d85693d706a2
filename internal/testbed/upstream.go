package testbed

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// UpstreamKubelet is the upstream kubelet (built by hack/cluster/build.sh)
// run on a nodelet's node: the same node name, kubeconfig, root directory,
// runtime, pod log directory, cgroup root and ports, so that a test can
// move the node from one agent to the other.
type UpstreamKubelet struct {
	n          *Nodelet
	bin        string
	config     string
	healthz    int
	LogPath    string
	cmd        *exec.Cmd
	done       chan error
	clientCA   string
	cgroupRoot string
	// Verbosity is the log level (-v); 4 when 0, for the tests that read
	// its log. A benchmark sets 1, as a production node runs.
	Verbosity int
}

// NewUpstreamKubelet prepares the upstream kubelet for n's node; binDir
// holds the upstream binaries and clientCA verifies the API server's
// client certificate.
func NewUpstreamKubelet(n *Nodelet, binDir, clientCA string) *UpstreamKubelet {
	n.t.Helper()
	ports, err := freePorts(1)
	if err != nil {
		n.t.Fatal(err)
	}
	u := &UpstreamKubelet{n: n, bin: filepath.Join(binDir, "kubelet"), config: filepath.Join(n.Dir, "upstream.yaml"),
		healthz: ports[0], LogPath: filepath.Join(n.Dir, "upstream-kubelet.log"), clientCA: clientCA, cgroupRoot: n.opts.CgroupRoot}
	// The upstream kubelet needs its cgroup root to exist (nodelet creates
	// its own).
	for _, c := range []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "hugetlb", "systemd", "blkio", "devices", "freezer"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", c)); err == nil {
			if err := os.MkdirAll(filepath.Join("/sys/fs/cgroup", c, u.cgroupRoot), 0o755); err != nil {
				n.t.Fatal(err)
			}
		}
	}
	cfg := n.kubeletConfig(n.CD.Endpoint, "0.0.0.0", u.cgroupRoot) + fmt.Sprintf(`healthzPort: %d
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %s}
authorization: {mode: AlwaysAllow}
`, u.healthz, clientCA)
	if err := os.WriteFile(u.config, []byte(cfg), 0o644); err != nil {
		n.t.Fatal(err)
	}
	// Its log lives in the test's directory, which goes when the test
	// ends: a failed test keeps it beside nodelet's and containerd's.
	n.t.Cleanup(func() {
		if n.t.Failed() {
			if _, err := os.Stat(u.LogPath); err == nil {
				n.t.Logf("upstream kubelet log tail:\n%s", tail(u.Log(), 60))
				keepLogs(n.t, u.LogPath)
			}
		}
	})
	return u
}

// Start starts the upstream kubelet and waits for its /healthz; nodelet
// must be stopped.
func (u *UpstreamKubelet) Start() {
	t := u.n.t
	t.Helper()
	logf, err := os.OpenFile(u.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	v := u.Verbosity
	if v == 0 {
		v = 4
	}
	args := []string{"--config", u.config, "--root-dir", u.n.RootDir, "--hostname-override", u.n.NodeName, "-v", fmt.Sprint(v)}
	if u.n.opts.Kubeconfig != "" {
		args = append(args, "--kubeconfig", u.n.opts.Kubeconfig)
	}
	u.cmd = exec.Command(u.bin, args...)
	u.cmd.Stdout, u.cmd.Stderr = logf, logf
	u.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := u.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	u.done = done
	go func(cmd *exec.Cmd) { done <- cmd.Wait(); logf.Close() }(u.cmd)
	t.Cleanup(u.Stop)
	Eventually(t, 60*time.Second, func() (bool, string) {
		if u.Exited() {
			t.Fatalf("the upstream kubelet exited while starting; its log:\n%s", tail(u.Log(), 60))
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", u.healthz))
		if err != nil {
			return false, fmt.Sprintf("upstream kubelet not healthy: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("upstream kubelet healthz %d", resp.StatusCode)
	})
}

// Stop ends the upstream kubelet with SIGTERM (its pods keep running).
func (u *UpstreamKubelet) Stop() {
	if u.cmd == nil || u.cmd.Process == nil || u.Exited() {
		return
	}
	_ = u.cmd.Process.Signal(syscall.SIGTERM) // fails only when it has already exited
	select {
	case err := <-u.done:
		u.done <- err
	case <-time.After(20 * time.Second):
		_ = u.cmd.Process.Kill() // fails only when it has already exited
	}
}

// Exited reports whether the last started upstream kubelet has exited.
func (u *UpstreamKubelet) Exited() bool { return exited(u.done) }

// WaitLog waits until the upstream kubelet's log, from offset on,
// contains s (its -v 4 log: a benchmark's -v 1 logs less).
func (u *UpstreamKubelet) WaitLog(offset int, s string, timeout time.Duration) {
	t := u.n.t
	t.Helper()
	Eventually(t, timeout, func() (bool, string) {
		if log := u.Log(); len(log) > offset && strings.Contains(log[offset:], s) {
			return true, ""
		}
		return false, fmt.Sprintf("the upstream kubelet has not logged %s", s)
	})
}

// PID is the running upstream kubelet's process ID (0 before Start).
func (u *UpstreamKubelet) PID() int {
	if u.cmd == nil || u.cmd.Process == nil {
		return 0
	}
	return u.cmd.Process.Pid
}

// Log returns the upstream kubelet's log.
func (u *UpstreamKubelet) Log() string {
	b, _ := os.ReadFile(u.LogPath)
	return string(b)
}
