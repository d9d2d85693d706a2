//go:build integration

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// TestStatsSummary reads /stats/summary through the API server's node
// proxy, as metrics-server does, and checks that it measures the node and
// a running pod: CPU (cumulative and, from the second request, as a
// rate), memory, the pod's logs and emptyDir, and the filesystems.
func TestStatsSummary(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-stats", cd, "")
	waitNodeReady(t, n.NodeName, 10*time.Second)

	pod := busyboxPod("measured", n.NodeName, "sh", "-c",
		"dd if=/dev/urandom of=/scratch/blob bs=1k count=256 2>/dev/null; i=0; while [ $i -lt 200 ]; do echo line $i; i=$((i+1)); done; sleep 3600")
	pod.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, 30*time.Second, ns, "measured", running)

	summary := func(query string) *statsapi.Summary {
		t.Helper()
		req := cl.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", n.NodeName, "proxy", "stats", "summary")
		if query != "" {
			req = req.Param("only_cpu_and_memory", query)
		}
		raw, err := req.DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var s statsapi.Summary
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatalf("summary does not decode: %v\n%s", err, raw)
		}
		return &s
	}
	find := func(s *statsapi.Summary) *statsapi.PodStats {
		for i := range s.Pods {
			if s.Pods[i].PodRef.Namespace == ns && s.Pods[i].PodRef.Name == "measured" {
				return &s.Pods[i]
			}
		}
		return nil
	}
	u := func(p *uint64) uint64 {
		if p == nil {
			return 0
		}
		return *p
	}

	var s *statsapi.Summary
	var p *statsapi.PodStats
	testbed.Eventually(t, 15*time.Second, func() (bool, string) {
		s = summary("")
		p = find(s)
		if p == nil || len(p.Containers) != 1 || p.CPU == nil || p.CPU.UsageNanoCores == nil || s.Node.CPU.UsageNanoCores == nil {
			return false, fmt.Sprintf("no CPU rates yet: %+v", p)
		}
		// The emptyDir holds the 256 KiB the container wrote.
		for _, v := range p.VolumeStats {
			if v.Name == "scratch" && u(v.UsedBytes) >= 256<<10 {
				return true, ""
			}
		}
		return false, fmt.Sprintf("volumes %+v", p.VolumeStats)
	})

	node := s.Node
	if node.NodeName != n.NodeName || u(node.CPU.UsageCoreNanoSeconds) == 0 || u(node.Memory.WorkingSetBytes) == 0 || u(node.Memory.AvailableBytes) == 0 {
		t.Errorf("node CPU %+v memory %+v", node.CPU, node.Memory)
	}
	if node.Fs == nil || u(node.Fs.CapacityBytes) == 0 || node.Runtime == nil || node.Runtime.ImageFs == nil || u(node.Runtime.ImageFs.UsedBytes) == 0 {
		t.Errorf("node filesystems %+v runtime %+v", node.Fs, node.Runtime)
	}
	if node.Network == nil || len(node.Network.Interfaces) == 0 {
		t.Errorf("node network %+v", node.Network)
	}
	if p.PodRef.UID == "" || p.StartTime.IsZero() {
		t.Errorf("pod ref %+v started %v", p.PodRef, p.StartTime)
	}
	if u(p.CPU.UsageCoreNanoSeconds) == 0 || u(p.Memory.WorkingSetBytes) == 0 {
		t.Errorf("pod CPU %+v memory %+v", p.CPU, p.Memory)
	}
	c := p.Containers[0]
	if c.Name != "main" || u(c.CPU.UsageCoreNanoSeconds) == 0 || u(c.Memory.WorkingSetBytes) == 0 {
		t.Errorf("container %s CPU %+v memory %+v", c.Name, c.CPU, c.Memory)
	}
	// 200 lines of CRI-format log.
	if c.Logs == nil || u(c.Logs.UsedBytes) < 4096 || c.Rootfs == nil || u(c.Rootfs.CapacityBytes) == 0 {
		t.Errorf("container logs %+v rootfs %+v", c.Logs, c.Rootfs)
	}
	if p.Network == nil || p.Network.Name != "eth0" {
		t.Errorf("pod network %+v", p.Network)
	}
	if e := p.EphemeralStorage; e == nil || u(e.UsedBytes) < 256<<10 {
		t.Errorf("pod ephemeral storage %+v", e)
	}

	light := summary("true")
	if light.Node.Fs != nil || light.Node.Network != nil {
		t.Errorf("only_cpu_and_memory summary has filesystems or networks: %+v", light.Node)
	}
	if lp := find(light); lp == nil || lp.CPU == nil || lp.Memory == nil || lp.VolumeStats != nil {
		t.Errorf("only_cpu_and_memory pod stats %+v", lp)
	}
}
