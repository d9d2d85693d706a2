// Command up runs a one-node cluster on this machine: etcd and the
// upstream control plane on loopback ports, and nodelet joined to it as
// the node, on the machine's containerd, with the example static pods.
// It runs until interrupted; then nodelet and the control plane stop
// (pods keep running, as with the kubelet; `make clean-pods` removes
// them).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/opencontainers/cgroups"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

func main() {
	dataDir := flag.String("data-dir", "/var/lib/nodelet-cluster", "control plane data (recreated on every start)")
	rootDir := flag.String("root-dir", "/var/lib/nodelet", "nodelet's --root-dir")
	manifests := flag.String("manifests", filepath.Join(testbed.RepoRoot(), "examples"), "static pod manifests")
	flag.Parse()
	if err := run(*dataDir, *rootDir, *manifests); err != nil {
		fmt.Fprintln(os.Stderr, "cluster-up:", err)
		os.Exit(1)
	}
}

func run(dataDir, rootDir, manifests string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := filepath.Join(testbed.RepoRoot(), "_output")
	if err := os.RemoveAll(dataDir); err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	fmt.Println("cluster-up: starting etcd, kube-apiserver, kube-controller-manager and kube-scheduler (logs in " + dataDir + ")")
	cl, err := testbed.StartCluster(ctx, dataDir)
	if err != nil {
		return err
	}
	defer cl.Stop()
	admin := filepath.Join(out, "admin.kubeconfig")
	b, err := os.ReadFile(cl.AdminKubeconfig)
	if err != nil {
		return err
	}
	if err := os.WriteFile(admin, b, 0o600); err != nil {
		return err
	}
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	nodeName := strings.ToLower(host)
	kubeconfig, err := cl.NodeKubeconfig(nodeName)
	if err != nil {
		return err
	}
	logPath := filepath.Join(out, "nodelet.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	// The API server's client certificate (kubectl logs, exec, port-forward
	// go through it) is signed by the cluster CA.
	args := []string{"--kubeconfig", kubeconfig, "--client-ca-file", cl.CAFile(), "--pod-manifest-path", manifests, "--root-dir", rootDir, "--hostname-override", nodeName, "-v=2"}
	if !cgroups.IsCgroup2UnifiedMode() {
		fmt.Println("cluster-up: this host uses cgroup v1; running nodelet with --fail-cgroupv1=false")
		args = append(args, "--fail-cgroupv1=false")
	}
	cmd := exec.Command(filepath.Join(out, "nodelet"), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting nodelet: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-done
		fmt.Println("cluster-up: nodelet and the control plane stopped; pods keep running (make clean-pods removes them)")
	}()
	fmt.Printf("cluster-up: nodelet runs as node %s (log: %s)\n", nodeName, logPath)
	if err := waitReady(ctx, cl, nodeName, done); err != nil {
		return err
	}
	fmt.Printf(`
cluster-up: node %s is Ready. Try:
    export KUBECONFIG=%s
    kubectl get nodes -o wide
    kubectl get pods -A -o wide          (the example static pods' mirror pods)
    kubectl run hello --image %s --image-pull-policy=IfNotPresent -- sleep 3600
    kubectl describe pod hello
Ctrl-C stops nodelet and the control plane.
`, nodeName, admin, testbed.BusyboxImage)
	select {
	case <-ctx.Done():
		return nil
	case err := <-done:
		done <- err
		return fmt.Errorf("nodelet exited: %v; see %s", err, logPath)
	}
}

func waitReady(ctx context.Context, cl *testbed.Cluster, name string, exited <-chan error) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("nodelet exited: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond): // poll interval
		}
		n, err := cl.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
				return nil
			}
		}
	}
	return fmt.Errorf("node %s did not become Ready within a minute", name)
}
