//go:build integration

package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// TestKubectlTop: metrics-server (built from its module, run as its own
// identity, which may read nodes/metrics but not nodes/proxy) scrapes
// nodelet's /metrics/resource, and kubectl top reports nodelet's node and
// its pod. The kubelet API's other metric endpoints answer under their
// upstream names.
func TestKubectlTop(t *testing.T) {
	ns := namespace(t)
	n := startNode(t, "node-top", cd, "")
	waitNodeReady(t, n.NodeName, time.Minute)
	pod := busyboxPod("busy", n.NodeName, "sh", "-c", "while true; do :; done")
	pod.Spec.Containers[0].ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}, PeriodSeconds: 1}
	if _, err := cl.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, time.Minute, ns, "busy", running)
	if err := cl.StartMetricsServer(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	testbed.Eventually(t, 3*time.Minute, func() (bool, string) {
		out, err := cl.Kubectl(ctx, "top", "node", n.NodeName, "--no-headers")
		f := strings.Fields(out)
		return err == nil && len(f) >= 5 && f[0] == n.NodeName && strings.HasSuffix(f[1], "m") && strings.HasSuffix(f[3], "Mi"),
			fmt.Sprintf("kubectl top node: %v %s\n%s", err, out, tail(cl.Log("metrics-server"), 10))
	})
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		out, err := cl.Kubectl(ctx, "top", "pod", "-n", ns, "--no-headers")
		f := strings.Fields(out)
		// The busy loop keeps a core nearly busy.
		return err == nil && len(f) == 3 && f[0] == "busy" && f[1] != "0m", fmt.Sprintf("kubectl top pod: %v %s", err, out)
	})
	for path, want := range map[string]string{
		"/metrics/resource": `container_cpu_usage_seconds_total{container="main",namespace="` + ns + `",pod="busy"}`,
		"/metrics/cadvisor": `container_memory_working_set_bytes{container="main"`,
		"/metrics/probes":   `prober_probe_total{container="main",namespace="` + ns + `",pod="busy",pod_uid="`,
	} {
		out, err := cl.Kubectl(ctx, "get", "--raw", "/api/v1/nodes/"+n.NodeName+"/proxy"+path)
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("%s: %v; want %q in:\n%s", path, err, want, tail(out, 20))
		}
	}
}
