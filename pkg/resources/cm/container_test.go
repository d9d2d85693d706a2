package cm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/testutil"
)

func linuxConfig(memLimit int64) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: memLimit}}}
}

// TestSwapOnAFakeCgroupV2Root: on a cgroup v2 root whose cgroups account
// swap, LimitedSwap gives a Burstable container its share of the node's
// swap (its memory request's share of the node's memory), and every
// other container none; NoSwap gives none to all; without swap
// accounting nothing is set.
func TestSwapOnAFakeCgroupV2Root(t *testing.T) {
	root := t.TempDir()
	testutil.Must(t, os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpu memory pids"), 0o644))
	noAccounting, err := DetectSwap(root, true, LimitedSwap, 8<<30, 4<<30)
	testutil.Must(t, err)
	testutil.Must(t, os.MkdirAll(filepath.Join(root, "system.slice"), 0o755))
	testutil.Must(t, os.WriteFile(filepath.Join(root, "system.slice", "memory.swap.max"), []byte("max"), 0o644))
	limited, err := DetectSwap(root, true, LimitedSwap, 8<<30, 4<<30)
	testutil.Must(t, err)
	noSwap, err := DetectSwap(root, true, "", 8<<30, 4<<30)
	testutil.Must(t, err)
	if !limited.Available || noAccounting.Available {
		t.Fatalf("swap accounting seen: %v, without memory.swap.max: %v", limited.Available, noAccounting.Available)
	}

	burstable := podWith("b", rr("memory=1Gi", "memory=2Gi"))
	guaranteed := podWith("g", rr("cpu=1,memory=1Gi", "cpu=1,memory=1Gi"))
	besteffort := podWith("e", rr("", ""))
	critical := podWith("c", rr("memory=1Gi", "memory=2Gi"))
	critical.Spec.PriorityClassName = "system-node-critical"
	prio := int32(2000001000)
	critical.Spec.Priority = &prio
	for _, tc := range []struct {
		name string
		swap Swap
		pod  *v1.Pod
		want string
	}{
		{"LimitedSwap, Burstable: 1Gi of 8Gi memory is 512Mi of 4Gi swap", limited, burstable, "536870912"},
		{"LimitedSwap, Guaranteed", limited, guaranteed, "0"},
		{"LimitedSwap, BestEffort", limited, besteffort, "0"},
		{"LimitedSwap, critical", limited, critical, "0"},
		{"NoSwap, Burstable", noSwap, burstable, "0"},
		{"no swap accounting", noAccounting, burstable, "unset"},
	} {
		cfg := linuxConfig(2 << 30)
		testutil.Must(t, ContainerLimits{Swap: tc.swap}.PreCreateContainer(context.Background(), tc.pod, &tc.pod.Spec.Containers[0], cfg))
		got, ok := cfg.Linux.Resources.Unified["memory.swap.max"]
		if !ok {
			got = "unset"
		}
		if got != tc.want {
			t.Errorf("%s: memory.swap.max %s, want %s", tc.name, got, tc.want)
		}
	}
	if _, err := DetectSwap(root, true, "Unlimited", 1, 1); err == nil || !strings.Contains(err.Error(), `memorySwap.swapBehavior "Unlimited"`) {
		t.Fatalf("unknown behaviour: %v", err)
	}
}

// TestSwapOnCgroupV1: with memsw accounting, "no swap" is memory+swap
// equal to the memory limit, as upstream.
func TestSwapOnCgroupV1(t *testing.T) {
	root := t.TempDir()
	testutil.Must(t, os.MkdirAll(filepath.Join(root, "memory"), 0o755))
	testutil.Must(t, os.WriteFile(filepath.Join(root, "memory", "memory.memsw.limit_in_bytes"), []byte("max"), 0o644))
	s, err := DetectSwap(root, false, LimitedSwap, 8<<30, 4<<30)
	testutil.Must(t, err)
	p := podWith("b", rr("memory=1Gi", "memory=2Gi"))
	cfg := linuxConfig(2 << 30)
	testutil.Must(t, ContainerLimits{Swap: s}.PreCreateContainer(context.Background(), p, &p.Spec.Containers[0], cfg))
	if r := cfg.Linux.Resources; r.MemorySwapLimitInBytes != 2<<30 || r.Unified != nil {
		t.Fatalf("resources %+v", r)
	}
}

// TestContainerHugePageLimits: a container gets its limit of each page
// size of the node, and 0 of the others.
func TestContainerHugePageLimits(t *testing.T) {
	p := podWith("h", rr("cpu=1,memory=64Mi,hugepages-2Mi=32Mi", "cpu=1,memory=64Mi,hugepages-2Mi=32Mi"))
	cfg := linuxConfig(64 << 20)
	testutil.Must(t, ContainerLimits{HugePageSizes: []int64{2 << 20, 1 << 30}}.PreCreateContainer(context.Background(), p, &p.Spec.Containers[0], cfg))
	var got []string
	for _, l := range cfg.Linux.Resources.HugepageLimits {
		got = append(got, fmt.Sprintf("%s=%d", l.PageSize, l.Limit))
	}
	if s := strings.Join(got, " "); s != "2MB=33554432 1GB=0" {
		t.Fatalf("hugepage limits %s", s)
	}
	if PageSizeName(64<<10) != "64KB" {
		t.Fatal(PageSizeName(64 << 10))
	}
}

// On cgroup v2 every container is killed whole on OOM (memory.oom.group
// 1), as upstream's kubelet asks, unless singleProcessOOMKill is true; on
// cgroup v1 there is no such setting to ask for.
func TestGroupOOMKill(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		unified bool
		single  *bool
		want    bool
	}{{true, nil, true}, {true, &no, true}, {true, &yes, false}, {false, nil, false}, {false, &yes, false}} {
		if got := GroupOOMKill(tc.unified, tc.single); got != tc.want {
			t.Errorf("unified=%v singleProcessOOMKill=%v: %v, want %v", tc.unified, tc.single, got, tc.want)
		}
	}
	p := podWith("b", rr("memory=64Mi", "memory=64Mi"))
	for _, group := range []bool{true, false} {
		cfg := linuxConfig(64 << 20)
		testutil.Must(t, ContainerLimits{GroupOOMKill: group}.PreCreateContainer(context.Background(), p, &p.Spec.Containers[0], cfg))
		if got, set := cfg.Linux.Resources.Unified["memory.oom.group"]; set != group || (group && got != "1") {
			t.Errorf("GroupOOMKill=%v: unified %v", group, cfg.Linux.Resources.Unified)
		}
	}
}
