// Package nodestatus describes the node nodelet runs on: its capacity and
// allocatable resources measured from the machine, its labels, addresses
// and system information. Admission checks pods against it; in cluster
// mode it becomes the Node object nodelet registers and keeps up to date.
package nodestatus

import (
	"bufio"
	"fmt"
	"os"
	goruntime "runtime"
	"strings"
	"syscall"

	"github.com/nodelet/nodelet/pkg/node/eviction"
	"github.com/nodelet/nodelet/pkg/resources/numa"
	"github.com/prometheus/procfs"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Well-known node labels nodelet sets, as the kubelet does.
const (
	LabelHostname = "kubernetes.io/hostname"
	LabelOS       = "kubernetes.io/os"
	LabelArch     = "kubernetes.io/arch"
)

// Config is what the node's description depends on besides the machine.
type Config struct {
	NodeName string
	// RootDir's filesystem is the node's ephemeral storage.
	RootDir string
	MaxPods int
	// Reserved is subtracted from capacity: systemReserved, kubeReserved
	// and the hard eviction thresholds, added up.
	Reserved v1.ResourceList
	// Labels are extra labels (--node-labels).
	Labels  map[string]string
	HostIPs []string
}

// ControllerManagedAttachAnnotation marks a Node whose volumes the
// attach/detach controller attaches (enableControllerAttachDetach, which
// nodelet requires): without it the controller leaves the node's
// VolumeAttachments alone.
const ControllerManagedAttachAnnotation = "volumes.kubernetes.io/controller-managed-attach-detach"

// Cloud provider keys (k8s.io/cloud-provider/api): the taint a node
// registered with --cloud-provider=external carries until a cloud
// controller has initialized it, and the annotation that hands the
// controller the --node-ip addresses.
const (
	TaintExternalCloudProvider  = "node.cloudprovider.kubernetes.io/uninitialized"
	AnnotationProvidedIPAddress = "alpha.kubernetes.io/provided-node-ip"
)

// ForExternalCloudProvider prepares a node for a cloud controller, as the
// kubelet does with --cloud-provider=external: it registers tainted
// uninitialized; the --node-ip addresses (nodeIPs, when given) are handed
// over in an annotation and reported until the controller sets its own;
// without them only the hostname is reported.
func ForExternalCloudProvider(n *v1.Node, nodeIPs []string) {
	n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: TaintExternalCloudProvider, Value: "true", Effect: v1.TaintEffectNoSchedule})
	if len(nodeIPs) > 0 {
		n.Annotations[AnnotationProvidedIPAddress] = strings.Join(nodeIPs, ",")
		return
	}
	n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeHostName, Address: n.Name}}
}

// Machine is what was measured about the machine.
type Machine struct {
	CPUs             int
	MemoryBytes      int64
	EphemeralStorage int64
	KernelVersion    string
	OSImage          string
	MachineID        string
	BootID           string
	// HugePages maps a page size in bytes to the machine's pages of it
	// (pre-allocated, so not regular memory).
	HugePages map[int64]int64
}

// Measure reads the machine's resources and identity.
func Measure(rootDir string) (Machine, error) {
	m := Machine{CPUs: goruntime.NumCPU()}
	mem, err := memTotal()
	if err != nil {
		return m, err
	}
	m.MemoryBytes = mem
	var st syscall.Statfs_t
	if err := syscall.Statfs(rootDir, &st); err != nil {
		return m, fmt.Errorf("measuring the filesystem of %s: %w", rootDir, err)
	}
	m.EphemeralStorage = int64(st.Blocks) * st.Bsize
	m.KernelVersion = readTrimmed("/proc/sys/kernel/osrelease")
	m.OSImage = osImage()
	m.MachineID = readTrimmed("/etc/machine-id")
	m.BootID = readTrimmed("/proc/sys/kernel/random/boot_id")
	return m, nil
}

func memTotal() (int64, error) {
	info, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, err
	}
	mem, err := info.Meminfo()
	if err != nil {
		return 0, err
	}
	if mem.MemTotalBytes == nil {
		return 0, fmt.Errorf("no MemTotal in /proc/meminfo")
	}
	return int64(*mem.MemTotalBytes), nil
}

func readTrimmed(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

func osImage() string {
	f, err := os.Open("/etc/os-release")
	if err != nil {
		return goruntime.GOOS
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return goruntime.GOOS
}

// Capacity is the machine's resources as the node offers them, each huge
// page size as hugepages-<size> (its bytes).
func Capacity(m Machine, maxPods int) v1.ResourceList {
	out := v1.ResourceList{
		v1.ResourceCPU:              *resource.NewQuantity(int64(m.CPUs), resource.DecimalSI),
		v1.ResourceMemory:           *resource.NewQuantity(m.MemoryBytes, resource.BinarySI),
		v1.ResourceEphemeralStorage: *resource.NewQuantity(m.EphemeralStorage, resource.BinarySI),
		v1.ResourcePods:             *resource.NewQuantity(int64(maxPods), resource.DecimalSI),
	}
	for size, count := range m.HugePages {
		out[numa.HugePageResource(size)] = *resource.NewQuantity(size*count, resource.BinarySI)
	}
	return out
}

// Allocatable is capacity minus what is reserved, never below zero;
// memory also less the huge pages, which are not regular memory (as
// upstream).
func Allocatable(capacity, reserved v1.ResourceList) v1.ResourceList {
	out := v1.ResourceList{}
	for name, q := range capacity {
		a := q.DeepCopy()
		if r, ok := reserved[name]; ok {
			a.Sub(r)
		}
		out[name] = a
	}
	for name, q := range capacity {
		if strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) {
			m := out[v1.ResourceMemory]
			m.Sub(q)
			out[v1.ResourceMemory] = m
		}
	}
	for name, q := range out {
		if q.Sign() < 0 {
			out[name] = *resource.NewQuantity(0, q.Format)
		}
	}
	return out
}

// Node builds the node's description from a measurement.
func Node(cfg Config, m Machine) *v1.Node {
	capacity := Capacity(m, cfg.MaxPods)
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: cfg.NodeName, Labels: map[string]string{
			LabelHostname: cfg.NodeName, LabelOS: goruntime.GOOS, LabelArch: goruntime.GOARCH,
		}, Annotations: map[string]string{ControllerManagedAttachAnnotation: "true"}},
		Status: v1.NodeStatus{
			Capacity:    capacity,
			Allocatable: Allocatable(capacity, cfg.Reserved),
			NodeInfo: v1.NodeSystemInfo{
				MachineID: m.MachineID, BootID: m.BootID, KernelVersion: m.KernelVersion, OSImage: m.OSImage,
				OperatingSystem: goruntime.GOOS, Architecture: goruntime.GOARCH,
			},
		},
	}
	for k, v := range cfg.Labels {
		n.Labels[k] = v
	}
	for _, ip := range cfg.HostIPs {
		n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip})
	}
	n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeHostName, Address: cfg.NodeName})
	return n
}

// ParseReserved adds up resource maps such as systemReserved and
// kubeReserved ({"cpu": "500m", "memory": "1Gi"}).
func ParseReserved(maps ...map[string]string) (v1.ResourceList, error) {
	out := v1.ResourceList{}
	for _, m := range maps {
		for k, v := range m {
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return nil, fmt.Errorf("reserved %s=%q: %w", k, v, err)
			}
			cur := out[v1.ResourceName(k)]
			cur.Add(q)
			out[v1.ResourceName(k)] = cur
		}
	}
	return out, nil
}

// EvictionReserved turns hard eviction thresholds into the resources they
// hold back from allocatable: memory.available from memory and
// nodefs.available from ephemeral storage, as absolute values or
// percentages of capacity.
func EvictionReserved(evictionHard map[string]string, capacity v1.ResourceList) (v1.ResourceList, error) {
	th, err := eviction.ParseThresholds(evictionHard)
	if err != nil {
		return nil, fmt.Errorf("evictionHard: %w", err)
	}
	out := v1.ResourceList{}
	for signal, res := range map[string]v1.ResourceName{eviction.SignalMemoryAvailable: v1.ResourceMemory, eviction.SignalNodeFsAvailable: v1.ResourceEphemeralStorage} {
		c := capacity[res]
		if min, ok := th.Min(signal, uint64(c.Value())); ok {
			out[res] = *resource.NewQuantity(int64(min), resource.BinarySI)
		}
	}
	return out, nil
}
