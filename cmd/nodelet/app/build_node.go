package app

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/cpuset"

	"github.com/opencontainers/cgroups"

	"github.com/nodelet/nodelet/cmd/nodelet/options"
	"github.com/nodelet/nodelet/pkg/node/eviction"
	"github.com/nodelet/nodelet/pkg/node/kerneltunables"
	"github.com/nodelet/nodelet/pkg/node/nodestatus"
	"github.com/nodelet/nodelet/pkg/node/stats"
	"github.com/nodelet/nodelet/pkg/observe/metrics"
	"github.com/nodelet/nodelet/pkg/resources/cm"
	"github.com/nodelet/nodelet/pkg/resources/numa"
)

// nodeCgroups is the container manager: a cm.Manager with cgroupsPerQOS,
// cm.Disabled without.
type nodeCgroups interface {
	PodCgroup(pod *v1.Pod) string
	Exists(pod *v1.Pod) bool
	EnsureExists(pod *v1.Pod) error
	Destroy(cgroup string) error
	PodCgroups() (map[types.UID]string, error)
	UpdateQoS(active []*v1.Pod) error
}

// nodeParts is the machine as nodelet sees it: the Node it reports, the
// cgroups pods run in, their resource usage and the pressure on them.
type nodeParts struct {
	node    *v1.Node
	cgroups nodeCgroups
	// topology is the machine's CPUs, NUMA nodes and huge pages.
	topology *numa.Topology
	// reserved is what allocatable keeps back (systemReserved,
	// kubeReserved, hard eviction thresholds), and reservedCPUs
	// reservedSystemCPUs.
	reserved     v1.ResourceList
	reservedCPUs cpuset.CPUSet
	// limits are containers' huge page and swap limits.
	limits cm.ContainerLimits
	// podsCgroup is the pods' cgroup (kubepods), "" without
	// cgroupsPerQOS.
	podsCgroup string
	stats      *stats.Provider
	// pressure holds the node's pressure conditions, which the eviction
	// manager keeps.
	pressure   *eviction.Conditions
	components []component
}

// allocatable is what pods may use; resourceFieldRefs to limits a
// container does not set resolve to it.
func (n *nodeParts) allocatable() v1.ResourceList { return n.node.Status.Allocatable }

// machine is the machine's size, for /metrics/cadvisor.
func (n *nodeParts) machine() metrics.Machine {
	cpu := n.node.Status.Capacity[v1.ResourceCPU]
	return metrics.Machine{CPUs: int(cpu.Value()), MemoryBytes: n.memoryCapacity()}
}

func (n *nodeParts) memoryCapacity() int64 {
	q := n.node.Status.Capacity[v1.ResourceMemory]
	return q.Value()
}

func buildNode(b *base, rt *runtimeConn, cl *clusterClients) (*nodeParts, error) {
	if err := kerneltunables.Check(b.cfg); err != nil {
		return nil, err
	}
	driver, err := cm.NegotiateDriver(rt.runtime, b.cfg.CgroupDriver, dialTimeout)
	if err != nil {
		return nil, err
	}
	machine, err := setUpNode(b.opts, b.nodeName, b.hostIPs, driver)
	if err != nil {
		return nil, err
	}
	node := machine.node
	node.Status.NodeInfo.ContainerRuntimeVersion = rt.version.RuntimeName + "://" + rt.version.RuntimeVersion
	node.Status.NodeInfo.KubeletVersion = options.Version
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = b.cfg.Port
	// Set at registration only, as upstream does.
	node.Spec.Taints, node.Spec.ProviderID = slices.Clone(b.cfg.RegisterWithTaints), b.cfg.ProviderID
	if b.opts.ExternalCloudProvider {
		var given []string
		for _, ip := range b.opts.NodeIPs {
			if !ip.IsUnspecified() {
				given = append(given, ip.String())
			}
		}
		nodestatus.ForExternalCloudProvider(node, given)
	}
	klog.InfoS("Node resources", "capacity", node.Status.Capacity, "allocatable", node.Status.Allocatable, "labels", node.Labels)
	system, err := cm.NewSystem(cm.SystemOptions{Kubelet: b.cfg.KubeletCgroups, System: b.cfg.SystemCgroups, Runtime: b.opts.RuntimeCgroups, Clock: b.clock})
	if err != nil {
		return nil, err
	}
	machine.components = append(machine.components, component{"system cgroups", system.Run})
	statsProvider, err := stats.NewProvider(stats.Options{
		NodeName: b.nodeName, RootDir: b.opts.RootDir, PodLogsDir: b.cfg.PodLogsDir, Clock: b.clock,
		Runtime: struct {
			runtimeapi.RuntimeServiceClient
			runtimeapi.ImageServiceClient
		}{rt.runtime, rt.images},
		CSI:              cl.csiStats,
		SystemContainers: system.Containers, PodsCgroup: machine.podsCgroup, ReadCgroup: cm.CgroupStats,
	})
	if err != nil {
		return nil, err
	}
	pressure := eviction.NewConditions(b.cfg.EvictionPressureTransitionPeriod.Duration, b.clock)
	machine.stats, machine.pressure = statsProvider, pressure
	return machine, nil
}

// evictionHard is the configured hard eviction thresholds, upstream's
// defaults when unset.
func evictionHard(c *kubeletv1beta1.KubeletConfiguration) map[string]string {
	if c.EvictionHard == nil {
		return eviction.DefaultEvictionHard
	}
	return c.EvictionHard
}

// setUpNode measures the machine, works out what pods may use (capacity
// minus systemReserved, kubeReserved and hard eviction thresholds, and
// memory less the huge pages) and, with cgroupsPerQOS, sets up the QoS
// cgroups, limited to capacity minus the reservations.
func setUpNode(o *options.Options, nodeName string, hostIPs []string, driver string) (*nodeParts, error) {
	c := &o.Config
	m, err := nodestatus.Measure(o.RootDir)
	if err != nil {
		return nil, err
	}
	topo, err := numa.Discover("/")
	if err != nil {
		return nil, fmt.Errorf("reading the machine's layout: %w", err)
	}
	m.HugePages = topo.HugePages
	maxPods := int(c.MaxPods)
	if c.PodsPerCore > 0 {
		maxPods = min(maxPods, int(c.PodsPerCore)*m.CPUs)
	}
	capacity := nodestatus.Capacity(m, maxPods)
	eviction, err := nodestatus.EvictionReserved(evictionHard(c), capacity)
	if err != nil {
		return nil, err
	}
	reservedCPUs, systemReserved, kubeReserved, err := reservedSystemCPUs(c, topo)
	if err != nil {
		return nil, err
	}
	reserved, err := nodestatus.ParseReserved(systemReserved, kubeReserved)
	if err != nil {
		return nil, err
	}
	enforced := nodestatus.Allocatable(capacity, reserved)
	// /kubepods is limited to the node's processes less those reserved
	// (systemReserved and kubeReserved "pid"), as upstream's.
	if pids, ok := cm.PIDCapacity("/proc"); ok {
		r := reserved[cm.PIDs]
		enforced[cm.PIDs] = *resource.NewQuantity(max(pids-r.Value(), 0), resource.DecimalSI)
	}
	for name, q := range eviction {
		cur := reserved[name]
		cur.Add(q)
		reserved[name] = cur
	}
	node := nodestatus.Node(nodestatus.Config{
		NodeName: nodeName, RootDir: o.RootDir, MaxPods: maxPods, Reserved: reserved,
		Labels: o.NodeLabels, HostIPs: hostIPs,
	}, m)
	sizes := slices.Sorted(maps.Keys(topo.HugePages))
	limits, err := containerLimits(c, sizes, m.MemoryBytes)
	if err != nil {
		return nil, err
	}
	cgroups, err := setUpCgroups(c, enforced, driver, sizes)
	parts := &nodeParts{node: node, cgroups: cgroups, topology: topo, reserved: reserved, reservedCPUs: reservedCPUs, limits: limits}
	if m, ok := cgroups.(*cm.Manager); ok {
		parts.podsCgroup = m.QoSCgroup(v1.PodQOSGuaranteed)
	}
	return parts, err
}

// reservedSystemCPUs parses reservedSystemCPUs, which must be the node's
// CPUs; when set, it is the system's CPU reservation, as upstream's
// --reserved-cpus: systemReserved's cpu becomes its size and
// kubeReserved keeps none.
func reservedSystemCPUs(c *kubeletv1beta1.KubeletConfiguration, topo *numa.Topology) (cpuset.CPUSet, map[string]string, map[string]string, error) {
	if c.ReservedSystemCPUs == "" {
		return cpuset.New(), c.SystemReserved, c.KubeReserved, nil
	}
	cpus, err := cpuset.Parse(c.ReservedSystemCPUs)
	if err != nil {
		return cpus, nil, nil, fmt.Errorf("reservedSystemCPUs %q: %w", c.ReservedSystemCPUs, err)
	}
	if all := topo.CPUs.CPUs(); !cpus.IsSubsetOf(all) {
		return cpus, nil, nil, fmt.Errorf("reservedSystemCPUs %q: the node's CPUs are %s", c.ReservedSystemCPUs, all)
	}
	system, kube := maps.Clone(c.SystemReserved), maps.Clone(c.KubeReserved)
	if system == nil {
		system = map[string]string{}
	}
	delete(kube, "cpu")
	system["cpu"] = strconv.Itoa(cpus.Size())
	klog.InfoS("reservedSystemCPUs overrides the cpu of kubeReserved and systemReserved", "reservedSystemCPUs", cpus, "systemReserved", system, "kubeReserved", kube)
	return cpus, system, kube, nil
}

// containerLimits are the huge page and swap limits containers get.
func containerLimits(c *kubeletv1beta1.KubeletConfiguration, sizes []int64, memory int64) (cm.ContainerLimits, error) {
	swapTotal, err := kerneltunables.SwapBytes("")
	if err != nil {
		return cm.ContainerLimits{}, err
	}
	unified := cgroups.IsCgroup2UnifiedMode()
	swap, err := cm.DetectSwap("/sys/fs/cgroup", unified, c.MemorySwap.SwapBehavior, memory, swapTotal)
	return cm.ContainerLimits{HugePageSizes: sizes, Swap: swap, GroupOOMKill: cm.GroupOOMKill(unified, c.SingleProcessOOMKill)}, err
}

// setUpCgroups makes the QoS cgroups, unless cgroupsPerQOS is off. A
// cgroup v1 host is refused first if failCgroupV1 says so.
func setUpCgroups(c *kubeletv1beta1.KubeletConfiguration, enforced v1.ResourceList, driver string, hugePageSizes []int64) (nodeCgroups, error) {
	if err := cm.CheckVersion(*c.FailCgroupV1, c.SingleProcessOOMKill); err != nil {
		return nil, err
	}
	if c.CgroupsPerQOS != nil && !*c.CgroupsPerQOS {
		return cm.Disabled{}, nil
	}
	var pidsLimit int64
	if c.PodPidsLimit != nil {
		pidsLimit = *c.PodPidsLimit
	}
	cgroups, err := cm.New(cm.Options{CgroupRoot: c.CgroupRoot, PodPidsLimit: pidsLimit, NoCPUQuota: !*c.CPUCFSQuota, Systemd: driver == "systemd",
		HugePageSizes: hugePageSizes})
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	if err := cgroups.Setup(enforced); err != nil {
		return nil, fmt.Errorf("setting up the QoS cgroups: %w", err)
	}
	klog.InfoS("QoS cgroups ready", "cgroupVersion", cgroups.Version(), "cgroupDriver", driver, "cgroupRoot", c.CgroupRoot,
		"kubepods", cgroups.QoSCgroup(v1.PodQOSGuaranteed))
	return cgroups, nil
}
