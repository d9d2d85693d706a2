//go:build integration && long

// Package long holds the tests that wait out real time (certificate
// lifetimes): make test-long runs them, make test does not.
package long

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

var (
	cd *testbed.Containerd
	cl *testbed.Cluster
)

// signing is how long the test control plane's certificates last, as the
// issue asks: 5 minutes (the signer backdates them 5 minutes more).
const signing = 5 * time.Minute

func TestMain(m *testing.M) {
	testbed.Main(m, &cd, func(ctx context.Context) (func(), error) {
		dir, err := os.MkdirTemp("/var/lib", "nodelet-long-")
		if err != nil {
			return nil, err
		}
		cl, err = testbed.StartClusterWith(ctx, dir, testbed.ClusterOptions{SigningDuration: signing})
		if err != nil {
			return func() { testbed.RemoveDir(dir) }, err
		}
		return func() {
			cl.Stop()
			testbed.RemoveDir(dir)
		}, nil
	})
}

// TestRotationPastExpiry: a node that joined with a bootstrap token, its
// certificates issued for 5 minutes, renews its client certificate
// before it expires and stays Ready, its lease renewed, well past the
// first certificate's expiry, with not one request refused for an expired
// certificate.
func TestRotationPastExpiry(t *testing.T) {
	ctx := context.Background()
	const name = "node-long"
	dir := t.TempDir()
	boot, err := cl.BootstrapKubeconfig(ctx, "bootstrap-long.conf")
	if err != nil {
		t.Fatal(err)
	}
	certDir := filepath.Join(dir, "pki")
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{NodeName: name, Kubeconfig: filepath.Join(dir, "kubelet.conf"),
		CgroupRoot: testbed.CgroupRoot() + "/" + name, Address: "0.0.0.0",
		Args:        []string{"--bootstrap-kubeconfig", boot, "--cert-dir", certDir},
		ExtraConfig: fmt.Sprintf("rotateCertificates: true\nauthentication:\n  x509:\n    clientCAFile: %s\n", cl.CAFile())})
	start := time.Now()
	ready := func() bool {
		node, err := cl.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range node.Status.Conditions {
			if c.Type == v1.NodeReady {
				return c.Status == v1.ConditionTrue
			}
		}
		return false
	}
	testbed.Eventually(t, time.Minute, func() (bool, string) { return ready(), "not Ready" })
	firstExpiry := start.Add(signing)
	// Watch the node until two minutes past the first certificate's
	// expiry: Ready, and its lease renewed, all along.
	var lastRenew time.Time
	tick := time.NewTicker(5 * time.Second) // the observation period
	defer tick.Stop()
	for deadline := firstExpiry.Add(2 * time.Minute); time.Now().Before(deadline); <-tick.C {
		if !ready() {
			t.Fatalf("the node went NotReady %v after it joined", time.Since(start).Round(time.Second))
		}
		l, err := cl.Client.CoordinationV1().Leases("kube-node-lease").Get(ctx, name, metav1.GetOptions{})
		if err == nil && l.Spec.RenewTime != nil {
			if lastRenew = l.Spec.RenewTime.Time; time.Since(lastRenew) > 40*time.Second {
				t.Fatalf("the lease was last renewed %v ago, %v after the node joined", time.Since(lastRenew), time.Since(start))
			}
		}
	}
	list, err := cl.Client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var bootstrap, renewals int
	for _, c := range list.Items {
		if c.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
			continue
		}
		switch {
		case strings.HasPrefix(c.Spec.Username, "system:bootstrap:"):
			bootstrap++
		case c.Spec.Username == "system:node:"+name:
			renewals++
		}
	}
	if bootstrap != 1 || renewals < 1 {
		t.Fatalf("%d bootstrap and %d renewal requests; want 1 and at least 1", bootstrap, renewals)
	}
	if strings.Contains(n.Log(), "certificate has expired") || strings.Contains(n.Log(), "Unauthorized") {
		t.Fatalf("a request went out with an expired certificate:\n%s", n.LogTail(40))
	}
	t.Logf("joined, renewed %d times, Ready %v later, past the first certificate's expiry at %v", renewals, time.Since(start).Round(time.Second), firstExpiry.Format(time.RFC3339))
}
