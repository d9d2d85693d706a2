// Package stats builds the node's resource usage summary, served by the
// kubelet API at /stats/summary in the kubelet's stats/v1alpha1 format
// that metrics-server and the eviction tooling read.
//
// Pods and containers are measured by the runtime (CRI
// ListPodSandboxStats); nodelet adds what the runtime cannot know: CPU
// rates (the runtime reports cumulative usage, so the provider remembers
// the previous sample of each cgroup), the size of each pod's logs and
// volumes, and the node itself, read from /proc and the filesystems under
// the root and log directories. A summary is fresh and costs a few CRI
// calls and directory walks; what is kept between requests is the CPU
// samples, and the last complete read of the sandboxes' stats, which
// stands in for a while when the runtime fails to list them.
package stats

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/procfs"
	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/pods/poddirs"
)

// Runtime is what the provider reads from the container runtime.
type Runtime interface {
	ListPodSandboxStats(ctx context.Context, in *runtimeapi.ListPodSandboxStatsRequest, opts ...grpc.CallOption) (*runtimeapi.ListPodSandboxStatsResponse, error)
	ListPodSandbox(ctx context.Context, in *runtimeapi.ListPodSandboxRequest, opts ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error)
	ListContainers(ctx context.Context, in *runtimeapi.ListContainersRequest, opts ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error)
	ImageFsInfo(ctx context.Context, in *runtimeapi.ImageFsInfoRequest, opts ...grpc.CallOption) (*runtimeapi.ImageFsInfoResponse, error)
}

// Options configure a Provider.
type Options struct {
	NodeName string
	Runtime  Runtime
	// RootDir holds pods' volumes under pods/<uid>/volumes/<plugin>/<name>.
	RootDir string
	// PodLogsDir holds containers' logs under <ns>_<name>_<uid>/<container>.
	PodLogsDir string
	// ProcDir is /proc; tests point it at a fixture.
	ProcDir string
	Clock   clock.PassiveClock
	// CSI measures pods' CSI volumes through their drivers; nil measures
	// none. They are persistent, not the pod's ephemeral storage.
	CSI CSIVolumeStats
	// SystemContainers names the node's system containers' cgroups by
	// their summary names (cm.System.Containers); PodsCgroup is the pods'
	// cgroup ("" without cgroupsPerQOS). ReadCgroup reads them; nil
	// reports no system container.
	SystemContainers func() map[string]string
	PodsCgroup       string
	ReadCgroup       CgroupReader
}

// CSIVolumeStats measures a pod's CSI volumes (NodeGetVolumeStats).
type CSIVolumeStats interface {
	VolumeStats(ctx context.Context, uid string) []statsapi.VolumeStats
}

// Provider answers summary requests.
type Provider struct {
	o    Options
	proc procfs.FS

	mu sync.Mutex
	// cpu holds the last cumulative CPU sample per cgroup (node, sandbox
	// or container id), from which the next request computes a rate.
	cpu map[string]cpuSample
	// lastRead is the last time every ready sandbox's stats were read,
	// in one list or one by one, and what that found.
	lastRead struct {
		at    time.Time
		stats map[string]*runtimeapi.PodSandboxStats
	}
}

// lastReadStandsIn is how long the last complete read stands in when
// the list fails: during a burst of starts or deletions containerd 1.6
// fails the whole list on almost every call, and reading each sandbox
// alone (110 calls of 40-120 ms on the development VM) on every eviction
// pass took a third of the runtime's time from the pods being started
// and stopped. Within it, the sandboxes the last read covered keep its
// stats, as up to this old as a cached cAdvisor's are; a sandbox started
// since is left out until the list answers again or this expires.
const lastReadStandsIn = 30 * time.Second

type cpuSample struct {
	at    time.Time
	usage uint64 // core nanoseconds
}

// NewProvider returns a summary provider.
func NewProvider(o Options) (*Provider, error) {
	if o.ProcDir == "" {
		o.ProcDir = "/proc"
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	proc, err := procfs.NewFS(o.ProcDir)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	return &Provider{o: o, proc: proc, cpu: map[string]cpuSample{}}, nil
}

// Summary measures the node and its running pods. With onlyCPUAndMemory
// (metrics-server's request) filesystems, networks and volumes are left
// out, which makes it cheap enough to scrape often.
func (p *Provider) Summary(ctx context.Context, onlyCPUAndMemory bool) (*statsapi.Summary, error) {
	s, imageFs, err := p.node(ctx, onlyCPUAndMemory)
	if err != nil {
		return nil, err
	}
	if s.Pods, err = p.pods(ctx, imageFs, onlyCPUAndMemory); err != nil {
		return nil, err
	}
	return s, nil
}

// NodeSummary measures the node alone, in full, with its runtime's image
// filesystem: what eviction's thresholds are read from. It makes no call
// per pod (the runtime's stats of every sandbox took 0.6-1.9 s at 110
// pods on containerd 1.6, in the middle of the pods' starts).
func (p *Provider) NodeSummary(ctx context.Context) (*statsapi.Summary, error) {
	s, _, err := p.node(ctx, false)
	return s, err
}

// PodStats measures every running pod, in full.
func (p *Provider) PodStats(ctx context.Context) ([]statsapi.PodStats, error) {
	imageFs, err := p.imageFs(ctx)
	if err != nil {
		return nil, err
	}
	return p.pods(ctx, imageFs, false)
}

// pods measures the running pods, then forgets the CPU samples of the
// cgroups not seen for a while.
func (p *Provider) pods(ctx context.Context, imageFs *statsapi.FsStats, onlyCPUAndMemory bool) ([]statsapi.PodStats, error) {
	out, err := p.podStats(ctx, imageFs, onlyCPUAndMemory)
	if err != nil {
		return nil, err
	}
	p.forgetStale(p.o.Clock.Now())
	return out, nil
}

// node is a summary of the node alone, and its image filesystem (nil with
// onlyCPUAndMemory).
func (p *Provider) node(ctx context.Context, onlyCPUAndMemory bool) (*statsapi.Summary, *statsapi.FsStats, error) {
	node, err := p.nodeStats(onlyCPUAndMemory)
	if err != nil {
		return nil, nil, err
	}
	var imageFs *statsapi.FsStats
	if !onlyCPUAndMemory {
		if imageFs, err = p.imageFs(ctx); err != nil {
			return nil, nil, err
		}
		node.Runtime = &statsapi.RuntimeStats{ImageFs: imageFs, ContainerFs: imageFs}
	}
	node.SystemContainers = p.systemContainers(p.o.Clock.Now())
	return &statsapi.Summary{Node: *node, Pods: []statsapi.PodStats{}}, imageFs, nil
}

// nanoCores turns a cumulative CPU sample into a rate against the
// previous sample of the same cgroup; the first sample has none.
func (p *Provider) nanoCores(key string, at time.Time, usage uint64) *uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	prev, ok := p.cpu[key]
	p.cpu[key] = cpuSample{at: at, usage: usage}
	if !ok || !at.After(prev.at) || usage < prev.usage {
		return nil
	}
	rate := uint64(float64(usage-prev.usage) / at.Sub(prev.at).Seconds())
	return &rate
}

// forgetStale drops samples of cgroups not seen for ten minutes (pods
// that are gone).
func (p *Provider) forgetStale(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, s := range p.cpu {
		if now.Sub(s.at) > 10*time.Minute {
			delete(p.cpu, k)
		}
	}
}

func (p *Provider) cpuStats(key string, s *runtimeapi.CpuUsage) *statsapi.CPUStats {
	if s == nil {
		return nil
	}
	at := time.Unix(0, s.Timestamp)
	out := &statsapi.CPUStats{Time: metav1.NewTime(at)}
	if u := s.UsageCoreNanoSeconds; u != nil {
		v := u.Value
		out.UsageCoreNanoSeconds = &v
		out.UsageNanoCores = p.nanoCores(key, at, v)
	}
	if n := s.UsageNanoCores; n != nil && n.Value > 0 {
		v := n.Value
		out.UsageNanoCores = &v
	}
	return out
}

func memoryStats(s *runtimeapi.MemoryUsage) *statsapi.MemoryStats {
	if s == nil {
		return nil
	}
	return &statsapi.MemoryStats{
		Time:            metav1.NewTime(time.Unix(0, s.Timestamp)),
		AvailableBytes:  nonZero(s.AvailableBytes),
		UsageBytes:      value(s.UsageBytes),
		WorkingSetBytes: value(s.WorkingSetBytes),
		RSSBytes:        value(s.RssBytes),
		PageFaults:      value(s.PageFaults),
		MajorPageFaults: value(s.MajorPageFaults),
	}
}

func swapStats(s *runtimeapi.SwapUsage) *statsapi.SwapStats {
	if s == nil {
		return nil
	}
	return &statsapi.SwapStats{
		Time:               metav1.NewTime(time.Unix(0, s.Timestamp)),
		SwapAvailableBytes: value(s.SwapAvailableBytes),
		SwapUsageBytes:     value(s.SwapUsageBytes),
	}
}

func value(v *runtimeapi.UInt64Value) *uint64 {
	if v == nil {
		return nil
	}
	x := v.Value
	return &x
}

// nonZero is value for fields where runtimes send 0 for "unknown".
func nonZero(v *runtimeapi.UInt64Value) *uint64 {
	if v == nil || v.Value == 0 {
		return nil
	}
	return value(v)
}

func (p *Provider) podStats(ctx context.Context, imageFs *statsapi.FsStats, onlyCPUAndMemory bool) ([]statsapi.PodStats, error) {
	rt := p.o.Runtime
	sandboxes, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
	}})
	if err != nil {
		return nil, fmt.Errorf("listing pod sandboxes: %w", err)
	}
	containers, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}})
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	byID, err := p.sandboxStats(ctx, sandboxes.Items)
	if err != nil {
		return nil, err
	}
	// Only running containers count: an exited one uses nothing, and
	// its cumulative counters would be added twice after a restart.
	created := map[string]int64{}
	for _, c := range containers.Containers {
		created[c.Id] = c.CreatedAt
	}
	out := []statsapi.PodStats{}
	for _, sb := range sandboxes.Items {
		md := sb.GetMetadata()
		ps := statsapi.PodStats{
			PodRef:     statsapi.PodReference{Name: md.GetName(), Namespace: md.GetNamespace(), UID: md.GetUid()},
			StartTime:  metav1.NewTime(time.Unix(0, sb.CreatedAt)),
			Containers: []statsapi.ContainerStats{},
		}
		s := byID[sb.Id]
		linux := s.GetLinux()
		ps.CPU = p.cpuStats(sb.Id, linux.GetCpu())
		ps.Memory = memoryStats(linux.GetMemory())
		podLogs := filepath.Join(p.o.PodLogsDir, fmt.Sprintf("%s_%s_%s", md.GetNamespace(), md.GetName(), md.GetUid()))
		for _, cs := range linux.GetContainers() {
			id := cs.GetAttributes().GetId()
			at, running := created[id]
			if !running {
				continue
			}
			name := cs.GetAttributes().GetMetadata().GetName()
			c := statsapi.ContainerStats{
				Name: name, StartTime: metav1.NewTime(time.Unix(0, at)),
				CPU: p.cpuStats(id, cs.GetCpu()), Memory: memoryStats(cs.GetMemory()), Swap: swapStats(cs.GetSwap()),
			}
			if !onlyCPUAndMemory {
				c.Rootfs = rootfs(imageFs, cs.GetWritableLayer())
				c.Logs = p.dirFs(filepath.Join(podLogs, name), p.o.PodLogsDir)
			}
			ps.Containers = append(ps.Containers, c)
		}
		if !onlyCPUAndMemory {
			ps.Network = networkStats(linux.GetNetwork())
			if n := linux.GetProcess().GetProcessCount(); n != nil {
				v := n.Value
				ps.ProcessStats = &statsapi.ProcessStats{ProcessCount: &v}
			}
			ps.VolumeStats = p.volumeStats(md.GetUid())
			ps.EphemeralStorage = p.ephemeralStorage(&ps)
			if p.o.CSI != nil {
				ps.VolumeStats = append(ps.VolumeStats, p.o.CSI.VolumeStats(ctx, md.GetUid())...)
			}
		}
		out = append(out, ps)
	}
	return out, nil
}

// sandboxStats reads the ready sandboxes' stats in one call, or, when
// that fails, takes them from the last complete read if it is recent, and
// otherwise reads one sandbox at a time: containerd fails the whole list
// when a stopped sandbox's cgroup is already gone (an evicted or deleted
// pod's, removed by nodelet) or a sandbox is half set up, which must not
// blind eviction and /stats/summary to every other pod. A sandbox that
// still fails alone is left out.
func (p *Provider) sandboxStats(ctx context.Context, ready []*runtimeapi.PodSandbox) (map[string]*runtimeapi.PodSandboxStats, error) {
	byID := map[string]*runtimeapi.PodSandboxStats{}
	all, err := p.o.Runtime.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{})
	if err == nil {
		for _, s := range all.Stats {
			byID[s.GetAttributes().GetId()] = s
		}
		p.remember(byID)
		return byID, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("pod sandbox stats: %w", err)
	}
	p.mu.Lock()
	last, at := p.lastRead.stats, p.lastRead.at
	p.mu.Unlock()
	if last != nil && p.o.Clock.Since(at) < lastReadStandsIn {
		klog.V(4).InfoS("Listing pod sandbox stats failed; using the last complete read", "err", err, "age", p.o.Clock.Since(at))
		for _, sb := range ready {
			if s, ok := last[sb.Id]; ok {
				byID[sb.Id] = s
			}
		}
		return byID, nil
	}
	klog.V(2).InfoS("Listing pod sandbox stats failed; reading each ready sandbox", "err", err)
	for _, sb := range ready {
		one, err := p.o.Runtime.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{Filter: &runtimeapi.PodSandboxStatsFilter{Id: sb.Id}})
		if err != nil {
			klog.V(2).InfoS("No stats for pod sandbox", "podSandboxID", sb.Id, "pod", klog.KRef(sb.GetMetadata().GetNamespace(), sb.GetMetadata().GetName()), "err", err)
			continue
		}
		for _, s := range one.Stats {
			byID[s.GetAttributes().GetId()] = s
		}
	}
	p.remember(byID)
	return byID, nil
}

// remember keeps a complete read to stand in for failing lists. The map
// is not changed after, by the provider or its callers.
func (p *Provider) remember(byID map[string]*runtimeapi.PodSandboxStats) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastRead.at, p.lastRead.stats = p.o.Clock.Now(), byID
}

// rootfs is a container's writable layer on the image filesystem.
func rootfs(imageFs *statsapi.FsStats, layer *runtimeapi.FilesystemUsage) *statsapi.FsStats {
	if imageFs == nil {
		return nil
	}
	fs := &statsapi.FsStats{Time: imageFs.Time, CapacityBytes: imageFs.CapacityBytes, AvailableBytes: imageFs.AvailableBytes,
		Inodes: imageFs.Inodes, InodesFree: imageFs.InodesFree}
	if layer != nil {
		fs.UsedBytes = value(layer.UsedBytes)
		fs.InodesUsed = value(layer.InodesUsed)
	}
	return fs
}

func networkStats(n *runtimeapi.NetworkUsage) *statsapi.NetworkStats {
	if n == nil || n.DefaultInterface == nil {
		return nil
	}
	iface := func(i *runtimeapi.NetworkInterfaceUsage) statsapi.InterfaceStats {
		return statsapi.InterfaceStats{Name: i.Name, RxBytes: value(i.RxBytes), RxErrors: value(i.RxErrors),
			TxBytes: value(i.TxBytes), TxErrors: value(i.TxErrors)}
	}
	out := &statsapi.NetworkStats{Time: metav1.NewTime(time.Unix(0, n.Timestamp)), InterfaceStats: iface(n.DefaultInterface)}
	for _, i := range n.Interfaces {
		out.Interfaces = append(out.Interfaces, iface(i))
	}
	if len(out.Interfaces) == 0 {
		out.Interfaces = []statsapi.InterfaceStats{out.InterfaceStats}
	}
	return out
}

// volumeStats measures the volumes nodelet keeps for the pod (emptyDir,
// configMap, secret, projected...); host paths are the node's, not the
// pod's, and are not counted, nor are CSI volumes (their drivers measure
// them, and walking a persistent volume would count it as the pod's
// ephemeral storage).
func (p *Provider) volumeStats(uid string) []statsapi.VolumeStats {
	plugins, _ := filepath.Glob(filepath.Join(p.o.RootDir, "pods", uid, "volumes", "*", "*"))
	var out []statsapi.VolumeStats
	for _, dir := range plugins {
		if filepath.Base(filepath.Dir(dir)) == "kubernetes.io~csi" {
			continue
		}
		if fs := p.dirFs(dir, dir); fs != nil {
			out = append(out, statsapi.VolumeStats{Name: filepath.Base(dir), FsStats: *fs})
		}
	}
	return out
}

// ephemeralStorage is what the pod consumes of the node's ephemeral
// storage: its containers' writable layers and logs, its volumes, and the
// files nodelet keeps for it that its containers write: /etc/hosts (as
// upstream counts it since CVE-2020-8557) and the termination-message
// files (which upstream does not count, kubernetes#122224: a container
// could fill the node's disk through them past its limit).
func (p *Provider) ephemeralStorage(ps *statsapi.PodStats) *statsapi.FsStats {
	fs := p.dirFs("", p.o.RootDir)
	if fs == nil {
		return nil
	}
	var used, inodes uint64
	for _, f := range podFiles(poddirs.Root(p.o.RootDir), types.UID(ps.PodRef.UID)) {
		b, n := diskUsage(f)
		used, inodes = used+b, inodes+n
	}
	add := func(f *statsapi.FsStats) {
		if f == nil {
			return
		}
		if f.UsedBytes != nil {
			used += *f.UsedBytes
		}
		if f.InodesUsed != nil {
			inodes += *f.InodesUsed
		}
	}
	for i := range ps.Containers {
		add(ps.Containers[i].Rootfs)
		add(ps.Containers[i].Logs)
	}
	for i := range ps.VolumeStats {
		add(&ps.VolumeStats[i].FsStats)
	}
	fs.UsedBytes, fs.InodesUsed = &used, &inodes
	return fs
}

// podFiles are the paths nodelet writes for a pod that its containers
// can write to besides their volumes.
func podFiles(root poddirs.Root, uid types.UID) []string {
	return []string{root.EtcHosts(uid), root.Containers(uid)}
}

// dirFs measures dir's usage (when dir is set) on the filesystem that
// holds fsPath. It is nil when fsPath does not exist.
func (p *Provider) dirFs(dir, fsPath string) *statsapi.FsStats {
	fs, err := statFs(fsPath, p.o.Clock.Now())
	if err != nil {
		return nil
	}
	if dir != "" {
		used, inodes := diskUsage(dir)
		fs.UsedBytes, fs.InodesUsed = &used, &inodes
	}
	return fs
}

func (p *Provider) imageFs(ctx context.Context) (*statsapi.FsStats, error) {
	info, err := p.o.Runtime.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("image filesystem info: %w", err)
	}
	if len(info.ImageFilesystems) == 0 {
		return nil, nil
	}
	u := info.ImageFilesystems[0]
	fs, err := statFs(u.GetFsId().GetMountpoint(), time.Unix(0, u.Timestamp))
	if err != nil {
		return nil, nil
	}
	fs.UsedBytes, fs.InodesUsed = value(u.UsedBytes), value(u.InodesUsed)
	return fs, nil
}

// diskUsage sums the blocks and inodes under dir, as du does, without
// following symlinks (a configMap volume's ..data is one).
func diskUsage(dir string) (bytes, inodes uint64) {
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		inodes++
		if info, err := d.Info(); err == nil {
			bytes += allocated(info)
		}
		return nil
	})
	return bytes, inodes
}
