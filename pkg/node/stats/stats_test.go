package stats

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/fakecri"
)

type fixture struct {
	rt       *fakecri.Runtime
	clock    *clocktesting.FakeClock
	p        *Provider
	root     string
	logs     string
	sandbox  string
	running  string
	exited   string
	podLogFn string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{clock: clocktesting.NewFakeClock(time.Unix(1795000100, 0)), root: t.TempDir(), logs: t.TempDir()}
	f.rt = fakecri.New(f.clock, "busybox")
	f.rt.SetImageFs(t.TempDir())
	sb, err := f.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "u1"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	f.sandbox = sb.PodSandboxId
	start := func(name string) string {
		c, err := f.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: f.sandbox, Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: name}, Image: &runtimeapi.ImageSpec{Image: "busybox"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
			t.Fatal(err)
		}
		return c.ContainerId
	}
	f.running, f.exited = start("app"), start("init")
	f.rt.Exit(f.exited, 0)
	f.rt.SetUsage(f.sandbox, 2e9, 3<<20)
	f.rt.SetUsage(f.running, 1e9, 2<<20)

	f.podLogFn = filepath.Join(f.logs, "default_web_u1", "app", "0.log")
	write(t, f.podLogFn, 8192)
	write(t, filepath.Join(f.root, "pods", "u1", "volumes", "kubernetes.io~empty-dir", "scratch", "data"), 16384)
	if f.p, err = NewProvider(Options{NodeName: "n1", Runtime: f.rt, RootDir: f.root, PodLogsDir: f.logs, ProcDir: "testdata/proc", Clock: f.clock}); err != nil {
		t.Fatal(err)
	}
	return f
}

func write(t *testing.T, path string, n int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, n), 0o644); err != nil {
		t.Fatal(err)
	}
}

func u(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}

func TestSummaryNode(t *testing.T) {
	f := newFixture(t)
	s, err := f.p.Summary(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	n := s.Node
	if n.NodeName != "n1" || !n.StartTime.Time.Equal(time.Unix(1795000000, 0)) {
		t.Errorf("node %q started %v", n.NodeName, n.StartTime)
	}
	// user+nice+system+irq+softirq+steal ticks, at 10 ms each.
	if got := u(n.CPU.UsageCoreNanoSeconds); got != 1335*uint64(10*time.Millisecond) {
		t.Errorf("node CPU usage = %d", got)
	}
	if n.CPU.UsageNanoCores != nil {
		t.Errorf("first sample has a rate: %d", *n.CPU.UsageNanoCores)
	}
	if ws, avail := u(n.Memory.WorkingSetBytes), u(n.Memory.AvailableBytes); ws != 500000*1024 || avail != 500000*1024 {
		t.Errorf("node working set %d, available %d", ws, avail)
	}
	if n.Swap == nil || u(n.Swap.SwapAvailableBytes) != 1500000*1024 || u(n.Swap.SwapUsageBytes) != 500000*1024 {
		t.Errorf("node swap %+v", n.Swap)
	}
	if u(n.Memory.UsageBytes) != 600000*1024 || u(n.Memory.MajorPageFaults) != 7 {
		t.Errorf("node memory %+v", n.Memory)
	}
	if n.Network.Name != "eth0" || u(n.Network.RxBytes) != 123456 || u(n.Network.TxErrors) != 2 || len(n.Network.Interfaces) != 2 {
		t.Errorf("node network %+v", n.Network)
	}
	if n.Fs == nil || u(n.Fs.CapacityBytes) == 0 || n.Runtime == nil || n.Runtime.ImageFs == nil {
		t.Errorf("node filesystems %+v %+v", n.Fs, n.Runtime)
	}
	if n.Rlimit == nil || *n.Rlimit.MaxPID != 4194304 || *n.Rlimit.NumOfRunningProcesses != 2 {
		t.Errorf("rlimit %+v", n.Rlimit)
	}
}

// The node alone is measured with its image filesystem and no call about
// pods (eviction's every pass); the pods apart, as the summary has them.
func TestNodeSummaryAndPodStatsApart(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.rt.ResetCalls()
	s, err := f.p.NodeSummary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Node.Runtime == nil || s.Node.Runtime.ImageFs == nil || s.Node.Memory == nil || len(s.Pods) != 0 {
		t.Fatalf("node summary %+v", s)
	}
	if calls := f.rt.Calls(); len(calls) != 0 {
		t.Fatalf("the node alone made runtime calls %v (ImageFsInfo is not recorded)", calls)
	}
	pods, err := f.p.PodStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || pods[0].PodRef.UID != "u1" || pods[0].EphemeralStorage == nil || statsCalls(f.rt) != 1 {
		t.Fatalf("pods %+v after %v", pods, f.rt.Calls())
	}
}

func TestSummaryPods(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.p.Summary(ctx, false); err != nil {
		t.Fatal(err)
	}
	// Ten seconds later the pod has used five more CPU seconds: half a core.
	f.clock.Step(10 * time.Second)
	f.rt.SetUsage(f.sandbox, 7e9, 3<<20)
	f.rt.SetUsage(f.running, 3e9, 2<<20)
	s, err := f.p.Summary(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Pods) != 1 {
		t.Fatalf("pods: %+v", s.Pods)
	}
	p := s.Pods[0]
	if p.PodRef != (statsapi.PodReference{Name: "web", Namespace: "default", UID: "u1"}) {
		t.Errorf("podRef %+v", p.PodRef)
	}
	if got := u(p.CPU.UsageNanoCores); got != 5e8 {
		t.Errorf("pod usageNanoCores = %d, want half a core", got)
	}
	if u(p.Memory.WorkingSetBytes) != 3<<20 {
		t.Errorf("pod memory %+v", p.Memory)
	}
	if len(p.Containers) != 1 || p.Containers[0].Name != "app" {
		t.Fatalf("containers (the exited one must not count): %+v", p.Containers)
	}
	c := p.Containers[0]
	if u(c.CPU.UsageNanoCores) != 2e8 || u(c.CPU.UsageCoreNanoSeconds) != 3e9 {
		t.Errorf("container CPU %+v", c.CPU)
	}
	if c.Logs == nil || u(c.Logs.UsedBytes) < 8192 || c.Rootfs == nil {
		t.Errorf("container logs %+v rootfs %+v", c.Logs, c.Rootfs)
	}
	if len(p.VolumeStats) != 1 || p.VolumeStats[0].Name != "scratch" || u(p.VolumeStats[0].UsedBytes) < 16384 {
		t.Errorf("volumes %+v", p.VolumeStats)
	}
	if e := p.EphemeralStorage; e == nil || u(e.UsedBytes) < 8192+16384 {
		t.Errorf("ephemeral storage %+v", e)
	}
}

func TestSummaryOnlyCPUAndMemory(t *testing.T) {
	f := newFixture(t)
	s, err := f.p.Summary(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if s.Node.Fs != nil || s.Node.Network != nil || s.Node.Runtime != nil {
		t.Errorf("node has more than CPU and memory: %+v", s.Node)
	}
	c := s.Pods[0].Containers[0]
	if c.CPU == nil || c.Memory == nil || c.Logs != nil || c.Rootfs != nil || s.Pods[0].VolumeStats != nil {
		t.Errorf("container %+v", c)
	}
}

func TestSummaryRuntimeError(t *testing.T) {
	f := newFixture(t)
	f.rt.FailNext("ListPodSandbox", os.ErrDeadlineExceeded)
	if _, err := f.p.Summary(context.Background(), false); err == nil {
		t.Fatal("no error when the runtime fails")
	}
}

// containerd fails the whole stats list when a stopped sandbox's cgroup is
// gone: each ready sandbox is then read alone, and its pod still reported.
func TestSummarySurvivesAFailingStatsList(t *testing.T) {
	f := newFixture(t)
	f.rt.FailNext("ListPodSandboxStats", errors.New("failed to load sandbox cgroup: cgroups: cgroup deleted"))
	s, err := f.p.Summary(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Pods) != 1 || s.Pods[0].Memory == nil || len(s.Pods[0].Containers) != 1 {
		t.Fatalf("pods %+v", s.Pods)
	}
	n := statsCalls(f.rt)
	if n != 2 {
		t.Fatalf("%d stats calls, want the list and one for the ready sandbox", n)
	}

	// Failing again within 30 s: the sandbox-by-sandbox read stands in,
	// and no sandbox is read alone.
	f.rt.ResetCalls()
	f.clock.Step(10 * time.Second)
	f.rt.FailNext("ListPodSandboxStats", errors.New("failed to load sandbox cgroup: cgroups: cgroup deleted"))
	if s, err = f.p.Summary(context.Background(), false); err != nil || len(s.Pods) != 1 || s.Pods[0].Memory == nil {
		t.Fatalf("pods %+v, %v", s.Pods, err)
	}
	if n := statsCalls(f.rt); n != 1 {
		t.Fatalf("%d stats calls within 30 s of the last read one by one, want the list alone", n)
	}
	// Past 30 s, each sandbox is read alone again.
	f.rt.ResetCalls()
	f.clock.Step(30 * time.Second)
	f.rt.FailNext("ListPodSandboxStats", errors.New("failed to load sandbox cgroup: cgroups: cgroup deleted"))
	if _, err = f.p.Summary(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if n := statsCalls(f.rt); n != 2 {
		t.Fatalf("%d stats calls 40 s after the last read one by one, want the list and one for the sandbox", n)
	}
}

// A successful list stands in for a failing one as a read one by one
// does: a burst of starts must not cost a read per sandbox. A sandbox
// started since is left out until the list answers again.
func TestALastListStandsInForAFailingOne(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.p.Summary(ctx, false); err != nil {
		t.Fatal(err)
	}
	sb, err := f.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "new", Namespace: "default", Uid: "u2"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	f.rt.SetUsage(sb.PodSandboxId, 1e9, 1<<20)
	f.rt.ResetCalls()
	f.clock.Step(29 * time.Second)
	f.rt.FailNext("ListPodSandboxStats", errors.New("failed to get sandbox task: not found"))
	s, err := f.p.Summary(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if n := statsCalls(f.rt); n != 1 {
		t.Fatalf("%d stats calls within 30 s of a complete list, want the failing list alone", n)
	}
	measured := map[string]bool{}
	for _, p := range s.Pods {
		measured[p.PodRef.Name] = p.Memory != nil
	}
	if want := map[string]bool{"web": true, "new": false}; !maps.Equal(measured, want) {
		t.Fatalf("pods measured %v, want %v (the list's pod kept, the new one left out)", measured, want)
	}
	// Once the list answers, the new sandbox is measured.
	if s, err = f.p.Summary(ctx, false); err != nil {
		t.Fatal(err)
	}
	for _, p := range s.Pods {
		if p.Memory == nil {
			t.Fatalf("pod %s not measured after the list answered", p.PodRef.Name)
		}
	}
}

func statsCalls(rt *fakecri.Runtime) (n int) {
	for _, c := range rt.Calls() {
		if strings.HasPrefix(c, "ListPodSandboxStats") {
			n++
		}
	}
	return n
}

type csiStats struct{ used uint64 }

func (c csiStats) VolumeStats(_ context.Context, uid string) []statsapi.VolumeStats {
	return []statsapi.VolumeStats{{Name: "data", PVCRef: &statsapi.PVCReference{Name: "claim", Namespace: "default"},
		FsStats: statsapi.FsStats{UsedBytes: &c.used}}}
}

// What a container writes into the files nodelet keeps for its pod
// counts as the pod's ephemeral storage: /etc/hosts (CVE-2020-8557) and
// the termination-message files (kubernetes#122224), or a container
// fills the node's disk through them past its limit.
func TestPodFilesAreEphemeralStorage(t *testing.T) {
	f := newFixture(t)
	before, err := f.p.Summary(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(f.root, "pods", "u1", "etc-hosts"), 3<<20)
	write(t, filepath.Join(f.root, "pods", "u1", "containers", "app", "0123abcd"), 5<<20)
	after, err := f.p.Summary(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	was, is := u(before.Pods[0].EphemeralStorage.UsedBytes), u(after.Pods[0].EphemeralStorage.UsedBytes)
	if is-was < 8<<20 {
		t.Errorf("ephemeral storage grew by %d bytes, want the 8 MiB written to /etc/hosts and a termination message", is-was)
	}
	if n := u(after.Pods[0].EphemeralStorage.InodesUsed) - u(before.Pods[0].EphemeralStorage.InodesUsed); n < 2 {
		t.Errorf("ephemeral storage inodes grew by %d, want the two files", n)
	}
}

// A CSI volume is measured by its driver, not walked, and is not the
// pod's ephemeral storage: a persistent volume's data must never count
// against the pod's local storage limits.
func TestCSIVolumesAreNotEphemeralStorage(t *testing.T) {
	f := newFixture(t)
	write(t, filepath.Join(f.root, "pods", "u1", "volumes", "kubernetes.io~csi", "data", "mount", "big"), 1<<20)
	f.p.o.CSI = csiStats{used: 5 << 30}
	s, err := f.p.Summary(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	p := s.Pods[0]
	if len(p.VolumeStats) != 2 || p.VolumeStats[1].Name != "data" || u(p.VolumeStats[1].UsedBytes) != 5<<30 || p.VolumeStats[1].PVCRef == nil {
		t.Errorf("volumes %+v", p.VolumeStats)
	}
	if e := p.EphemeralStorage; e == nil || u(e.UsedBytes) >= 1<<20 {
		t.Errorf("ephemeral storage counts the CSI volume: %+v", e)
	}
}

// The summary's system containers are upstream's: each named cgroup's
// CPU and memory (the working set without inactive file pages), "pods"
// with what is left below its limit; one that cannot be read is left out.
func TestSystemContainers(t *testing.T) {
	stats := map[string]*cgroups.Stats{
		"/kubelet":  {CpuStats: cgroups.CpuStats{CpuUsage: cgroups.CpuUsage{TotalUsage: 5e9}}, MemoryStats: cgroups.MemoryStats{Usage: cgroups.MemoryData{Usage: 50 << 20}, Stats: map[string]uint64{"total_inactive_file": 10 << 20, "total_rss": 30 << 20, "total_pgfault": 5000}}},
		"/kubepods": {CpuStats: cgroups.CpuStats{CpuUsage: cgroups.CpuUsage{TotalUsage: 9e9}}, MemoryStats: cgroups.MemoryStats{Usage: cgroups.MemoryData{Usage: 100 << 20, Limit: 1 << 30}, Stats: map[string]uint64{"inactive_file": 20 << 20}}},
	}
	p, err := NewProvider(Options{NodeName: "n1", ProcDir: "testdata/proc", Clock: clocktesting.NewFakeClock(time.Unix(2000, 0)),
		SystemContainers: func() map[string]string { return map[string]string{"kubelet": "/kubelet", "misc": "/gone"} },
		PodsCgroup:       "/kubepods",
		ReadCgroup: func(name string) (*cgroups.Stats, error) {
			if s, ok := stats[name]; ok {
				return s, nil
			}
			return nil, errors.New("no such cgroup")
		}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]statsapi.ContainerStats{}
	for _, c := range p.systemContainers(time.Unix(2000, 0)) {
		got[c.Name] = c
	}
	if len(got) != 2 {
		t.Fatalf("system containers %v, want kubelet and pods (misc cannot be read)", got)
	}
	k := got["kubelet"]
	if *k.CPU.UsageCoreNanoSeconds != 5e9 || *k.Memory.UsageBytes != 50<<20 || *k.Memory.WorkingSetBytes != 40<<20 ||
		*k.Memory.RSSBytes != 30<<20 || *k.Memory.PageFaults != 5000 || k.Memory.AvailableBytes != nil {
		t.Errorf("kubelet %+v %+v", k.CPU, k.Memory)
	}
	if pods := got["pods"]; pods.Memory.AvailableBytes == nil || *pods.Memory.AvailableBytes != (1<<30)-(80<<20) {
		t.Errorf("pods available %v, want the limit less the working set", pods.Memory.AvailableBytes)
	}
}

// A container whose runtime names no process has no Detail, and is asked
// again next time (it may have just started).
func TestDetailsWithoutAProcess(t *testing.T) {
	rt := &infoRuntime{info: `{"sandboxID": "s1"}`}
	d := NewDetails(rt)
	for range 2 {
		if _, err := d.Read(context.Background(), "c1"); err == nil || !strings.Contains(err.Error(), "names no process") {
			t.Fatalf("read: %v", err)
		}
	}
	if rt.calls != 2 {
		t.Errorf("asked %d times, want each time", rt.calls)
	}
}

type infoRuntime struct {
	info  string
	calls int
}

func (r *infoRuntime) ContainerStatus(_ context.Context, _ *runtimeapi.ContainerStatusRequest, _ ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error) {
	r.calls++
	return &runtimeapi.ContainerStatusResponse{Info: map[string]string{"info": r.info}}, nil
}
