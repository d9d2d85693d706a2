package testbed

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// NodeletBinary builds nodelet once per test process and returns its path.
// Failpoints are compiled in: the fault tests wedge and kill nodelet at
// chosen steps (pkg/infra/failpoint).
func NodeletBinary() (string, error) {
	return GoBinary("./cmd/nodelet", "failpoints")
}

// ReleaseBinary builds nodelet as make build ships it, without
// failpoints, once per test process: what the benchmarks measure (a
// failpoint build reads a file at every point it passes).
func ReleaseBinary() (string, error) {
	return GoBinary("./cmd/nodelet")
}

var (
	buildMu sync.Mutex
	built   = map[string]builtBinary{}
)

type builtBinary struct {
	path string
	err  error
}

// GoBinary builds a main package of this repository (with the race
// detector when the tests have it) once per test process, and returns
// its path.
func GoBinary(pkg string, tags ...string) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	key := strings.Join(append([]string{pkg}, tags...), " ")
	if b, ok := built[key]; ok {
		return b.path, b.err
	}
	b := buildGo(pkg, tags)
	built[key] = b
	return b.path, b.err
}

// removeBinaries removes what GoBinary built (100 MB a nodelet with the
// race detector), once the tests that ran it are over.
func removeBinaries() {
	buildMu.Lock()
	defer buildMu.Unlock()
	for key, b := range built {
		if b.path != "" {
			RemoveDir(filepath.Dir(b.path))
		}
		delete(built, key)
	}
}

func buildGo(pkg string, tags []string) builtBinary {
	dir, err := os.MkdirTemp("", filepath.Base(pkg)+"-bin-")
	if err != nil {
		return builtBinary{err: err}
	}
	path := filepath.Join(dir, filepath.Base(pkg))
	// Built as make build does (stripped), so the footprint measured is
	// the one shipped. Only link flags: -trimpath would compile every
	// dependency again rather than share the tests' build cache (in a
	// cold CI run, minutes per test package on 2 cores).
	args := []string{"build", "-ldflags=-s -w", "-o", path}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return builtBinary{err: fmt.Errorf("building %s: %v: %s", pkg, err, out)}
	}
	return builtBinary{path: path}
}

// NodeletOptions tune a test nodelet.
type NodeletOptions struct {
	NodeName string
	// ExtraConfig is appended to the generated KubeletConfiguration.
	ExtraConfig string
	// Args are extra command-line flags.
	Args []string
	// Kubeconfig runs nodelet in cluster mode.
	Kubeconfig string
	// CgroupRoot overrides CgroupRoot(): nodes sharing the machine each
	// need their own.
	CgroupRoot string
	// Address is where nodelet serves (default 127.0.0.1); the API server
	// reaches a node at its InternalIP.
	Address string
	// RuntimeEndpoint overrides the containerd's socket (a CRIProxy's).
	RuntimeEndpoint string
	// Systemd runs nodelet inside a systemd bed (give it that bed's
	// containerd).
	Systemd *Systemd
	// Config, when set, is the whole KubeletConfiguration instead of the
	// generated one (ExtraConfig is still appended); /healthz is then
	// asked at HealthzURL.
	Config     string
	HealthzURL string
	// Release runs the build make build ships (ReleaseBinary), for the
	// benchmarks; Failpoint fails the test on it.
	Release bool
}

// Failpoint makes nodelet act at the named point of pkg/infra/failpoint
// ("pause", "kill" or "panic") from now on; ClearFailpoint ends it.
func (n *Nodelet) Failpoint(name, action string) {
	n.t.Helper()
	if n.opts.Release {
		n.t.Fatalf("failpoint %s: this nodelet is a release build, which has none", name)
	}
	if err := os.WriteFile(filepath.Join(n.failpoints(), name), []byte(action), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

// ClearFailpoint ends a failpoint (a paused point goes on).
func (n *Nodelet) ClearFailpoint(name string) {
	n.t.Helper()
	if err := os.Remove(filepath.Join(n.failpoints(), name)); err != nil && !os.IsNotExist(err) {
		n.t.Fatal(err)
	}
}

func (n *Nodelet) failpoints() string { return filepath.Join(n.Dir, "failpoints") }

// Nodelet is a nodelet process under test.
type Nodelet struct {
	t         testing.TB
	CD        *Containerd
	Dir       string
	Manifests string
	RootDir   string
	LogsDir   string
	Config    string
	NodeName  string
	// Port is the read-only port; APIPort the kubelet API's.
	Port    int
	APIPort int
	LogPath string

	opts NodeletOptions
	cmd  *exec.Cmd
	done chan error
}

// StartNodelet runs nodelet against cd, reading manifests from a fresh
// directory, and stops it (and removes every pod) when the test ends.
func StartNodelet(t testing.TB, cd *Containerd, opts NodeletOptions) *Nodelet {
	t.Helper()
	dir := t.TempDir()
	if opts.NodeName == "" {
		opts.NodeName = "node1"
	}
	n := &Nodelet{
		t: t, CD: cd, Dir: dir, Manifests: filepath.Join(dir, "manifests"), RootDir: filepath.Join(dir, "root"),
		LogsDir: filepath.Join(dir, "pod-logs"), Config: filepath.Join(dir, "config.yaml"),
		NodeName: opts.NodeName, LogPath: filepath.Join(dir, "nodelet.log"), opts: opts,
	}
	for _, d := range []string{n.Manifests, n.failpoints()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ports, err := freePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	n.Port, n.APIPort = ports[0], ports[1]
	if opts.Address == "" {
		opts.Address = "127.0.0.1"
	}
	if opts.CgroupRoot == "" {
		opts.CgroupRoot = CgroupRoot()
	}
	if opts.Kubeconfig != "" {
		n.opts.Args = append([]string{"--kubeconfig", opts.Kubeconfig}, opts.Args...)
	}
	// Test nodelets share the host: none takes the fixed /healthz port.
	// CI's hosts run cgroup v1, which upstream's default refuses.
	endpoint := cd.Endpoint
	if opts.RuntimeEndpoint != "" {
		endpoint = opts.RuntimeEndpoint
	}
	cfg := n.kubeletConfig(endpoint, opts.Address, opts.CgroupRoot) + "healthzPort: 0\nfailCgroupV1: false\n" + opts.ExtraConfig
	if opts.Config != "" {
		cfg = opts.Config + opts.ExtraConfig
	}
	if err := os.WriteFile(n.Config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// The clean-up is registered first: a nodelet that fails its start-up
	// check (t.Fatal in Start) must still be stopped, or it would go on
	// managing the shared containerd's pods beside the next test's.
	t.Cleanup(func() {
		n.Stop()
		// Three minutes: a containerd 1.6 beside the other runtime's
		// suites took more than one to stop a test's pods.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := cd.RemoveAll(ctx); err != nil {
			t.Errorf("removing pods: %v", err)
		}
		// A stopped nodelet leaves its pods' volumes mounted (stopping
		// never tears pods down); the test's directory goes with them.
		if err := unmountUnder(dir); err != nil {
			t.Errorf("unmounting volumes: %v", err)
		}
		// A test that failed half way left its pods' cgroups (a stopped
		// nodelet removes none); the next test's leak check would
		// report them as its own. A passing test checked for them
		// itself, and tests in a process never run in parallel.
		if t.Failed() {
			removeCgroupRoot(opts.CgroupRoot)
		}
		if strings.Contains(n.Log(), "WARNING: DATA RACE") {
			t.Errorf("the race detector found a data race in nodelet; see %s", n.LogPath)
			t.Log(n.Log())
		}
		if t.Failed() {
			t.Logf("nodelet log tail:\n%s", n.LogTail(60))
			n.KeepLogs()
		}
	})
	n.Start()
	return n
}

// KeepLogs copies nodelet's and containerd's logs to keptLogsDir, as a
// failed test's are, for a run that passes but is to be read.
func (n *Nodelet) KeepLogs() {
	keepLogs(n.t, n.LogPath, filepath.Join(n.CD.Dir, "containerd.log"))
}

// keptLogsDir is where a failed test's nodelet and containerd logs are
// copied: its own directories go when it ends.
const keptLogsDir = "/var/tmp/nodelet-test-logs"

// KeepLogs copies files of a test (logs, reports) where they outlive it,
// as a failed test's nodelet and containerd logs are.
func KeepLogs(t testing.TB, paths ...string) { keepLogs(t, paths...) }

// keepLogs copies the logs of a failed test where they outlive it.
func keepLogs(t testing.TB, paths ...string) {
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	dir := filepath.Join(keptLogsDir, fmt.Sprintf("%s-%d", name, time.Now().Unix()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("keeping the logs: %v", err)
		return
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, filepath.Base(p)), data, 0o644)
		}
		if err != nil {
			t.Logf("keeping %s: %v", p, err)
		}
	}
	t.Logf("logs kept in %s", dir)
}

// CgroupRoot is where the test process's nodelets put pod cgroups, so
// they never see (and never remove) the node's own pods' cgroups.
func CgroupRoot() string { return fmt.Sprintf("/nodelet-test-%d", os.Getpid()) }

// Start (re)starts the nodelet process and waits for /healthz.
func (n *Nodelet) Start() {
	n.t.Helper()
	build := NodeletBinary
	if n.opts.Release {
		build = ReleaseBinary
	}
	bin, err := build()
	if err != nil {
		n.t.Fatal(err)
	}
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	args := append([]string{"--config", n.Config, "--root-dir", n.RootDir, "--hostname-override", n.NodeName, "-v", "4"}, n.opts.Args...)
	if n.opts.Systemd != nil {
		n.cmd = n.opts.Systemd.Command(context.Background(), bin, args...)
	} else {
		n.cmd = exec.Command(bin, args...)
	}
	n.cmd.Env = append(os.Environ(), "NODELET_FAILPOINTS_DIR="+n.failpoints())
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	// The goroutine owns its channel: a later Start replaces n.done.
	done := make(chan error, 1)
	n.done = done
	go func(cmd *exec.Cmd) {
		done <- cmd.Wait()
		logf.Close()
	}(n.cmd)
	Eventually(n.t, 30*time.Second, func() (bool, string) {
		if n.Exited() {
			return true, ""
		}
		err := n.Healthz()
		return err == nil, fmt.Sprintf("nodelet not healthy: %v", err)
	})
	if n.Exited() {
		n.t.Fatalf("nodelet exited at start-up:\n%s", n.LogTail(30))
	}
}

// Exited reports whether the process has ended.
func (n *Nodelet) Exited() bool {
	if n.cmd == nil || n.cmd.Process == nil {
		return true
	}
	// Only the channel says so: cmd.ProcessState is written by Wait in
	// another goroutine.
	return n.peekDone()
}

func (n *Nodelet) peekDone() bool { return exited(n.done) }

// exited reports whether the process whose Wait result done carries (a
// channel of one, filled once) has ended, leaving the result for the
// next reader.
func exited(done chan error) bool {
	select {
	case err := <-done:
		done <- err
		return true
	default:
		return false
	}
}

// ExitError is how the process ended (nil: exit status 0); it waits for
// the end.
func (n *Nodelet) ExitError() error {
	err := <-n.done
	n.done <- err
	return err
}

// PID is the nodelet process's ID, 0 when it is not running.
func (n *Nodelet) PID() int {
	if n.Exited() {
		return 0
	}
	return n.pid()
}

// pid is nodelet's process: the one started, or in a systemd bed the one
// nsenter started.
func (n *Nodelet) pid() int {
	if n.opts.Systemd != nil {
		if child := childOf(n.cmd.Process.Pid); child != 0 {
			return child
		}
	}
	return n.cmd.Process.Pid
}

// AddArgs adds command-line flags for the next Start.
func (n *Nodelet) AddArgs(args ...string) { n.opts.Args = append(n.opts.Args, args...) }

// Stop ends nodelet with SIGTERM: pods keep running (a node shutdown
// comes from logind, not from a signal).
func (n *Nodelet) Stop() { n.signal(syscall.SIGTERM) }

// Kill ends nodelet with SIGKILL, as a crash would.
func (n *Nodelet) Kill() { n.signal(syscall.SIGKILL) }

func (n *Nodelet) signal(sig syscall.Signal) {
	if n.cmd == nil || n.cmd.Process == nil || n.peekDone() {
		return
	}
	_ = syscall.Kill(n.pid(), sig) // fails only when it has already exited
	var err error
	select {
	case err = <-n.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(n.pid(), syscall.SIGKILL) // fails only when it has already exited
		_ = n.cmd.Process.Kill()
		err = <-n.done
	}
	n.done <- err // kept for whoever asks how it ended
}

// Healthz queries /healthz.
func (n *Nodelet) Healthz() error {
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", n.Port)
	if n.opts.HealthzURL != "" {
		url = n.opts.HealthzURL
	}
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz: HTTP %d", resp.StatusCode)
	}
	return nil
}

// kubeletConfig is the KubeletConfiguration both nodelet and the
// upstream kubelet run this node with: its manifests, runtime, logs and
// ports.
func (n *Nodelet) kubeletConfig(endpoint, address, cgroupRoot string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: %s
containerRuntimeEndpoint: %s
podLogsDir: %s
readOnlyPort: %d
port: %d
address: %s
cgroupRoot: %s
`, n.Manifests, endpoint, n.LogsDir, n.Port, n.APIPort, address, cgroupRoot)
}

// Pods returns what /pods reports.
func (n *Nodelet) Pods() ([]v1.Pod, error) {
	return FetchPods(fmt.Sprintf("http://127.0.0.1:%d/pods", n.Port))
}

// FetchPods reads a pod list from a kubelet's /pods.
func FetchPods(url string) ([]v1.Pod, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var list v1.PodList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// Pod returns the pod /pods reports under a manifest's name (nodelet
// suffixes static pod names with the node name).
func (n *Nodelet) Pod(name string) (*v1.Pod, error) {
	pods, err := n.Pods()
	if err != nil {
		return nil, err
	}
	for i := range pods {
		if pods[i].Name == n.PodName(name) {
			return &pods[i], nil
		}
	}
	return nil, nil
}

// PodName is the name nodelet gives a static pod named name.
func (n *Nodelet) PodName(name string) string { return name + "-" + n.NodeName }

// WriteManifest writes a manifest file atomically (write, then rename),
// as careful tools do.
func (n *Nodelet) WriteManifest(file, content string) {
	n.t.Helper()
	tmp := filepath.Join(n.Manifests, "."+file+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		n.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(n.Manifests, file)); err != nil {
		n.t.Fatal(err)
	}
}

// RemoveManifest deletes a manifest file.
func (n *Nodelet) RemoveManifest(file string) {
	n.t.Helper()
	if err := os.Remove(filepath.Join(n.Manifests, file)); err != nil {
		n.t.Fatal(err)
	}
}

// Log returns everything nodelet logged.
func (n *Nodelet) Log() string {
	b, _ := os.ReadFile(n.LogPath)
	return string(b)
}

// LogTail returns the last lines nodelet logged.
func (n *Nodelet) LogTail(lines int) string { return tail(n.Log(), lines) }

// tail is the last lines of a log.
func tail(log string, lines int) string {
	all := strings.Split(strings.TrimRight(log, "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// RuntimeContainers lists the containers the runtime holds for a static
// pod (by its manifest name).
func (n *Nodelet) RuntimeContainers(name string) []*runtimeapi.Container {
	n.t.Helper()
	return n.PodContainers(n.PodName(name))
}

// PodContainers lists the containers the runtime holds for the pod with
// the (full API) name.
func (n *Nodelet) PodContainers(podName string) []*runtimeapi.Container {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := n.CD.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.name": podName},
	}})
	if err != nil {
		n.t.Fatal(err)
	}
	return r.Containers
}

// RuntimeSandboxes lists the sandboxes the runtime holds for a static pod.
func (n *Nodelet) RuntimeSandboxes(name string) []*runtimeapi.PodSandbox {
	n.t.Helper()
	return n.PodSandboxes(n.PodName(name))
}

// PodSandboxes lists the sandboxes the runtime holds for the pod with the
// (full API) name.
func (n *Nodelet) PodSandboxes(podName string) []*runtimeapi.PodSandbox {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := n.CD.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.name": podName},
	}})
	if err != nil {
		n.t.Fatal(err)
	}
	return r.Items
}

// RunningContainer returns the running container named cname of a static
// pod, or nil.
func (n *Nodelet) RunningContainer(pod, cname string) *runtimeapi.Container {
	return n.RunningPodContainer(n.PodName(pod), cname)
}

// RunningPodContainer returns the running container named cname of the
// pod with the (full API) name, or nil.
func (n *Nodelet) RunningPodContainer(podName, cname string) *runtimeapi.Container {
	for _, c := range n.PodContainers(podName) {
		if c.GetMetadata().GetName() == cname && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			return c
		}
	}
	return nil
}

// Exec runs a command in a container and returns its stdout.
func (n *Nodelet) Exec(id string, cmd ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := n.CD.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: 10})
	if err != nil {
		return "", err
	}
	if r.ExitCode != 0 {
		return string(r.Stdout), fmt.Errorf("exit %d: %s", r.ExitCode, bytes.TrimSpace(r.Stderr))
	}
	return string(r.Stdout), nil
}

// Eventually polls cond every 50 ms until it holds or the timeout passes;
// on timeout the test fails with cond's last message.
func Eventually(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var msg string
	for {
		var ok bool
		ok, msg = cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v: %s", timeout, msg)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// MarksLog reads the words a test's pods appended to dir/log (a hostPath
// their containers share with the test), in order.
func MarksLog(dir string) []string {
	b, _ := os.ReadFile(filepath.Join(dir, "log"))
	return strings.Fields(string(b))
}
