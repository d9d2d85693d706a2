//go:build integration

package cluster

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// kubeadmNode is a node set up as kubeadm join leaves one, inside a
// systemd bed: kubeadm's KubeletConfiguration in /var/lib/kubelet, its
// bootstrap kubeconfig and the cluster CA in /etc/kubernetes, its flags in
// kubeadm-flags.env, and containerd with SystemdCgroup as its runtime.
type kubeadmNode struct {
	t    *testing.T
	name string
	bed  *testbed.Systemd
	cd   *testbed.Containerd
	dir  string
}

// kubeadmConfig is the KubeletConfiguration kubeadm v1.37 generates.
func kubeadmConfig(t *testing.T) []byte {
	t.Helper()
	out, err := exec.Command(filepath.Join(cl.BinDir, "kubeadm"), "config", "print", "init-defaults", "--component-configs", "KubeletConfiguration").Output()
	if err != nil {
		t.Fatalf("kubeadm config print: %v", err)
	}
	docs := bytes.Split(out, []byte("\n---\n"))
	for _, d := range docs {
		if bytes.Contains(d, []byte("kind: KubeletConfiguration")) {
			return append(bytes.TrimSpace(d), '\n')
		}
	}
	t.Fatalf("kubeadm printed no KubeletConfiguration:\n%s", out)
	return nil
}

func newKubeadmNode(t *testing.T, name string, index int) *kubeadmNode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bed, err := testbed.StartSystemd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k := &kubeadmNode{t: t, name: name, bed: bed, dir: t.TempDir()}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("journal of the node agents:\n%s%s", tail(bed.Journal(context.Background(), "kubelet"), 40), tail(bed.Journal(context.Background(), "nodelet"), 60))
		}
		_, _ = bed.Systemctl(context.Background(), "stop", "nodelet", "kubelet") // reported by the checks
		if err := cl.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting node %s: %v", name, err)
		}
		if k.cd != nil {
			if err := k.cd.Stop(); err != nil {
				t.Error(err)
			}
		}
		if strings.Contains(bed.Journal(context.Background(), "nodelet"), "WARNING: DATA RACE") {
			t.Error("the race detector found a data race in nodelet")
		}
		if err := bed.Stop(); err != nil {
			t.Error(err)
		}
	})
	if k.cd, err = testbed.StartContainerdWith(ctx, index, testbed.ContainerdOptions{Systemd: bed}); err != nil {
		t.Fatal(err)
	}
	boot, err := cl.BootstrapKubeconfig(ctx, "bootstrap-"+name+".conf")
	if err != nil {
		t.Fatal(err)
	}
	// This host runs cgroup v1, which kubeadm's configuration (upstream's
	// default) refuses: the administrator's override file says otherwise.
	flags := fmt.Sprintf("KUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint=%s --hostname-override=%s\"\n", k.cd.Endpoint, name)
	for dst, data := range map[string][]byte{
		"/var/lib/kubelet/config.yaml":           kubeadmConfig(t),
		"/var/lib/kubelet/kubeadm-flags.env":     []byte(flags),
		"/etc/default/kubelet":                   []byte("KUBELET_EXTRA_ARGS=--fail-cgroupv1=false\n"),
		"/etc/kubernetes/bootstrap-kubelet.conf": must(os.ReadFile(boot)),
		"/etc/kubernetes/pki/ca.crt":             must(os.ReadFile(cl.CAFile())),
		"/etc/kubernetes/manifests/.keep":        nil,
	} {
		if err := bed.InstallData(ctx, k.dir, data, dst, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-lines):], "\n") + "\n"
}

// installNodelet installs nodelet's binary and its systemd unit and
// kubeadm drop-in as the package would.
func (k *kubeadmNode) installNodelet() {
	k.t.Helper()
	ctx := context.Background()
	bin, err := testbed.NodeletBinary()
	if err != nil {
		k.t.Fatal(err)
	}
	deploy := filepath.Join(testbed.RepoRoot(), "deploy", "systemd")
	for src, dst := range map[string]string{
		bin:                                      "/usr/bin/nodelet",
		filepath.Join(deploy, "nodelet.service"): "/usr/lib/systemd/system/nodelet.service",
		filepath.Join(deploy, "nodelet.service.d", "10-kubeadm.conf"): "/usr/lib/systemd/system/nodelet.service.d/10-kubeadm.conf",
	} {
		mode := os.FileMode(0o644)
		if dst == "/usr/bin/nodelet" {
			mode = 0o755
		}
		if err := k.bed.Install(ctx, src, dst, mode); err != nil {
			k.t.Fatal(err)
		}
	}
}

// installKubelet installs the upstream kubelet with its package's unit
// and kubeadm's drop-in.
func (k *kubeadmNode) installKubelet() {
	k.t.Helper()
	ctx := context.Background()
	for src, dst := range map[string]string{
		filepath.Join(cl.BinDir, "kubelet"):          "/usr/bin/kubelet",
		"testdata/kubelet.service":                   "/usr/lib/systemd/system/kubelet.service",
		"testdata/kubelet.service.d/10-kubeadm.conf": "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf",
	} {
		abs, err := filepath.Abs(src)
		if err != nil {
			k.t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if dst == "/usr/bin/kubelet" {
			mode = 0o755
		}
		if err := k.bed.Install(ctx, abs, dst, mode); err != nil {
			k.t.Fatal(err)
		}
	}
}

func (k *kubeadmNode) systemctl(args ...string) {
	k.t.Helper()
	if out, err := k.bed.Systemctl(context.Background(), args...); err != nil {
		k.t.Fatalf("%v: %s", err, out)
	}
}

// clientCSRs are the node's client certificate requests (the bootstrap
// one is made by the bootstrap token's user).
func clientCSRs(t *testing.T, name string) []certificatesv1.CertificateSigningRequest {
	t.Helper()
	list, err := cl.Client.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []certificatesv1.CertificateSigningRequest
	for _, c := range list.Items {
		if c.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName && csrFor(c, name) {
			out = append(out, c)
		}
	}
	return out
}

// csrFor reports whether a CSR asks for node name's identity.
func csrFor(c certificatesv1.CertificateSigningRequest, name string) bool {
	req, err := csrRequest(c)
	return err == nil && req.Subject.CommonName == "system:node:"+name
}

// csrRequest is a CSR's certificate request.
func csrRequest(c certificatesv1.CertificateSigningRequest) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(c.Spec.Request)
	if block == nil {
		return nil, fmt.Errorf("no PEM request")
	}
	return x509.ParseCertificateRequest(block.Bytes)
}

// approved reports whether a CSR was approved and its certificate issued.
func approved(c certificatesv1.CertificateSigningRequest) bool {
	for _, cond := range c.Status.Conditions {
		if cond.Type == certificatesv1.CertificateApproved && cond.Status == v1.ConditionTrue {
			return len(c.Status.Certificate) > 0
		}
	}
	return false
}

// runLoggingPod runs a pod on the node that logs a line, and returns it
// once running.
func runLoggingPod(t *testing.T, ns, node, name string) *v1.Pod {
	t.Helper()
	pod := busyboxPod(name, node, "sh", "-c", "echo hello from "+name+"; trap 'exit 0' TERM; sleep 3600 & wait")
	if _, err := cl.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return waitPod(t, 2*time.Minute, ns, name, running)
}

// containerIDs are the running containers' IDs in the node's runtime.
func containerIDs(t *testing.T, cd *testbed.Containerd) map[string]string {
	t.Helper()
	resp, err := cd.Runtime.ListContainers(context.Background(), &runtimeapi.ListContainersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range resp.Containers {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			out[c.Labels["io.kubernetes.pod.name"]+"/"+c.Metadata.Name] = c.Id
		}
	}
	return out
}

// TestKubeadmJoin: a node with nothing but what kubeadm join leaves
// (kubeadm's KubeletConfiguration unchanged: the systemd cgroup driver,
// rotateCertificates, Webhook authentication and authorization, healthz
// on 10248; a bootstrap kubeconfig) runs nodelet from its systemd unit:
// it obtains its client certificate through the CSR API, writes the
// kubeconfig pointing at it, registers, runs a pod whose logs kubectl
// reads, and a restart of the service restarts no pod and asks for no new
// certificate.
func TestKubeadmJoin(t *testing.T) {
	ns := namespace(t)
	const name = "kubeadm-join"
	fixture, err := os.ReadFile(filepath.Join(testbed.RepoRoot(), "pkg", "infra", "kubeletconfig", "testdata", "kubeadm-kubelet-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(fixture, kubeadmConfig(t)) {
		t.Errorf("pkg/infra/kubeletconfig/testdata/kubeadm-kubelet-config.yaml is not what kubeadm %s generates:\n%s", cl.BinDir, kubeadmConfig(t))
	}
	k := newKubeadmNode(t, name, 5)
	k.installNodelet()
	k.systemctl("daemon-reload")
	k.systemctl("enable", "--now", "nodelet")
	waitNodeReady(t, name, 2*time.Minute)
	csrs := clientCSRs(t, name)
	if len(csrs) != 1 || !strings.HasPrefix(csrs[0].Spec.Username, "system:bootstrap:") || !approved(csrs[0]) {
		t.Fatalf("want one approved bootstrap CSR for the node, got %+v", csrs)
	}
	kubeconfig, err := k.bed.ReadFile(context.Background(), "/etc/kubernetes/kubelet.conf")
	if err != nil || !strings.Contains(string(kubeconfig), "/var/lib/kubelet/pki/kubelet-client-current.pem") {
		t.Fatalf("kubeconfig written by the bootstrap (%v):\n%s", err, kubeconfig)
	}
	runLoggingPod(t, ns, name, "logger")
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		out, err := cl.Kubectl(context.Background(), "logs", "-n", ns, "logger")
		return err == nil && strings.Contains(out, "hello from logger"), fmt.Sprintf("kubectl logs: %v %s", err, out)
	})

	before := containerIDs(t, k.cd)
	k.systemctl("restart", "nodelet")
	waitNodeReady(t, name, time.Minute)
	waitPod(t, time.Minute, ns, "logger", running)
	if after := containerIDs(t, k.cd); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("a restart of the service changed the containers: %v, then %v", before, after)
	}
	if n := len(clientCSRs(t, name)); n != 1 {
		t.Fatalf("the restart asked for a new certificate (%d requests): a valid one must be reused", n)
	}
}

// TestKubeletToNodeletOnAKubeadmNode: a kubeadm node joined and run by the
// upstream kubelet (its package's unit and kubeadm's drop-in) moves to
// nodelet, its configuration, kubeconfig and certificates where they are,
// first by replacing the kubelet's binary and restarting the service, then
// by swapping the services: no pod restarts, no new certificate is asked
// for, and kubectl logs still works.
func TestKubeletToNodeletOnAKubeadmNode(t *testing.T) {
	ns := namespace(t)
	const name = "kubeadm-swap"
	k := newKubeadmNode(t, name, 6)
	k.installKubelet()
	k.systemctl("daemon-reload")
	k.systemctl("enable", "--now", "kubelet")
	waitNodeReady(t, name, 2*time.Minute)
	pod := runLoggingPod(t, ns, name, "survivor")
	before := containerIDs(t, k.cd)
	csrsBefore := len(clientCSRs(t, name))
	moved := func(how string) {
		t.Helper()
		testbed.Eventually(t, time.Minute, func() (bool, string) {
			n, err := cl.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
			return err == nil && strings.HasSuffix(n.Status.NodeInfo.KubeletVersion, "-nodelet"), "the node is not reported by nodelet yet"
		})
		waitNodeReady(t, name, time.Minute)
		p := waitPod(t, time.Minute, ns, "survivor", running)
		if p.Status.ContainerStatuses[0].RestartCount != 0 || p.UID != pod.UID {
			t.Fatalf("%s: the pod restarted: %+v", how, p.Status.ContainerStatuses)
		}
		if after := containerIDs(t, k.cd); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("%s: the containers changed: %v, then %v", how, before, after)
		}
		if n := len(clientCSRs(t, name)); n != csrsBefore {
			t.Fatalf("%s: nodelet asked for a new client certificate (%d requests, %d before): the kubelet's must be reused", how, n, csrsBefore)
		}
		testbed.Eventually(t, time.Minute, func() (bool, string) {
			out, err := cl.Kubectl(context.Background(), "logs", "-n", ns, "survivor")
			return err == nil && strings.Contains(out, "hello from survivor"), fmt.Sprintf("%s: kubectl logs: %v %s", how, err, out)
		})
	}

	// The binary replaced, the kubelet's unit and drop-in unchanged.
	bin, err := testbed.NodeletBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := k.bed.Install(context.Background(), bin, "/usr/bin/kubelet", 0o755); err != nil {
		t.Fatal(err)
	}
	k.systemctl("restart", "kubelet")
	moved("the kubelet's binary replaced")

	// nodelet's own unit.
	k.installNodelet()
	k.systemctl("daemon-reload")
	k.systemctl("disable", "--now", "kubelet")
	k.systemctl("enable", "--now", "nodelet")
	moved("the services swapped")
}
