package testbed

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nodelet/nodelet/pkg/resources/pluginwatcher"
)

// Peer is one of upstream's own test programs (hack/cluster/build.sh
// caches them beside the control plane) running beside a test nodelet,
// as a device plugin's or DRA driver's pod runs beside the kubelet: the
// reference peer the nodelet is tested against, never a stand-in.
type Peer struct {
	name string
	argv []string
	env  []string
	log  string
	cmd  *exec.Cmd
	done chan error
}

// startPeer runs argv (argv[0] a path) logging to <dir>/<name>.log, and
// stops it when the test ends.
func startPeer(t testing.TB, name, dir string, env []string, argv ...string) *Peer {
	t.Helper()
	p := &Peer{name: name, argv: argv, env: env, log: filepath.Join(dir, name+".log")}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("stopping %s: %v", name, err)
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.Output())
		}
	})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	return p
}

// Start runs the program (again, after Stop).
func (p *Peer) Start() error {
	out, err := os.OpenFile(p.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	fmt.Fprintf(out, "--- %s starts: %q\n", p.name, p.argv)
	p.cmd = exec.Command(p.argv[0], p.argv[1:]...)
	p.cmd.Env = append(os.Environ(), p.env...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	// Killed with the test process, should it die first.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	p.done = make(chan error, 1)
	go func(cmd *exec.Cmd, done chan error) { done <- cmd.Wait() }(p.cmd, p.done)
	return nil
}

// Stop ends the program with SIGTERM, as its pod's deletion would (both
// peers remove their sockets then), and waits for it.
func (p *Peer) Stop() error {
	if p.cmd == nil {
		return nil
	}
	defer func() { p.cmd = nil }()
	_ = p.cmd.Process.Signal(syscall.SIGTERM) // fails only when it has already exited
	select {
	case <-p.done:
		return nil // how a stopped peer exits is its own business
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s ignored SIGTERM for 30s", p.name)
	}
}

// Exited reports whether the program has ended by itself.
func (p *Peer) Exited() bool {
	return p.cmd == nil || exited(p.done)
}

// Output is what the program printed, over all its runs.
func (p *Peer) Output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// upstreamBinary is a program hack/cluster/build.sh caches.
func upstreamBinary(name string) (string, error) {
	dir, err := ClusterBinaries()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, name), nil
}

// samplePluginScript gives upstream's sample device plugin, which only
// knows the fixed paths, the node's directories in a mount namespace of
// its own: <root>/device-plugins on /var/lib/kubelet/device-plugins, and
// the runtime's CDI directory on /var/run/cdi (where it writes the CDI
// spec of its devices). Tmpfs over /run and /var/lib first, so the host's
// are never written.
const samplePluginScript = `set -e
mount -t tmpfs tmpfs /run
mkdir /run/cdi
mount --bind "$1" /run/cdi
mount -t tmpfs tmpfs /var/lib
mkdir -p /var/lib/kubelet/device-plugins
mount --bind "$2" /var/lib/kubelet/device-plugins
exec "$3"`

// StartSampleDevicePlugin runs upstream's sample device plugin
// (test/images/sample-device-plugin) for node n, with CDI on: it offers
// two devices of example.com/resource (Dev-1 and Dev-2); an allocated
// device is a mount of /tmp/Dev-N and a CDI device (env CDI_DEVICE, a
// device node /tmp/CDI-Dev-N). It registers once n's registration
// socket is there, and again whenever n makes it anew.
func StartSampleDevicePlugin(t testing.TB, n *Nodelet) *Peer {
	t.Helper()
	bin, err := upstreamBinary("sample-device-plugin")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(n.RootDir, "device-plugins")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	// It registers at once, and panics when nobody listens.
	Eventually(t, 30*time.Second, func() (bool, string) {
		_, err := os.Stat(filepath.Join(dir, "kubelet.sock"))
		return err == nil, fmt.Sprintf("no registration socket: %v", err)
	})
	// Its fake device files are the host's /tmp/Dev-N (a mount's host
	// path must exist where the runtime is).
	t.Cleanup(func() {
		for _, dev := range []string{"/tmp/Dev-1", "/tmp/Dev-2"} {
			_ = os.Remove(dev)
		}
	})
	return startPeer(t, "sample-device-plugin", n.Dir, []string{"CDI_ENABLED=1"},
		"unshare", "--mount", "--propagation", "private", "sh", "-c", samplePluginScript, "sh", n.CD.CDIDir, dir, bin)
}

// draTestDriver is the DRA test driver's name.
const draTestDriver = "test-driver.cdi.k8s.io"

// StartDRATestDriver runs upstream's DRA test driver
// (test/e2e/dra/test-driver) as node n's kubelet plugin
// (test-driver.cdi.k8s.io): it publishes the node's ResourceSlice (four
// devices) with kubeconfig's identity, registers in n's plugins_registry,
// and writes the CDI specs of prepared claims in the runtime's CDI
// directory: each gives the container the env claim_<claim>_<request>=true.
func StartDRATestDriver(t testing.TB, n *Nodelet, kubeconfig string) *Peer {
	t.Helper()
	bin, err := upstreamBinary("dra-test-driver")
	if err != nil {
		t.Fatal(err)
	}
	// Its socket directory, which the driver's pod has as a hostPath
	// volume of type DirectoryOrCreate.
	plugins := filepath.Join(n.RootDir, "plugins")
	if err := os.MkdirAll(filepath.Join(plugins, draTestDriver), 0o750); err != nil {
		t.Fatal(err)
	}
	return startPeer(t, "dra-test-driver", n.Dir, nil, bin, "--kubeconfig", kubeconfig, "-v", "5",
		"kubelet-plugin", "--node-name", n.NodeName, "--plugin-registration-path", pluginwatcher.Dir(n.RootDir),
		"--datadir", plugins, "--cdi-dir", n.CD.CDIDir)
}
