// Package testbed starts the real services integration tests run against:
// a private containerd (its own socket, root, state, configuration and CNI
// network, so tests never touch the node's pods), and nodelet itself as a
// subprocess. Everything it creates it removes again.
package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	containerdevents "github.com/containerd/containerd/api/services/events/v1"
	"github.com/moby/sys/mountinfo"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
)

// Image names the tests use; hack/mkimage builds them.
const (
	PauseImage   = "registry.k8s.io/pause:3.10"
	BusyboxImage = "docker.io/library/busybox:1.36"
	NonRootImage = "docker.io/library/busybox:nonroot"
	// GRPCHealthImage serves gRPC health (NOT_SERVING while /tmp/unhealthy exists).
	GRPCHealthImage = "nodelet.test/grpchealth:1"
)

// RepoRoot is the root of the nodelet source tree.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Containerd is a private containerd instance.
type Containerd struct {
	Dir      string
	Address  string
	Endpoint string
	CNIConf  string
	// RegistryConfig is containerd's hosts.toml directory.
	RegistryConfig string
	Network        string
	Bridge         string
	Subnet         string
	// Version is the runtime's version as it reports it (1.6.x, 2.4.x).
	Version string
	// CDIDir is where containerd 2.x reads CDI specs (1.6 has no CDI).
	CDIDir string

	cmd     *exec.Cmd
	logFile *os.File
	// bed, when set, is the systemd bed containerd runs in.
	bed *Systemd
	// gone is set once the bed it ran in has shut down: there is nothing
	// left to stop or remove.
	gone bool
	// releaseSubnet gives the pod subnet back at Stop.
	releaseSubnet func()
	cniBinDir     string
	conn          *grpc.ClientConn
	// Runtime and Images talk CRI to this containerd directly, so tests
	// can check what nodelet did without going through nodelet.
	Runtime runtimeapi.RuntimeServiceClient
	Images  runtimeapi.ImageServiceClient
	// Events is containerd's own event service.
	Events containerdevents.EventsClient
}

// StartContainerd starts a containerd that only this test process uses and
// imports the local images into it. It fails, never skips, when the
// machine is not set up: CI always is.
func StartContainerd(ctx context.Context) (*Containerd, error) { return StartContainerdN(ctx, 0) }

// StartContainerdN starts the index'th private containerd of this test
// process: each has its own socket, state, bridge and pod subnet, as the
// runtimes of separate nodes would.
func StartContainerdN(ctx context.Context, index int) (*Containerd, error) {
	return StartContainerdWith(ctx, index, ContainerdOptions{})
}

// ContainerdOptions tune a test containerd.
type ContainerdOptions struct {
	// CNIBinDir is where containerd finds its CNI plugins (a directory of
	// wrappers, say); /usr/lib/cni by default.
	CNIBinDir string
	// Systemd runs containerd inside a systemd bed, with runc placing
	// containers through systemd (SystemdCgroup). Its files are under /tmp
	// then, which the bed shares without an overlay (an overlay snapshot
	// cannot sit on an overlay).
	Systemd *Systemd
}

// StartContainerdWith starts the index'th private containerd of this test
// process with the options.
func StartContainerdWith(ctx context.Context, index int, opts ContainerdOptions) (*Containerd, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("integration tests need root (they run containerd)")
	}
	for _, bin := range []string{"containerd", "runc", "ctr"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("%s not found: run hack/setup.sh first", bin)
		}
	}
	if _, err := os.Stat(ImagesTar()); err != nil {
		return nil, fmt.Errorf("test images missing (%v): run hack/setup.sh first", err)
	}

	id := fmt.Sprintf("%d", os.Getpid())
	if index > 0 {
		id = fmt.Sprintf("%d-%d", os.Getpid(), index)
	}
	base := "/var/lib"
	if opts.Systemd != nil {
		base = os.TempDir()
	}
	dir, err := os.MkdirTemp(base, "nodelet-test-"+id+"-")
	if err != nil {
		return nil, err
	}
	// Searchable by every user, as /var/lib/containerd is: a pod in a
	// user namespace prepares its root filesystem below it as its own
	// (unprivileged) root.
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, err
	}
	c := &Containerd{
		Dir:            dir,
		Address:        filepath.Join(dir, "containerd.sock"),
		CNIConf:        filepath.Join(dir, "cni"),
		RegistryConfig: filepath.Join(dir, "certs.d"),
		CDIDir:         filepath.Join(dir, "cdi"),
		Network:        "nodelet-test-" + id,
		Bridge:         fmt.Sprintf("ntest%d-%d", os.Getpid()%100000, index),
		cniBinDir:      opts.CNIBinDir,
		bed:            opts.Systemd,
	}
	if c.cniBinDir == "" {
		c.cniBinDir = "/usr/lib/cni"
	}
	if c.Subnet, c.releaseSubnet, err = claimSubnet(); err != nil {
		return nil, err
	}
	c.Endpoint = "unix://" + c.Address
	if err := c.start(ctx); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	return c, nil
}

// runtimeVersionEnv selects the containerd the test bed runs: "1" (the
// default) is the host's (Debian's 1.6), "2" the containerd 2.x built
// from hack/containerd/tools.
const runtimeVersionEnv = "NODELET_TEST_CONTAINERD"

// containerdBinary returns the containerd to run, its config template,
// and a PATH under which it finds its own shim.
func containerdBinary() (bin, template, path string, err error) {
	hack := filepath.Join(RepoRoot(), "hack", "containerd")
	switch v := os.Getenv(runtimeVersionEnv); v {
	case "", "1":
		return "containerd", filepath.Join(hack, "config.toml.tmpl"), os.Getenv("PATH"), nil
	case "2":
		out, err := exec.Command("bash", filepath.Join(hack, "build.sh")).Output()
		if err != nil {
			return "", "", "", fmt.Errorf("building containerd 2.x: %w", err)
		}
		dir := strings.TrimSpace(string(out))
		return filepath.Join(dir, "containerd"), filepath.Join(hack, "config-v3.toml.tmpl"), dir + ":" + os.Getenv("PATH"), nil
	default:
		return "", "", "", fmt.Errorf("%s=%q: want 1 (the host's containerd) or 2 (containerd 2.x)", runtimeVersionEnv, v)
	}
}

func (c *Containerd) start(ctx context.Context) error {
	hack := filepath.Join(RepoRoot(), "hack", "containerd")
	bin, template, path, err := containerdBinary()
	if err != nil {
		return err
	}
	cfg, err := fill(template, map[string]string{
		"@ROOT@": filepath.Join(c.Dir, "root"), "@STATE@": filepath.Join(c.Dir, "state"),
		"@ADDRESS@": c.Address, "@CNI_CONF_DIR@": c.CNIConf, "@CNI_BIN_DIR@": c.cniBinDir,
		"@SANDBOX_IMAGE@": PauseImage, "@REGISTRY_CONFIG_DIR@": c.RegistryConfig, "@SYSTEMD_CGROUP@": strconv.FormatBool(c.bed != nil),
		"@CDI_DIR@": c.CDIDir,
	})
	if err != nil {
		return err
	}
	cni, err := fill(filepath.Join(hack, "cni.conflist.tmpl"), map[string]string{
		"@NETWORK@": c.Network, "@BRIDGE@": c.Bridge, "@SUBNET@": c.Subnet,
	})
	if err != nil {
		return err
	}
	for _, d := range []string{c.CNIConf, c.RegistryConfig, c.CDIDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	cfgPath := filepath.Join(c.Dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.CNIConf, "10-test.conflist"), []byte(cni), 0o644); err != nil {
		return err
	}
	if err := c.launch(ctx, bin, cfgPath, path); err != nil {
		return err
	}
	return c.ImportImages(ctx)
}

// launch runs containerd on its configuration and connects to it.
func (c *Containerd) launch(ctx context.Context, bin, cfgPath, path string) error {
	var err error
	c.logFile, err = os.OpenFile(filepath.Join(c.Dir, "containerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if c.bed != nil {
		c.cmd = c.bed.Command(context.Background(), bin, "--config", cfgPath)
	} else {
		c.cmd = exec.Command(bin, "--config", cfgPath)
	}
	c.cmd.Env = append(os.Environ(), "PATH="+path)
	c.cmd.Stdout, c.cmd.Stderr = c.logFile, c.logFile
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.cmd.Start(); err != nil {
		return fmt.Errorf("starting containerd: %w", err)
	}
	var v *runtimeapi.VersionResponse
	c.conn, v, err = kuberuntime.Dial(ctx, c.Endpoint, 30*time.Second)
	// The socket appears a moment after the process starts: under load
	// (every suite starting at once in make test) containerd 2.x once took
	// more than the 5 s this waited before.
	for deadline := time.Now().Add(time.Minute); err != nil && time.Now().Before(deadline) && ctx.Err() == nil; {
		time.Sleep(50 * time.Millisecond)
		c.conn, v, err = kuberuntime.Dial(ctx, c.Endpoint, 30*time.Second)
	}
	if err != nil {
		// The log goes with the directory when the bed is torn down: its
		// end is the only trace of why.
		return fmt.Errorf("containerd did not come up: %w; the end of its log:\n%s", err, logTail(c.logFile.Name(), 4096))
	}
	c.Version = v.RuntimeVersion
	c.Runtime = runtimeapi.NewRuntimeServiceClient(c.conn)
	c.Events = containerdevents.NewEventsClient(c.conn)
	c.Images = runtimeapi.NewImageServiceClient(c.conn)
	return nil
}

// logTail is the last n bytes of the file at path, or why it has none.
func logTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// pid is containerd's process: the one started, or in a systemd bed the
// one nsenter started.
func (c *Containerd) pid() int {
	if c.bed != nil {
		if child := childOf(c.cmd.Process.Pid); child != 0 {
			return child
		}
	}
	return c.cmd.Process.Pid
}

// WentDown records that the systemd bed containerd ran in shut down (a
// node shutdown test), and with it containerd and every pod.
func (c *Containerd) WentDown() {
	c.gone = true
	_ = c.cmd.Wait() // killed with the bed: its exit status says nothing
}

// Crash kills containerd with SIGKILL, as a crash would: its shims and
// their containers keep running.
func (c *Containerd) Crash() error {
	if err := syscall.Kill(c.pid(), syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing containerd: %w", err)
	}
	_ = c.cmd.Wait() // killed: its exit status says nothing
	c.conn.Close()
	return c.logFile.Close()
}

// Restart runs a crashed containerd again on the same state.
func (c *Containerd) Restart(ctx context.Context) error {
	bin, _, path, err := containerdBinary()
	if err != nil {
		return err
	}
	return c.launch(ctx, bin, filepath.Join(c.Dir, "config.toml"), path)
}

// ImagesTar is the docker archive of the local test images.
func ImagesTar() string { return filepath.Join(RepoRoot(), "_output", "images.tar") }

// ImportImages (re)imports the local test images, e.g. after a test let
// image garbage collection remove them.
func (c *Containerd) ImportImages(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, "ctr", "--address", c.Address, "-n", "k8s.io", "images", "import", ImagesTar()).CombinedOutput()
	if err != nil {
		return fmt.Errorf("importing images: %v: %s", err, out)
	}
	return nil
}

func fill(path string, kv map[string]string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := string(b)
	for k, v := range kv {
		s = strings.ReplaceAll(s, k, v)
	}
	return s, nil
}

// Sandboxes lists the sandboxes this containerd holds.
func (c *Containerd) Sandboxes(ctx context.Context) ([]*runtimeapi.PodSandbox, error) {
	r, err := c.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, err
	}
	return r.Items, nil
}

// SandboxHandler is the runtime handler containerd says the ready
// sandbox of the pod ns/name runs with: the CRI field of its status, or
// of its listing (containerd 1.6 fills only the latter).
func (c *Containerd) SandboxHandler(ctx context.Context, ns, name string) (string, error) {
	sbs, err := c.Sandboxes(ctx)
	if err != nil {
		return "", err
	}
	for _, sb := range sbs {
		md := sb.GetMetadata()
		if md.GetName() != name || md.GetNamespace() != ns || sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		st, err := c.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.Id})
		if err != nil {
			return "", err
		}
		if h := st.GetStatus().GetRuntimeHandler(); h != "" {
			return h, nil
		}
		return sb.RuntimeHandler, nil
	}
	return "", fmt.Errorf("no ready sandbox for %s/%s", ns, name)
}

// Containers lists the containers this containerd holds.
func (c *Containerd) Containers(ctx context.Context) ([]*runtimeapi.Container, error) {
	r, err := c.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, err
	}
	return r.Containers, nil
}

// RemoveAll stops and removes every sandbox (and with them every
// container), so the next test starts from an empty runtime. A stop the
// runtime is still finishing for a nodelet that just exited can fail
// transiently, so it tries again until nothing is left.
func (c *Containerd) RemoveAll(ctx context.Context) error {
	if c.gone {
		return nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.removeAllOnce(ctx)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond) // retry interval
	}
}

func (c *Containerd) removeAllOnce(ctx context.Context) error {
	sbs, err := c.Sandboxes(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, sb := range sbs {
		if _, err := c.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := c.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Stop removes every pod, stops containerd, and deletes its files, mounts,
// bridge and IP allocations.
func (c *Containerd) Stop() error {
	var errs []error
	if c.releaseSubnet != nil {
		defer c.releaseSubnet()
	}
	if c.Runtime != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		errs = append(errs, c.RemoveAll(ctx))
		cancel()
	}
	if c.conn != nil {
		c.conn.Close()
	}
	if c.cmd != nil && c.cmd.Process != nil && !c.gone {
		_ = syscall.Kill(c.pid(), syscall.SIGTERM) // fails only when it has already exited
		done := make(chan struct{})
		go func() {
			_ = c.cmd.Wait() // stopped by us: its exit status says nothing
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(c.pid(), syscall.SIGKILL) // fails only when it has already exited
			_ = c.cmd.Process.Kill()
			<-done
		}
	}
	if c.logFile != nil {
		c.logFile.Close()
	}
	errs = append(errs, unmountUnder(c.Dir))
	if out, err := exec.Command("ip", "link", "delete", c.Bridge).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") {
		errs = append(errs, fmt.Errorf("deleting bridge %s: %v: %s", c.Bridge, err, out))
	}
	if err := os.RemoveAll(filepath.Join("/var/lib/cni/networks", c.Network)); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// unmountUnder lazily unmounts everything mounted below dir, deepest first.
func unmountUnder(dir string) error {
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return err
	}
	var mounts []string
	for _, m := range infos {
		if m.Mountpoint != dir {
			mounts = append(mounts, m.Mountpoint)
		}
	}
	var errs []error
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := syscall.Unmount(mounts[i], syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mounts[i], err))
		}
	}
	return errors.Join(errs...)
}
