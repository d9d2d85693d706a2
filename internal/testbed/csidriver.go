package testbed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/csitest"
	"github.com/nodelet/nodelet/pkg/resources/pluginwatcher"
)

// CSIDriverOptions say which test CSI driver to run.
type CSIDriverOptions struct {
	Name string
	// RegistryDir is the node's plugins_registry directory.
	RegistryDir string
	// Dir holds the driver's socket, backing directory, call log and
	// output; a short path, as unix socket paths are limited to 108 bytes.
	Dir string
	// Stage gives the driver STAGE_UNSTAGE_VOLUME.
	Stage bool
}

// CSIDriver is the test CSI driver (test/csidriver) running as its own
// process, as a node plugin's container runs beside the kubelet.
type CSIDriver struct {
	o       CSIDriverOptions
	Backing string
	callLog string
	regSock string
	cmd     *exec.Cmd
	done    chan error
}

// StartCSIDriver runs the driver and returns once its registration
// socket is there for the node to find.
func StartCSIDriver(o CSIDriverOptions) (*CSIDriver, error) {
	d := &CSIDriver{o: o, Backing: filepath.Join(o.Dir, "backing"), callLog: filepath.Join(o.Dir, "calls"),
		regSock: filepath.Join(o.RegistryDir, o.Name+"-reg.sock")}
	return d, d.Start()
}

// Start runs the driver process (again, after Stop).
func (d *CSIDriver) Start() error {
	bin, err := GoBinary("./test/csidriver")
	if err != nil {
		return err
	}
	out, err := os.OpenFile(filepath.Join(d.o.Dir, "driver.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	d.cmd = exec.Command(bin, "-name", d.o.Name, "-registry-dir", d.o.RegistryDir, "-dir", d.o.Dir,
		"-call-log", d.callLog, "-stage="+strconv.FormatBool(d.o.Stage))
	d.cmd.Stdout, d.cmd.Stderr = out, out
	if err := d.cmd.Start(); err != nil {
		return err
	}
	d.done = make(chan error, 1)
	go func(cmd *exec.Cmd, done chan error) { done <- cmd.Wait() }(d.cmd, d.done)
	return d.waitRegistered()
}

// waitRegistered waits for the registration socket, the driver's last
// step in starting; a driver that exits first has failed.
func (d *CSIDriver) waitRegistered() error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(d.regSock); err == nil {
			return nil
		}
		select {
		case err := <-d.done:
			d.done <- err
			return fmt.Errorf("the CSI driver exited (%v): %s", err, d.Output())
		case <-time.After(20 * time.Millisecond): // polling the file system
		}
	}
	return fmt.Errorf("the CSI driver did not register within 30s: %s", d.Output())
}

// Stop ends the driver with SIGTERM, as its pod's deletion would: it
// removes its sockets, which deregisters it.
func (d *CSIDriver) Stop() error {
	if d.cmd == nil {
		return nil
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		d.done <- err
		d.cmd = nil
		return err
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		return fmt.Errorf("the CSI driver ignored SIGTERM for 30s")
	}
}

// Calls lists the node calls the driver served, in order, over all its
// runs ("NodePublishVolume vol").
func (d *CSIDriver) Calls() []string { return csitest.ReadCallLog(d.callLog) }

// Output is what the driver printed.
func (d *CSIDriver) Output() string {
	b, _ := os.ReadFile(filepath.Join(d.o.Dir, "driver.log"))
	return string(b)
}

// StartNodeCSIDriver runs the test CSI driver for a node, registering in
// its plugins_registry, and stops it when the test ends. Its sockets go
// in a short directory: unix socket paths are limited to 108 bytes.
func StartNodeCSIDriver(t testing.TB, n *Nodelet, name string, stage bool) *CSIDriver {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "csi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// A driver may come before nodelet made the registration directory
	// (node-driver-registrar's is a hostPath volume that makes it).
	registry := pluginwatcher.Dir(n.RootDir)
	if err := os.MkdirAll(registry, 0o750); err != nil {
		t.Fatal(err)
	}
	drv, err := StartCSIDriver(CSIDriverOptions{Name: name, RegistryDir: registry, Dir: dir, Stage: stage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := drv.Stop(); err != nil {
			t.Errorf("stopping the CSI driver: %v\n%s", err, drv.Output())
		}
	})
	return drv
}

// MarkAttached plays a CSI driver's attacher: once the attach/detach
// controller made the VolumeAttachment, it is marked attached.
func (c *Cluster) MarkAttached(t testing.TB, name string) {
	t.Helper()
	vas := c.Client.StorageV1().VolumeAttachments()
	Eventually(t, 2*time.Minute, func() (bool, string) {
		va, err := vas.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, "the attach/detach controller made no VolumeAttachment: " + err.Error()
		}
		va.Status.Attached = true
		_, err = vas.UpdateStatus(context.Background(), va, metav1.UpdateOptions{})
		return err == nil, fmt.Sprintf("marking it attached: %v", err)
	})
}
