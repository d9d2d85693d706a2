// Command checkpoints writes the resource managers' checkpoint files as
// the upstream kubelet writes them, with its own code, for fixed data:
// nodelet's unit tests read them (it must read what the kubelet left on
// a node) and compare its own output with them (the kubelet must read
// what nodelet leaves).
//
// Usage (from hack/cluster/tools):
//
//	go run ./checkpoints -out ../../../pkg
//
// writes pkg/resources/cpumanager/testdata/upstream_*, pkg/resources/memorymanager/testdata/upstream_*,
// pkg/resources/devicemanager/checkpoint/testdata/upstream_* and pkg/resources/dra/testdata/upstream_*.
package main

import (
	"flag"
	"log"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	cpustate "k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state"
	devcheckpoint "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/checkpoint"
	drastate "k8s.io/kubernetes/pkg/kubelet/cm/dra/state"
	memstate "k8s.io/kubernetes/pkg/kubelet/cm/memorymanager/state"
	"k8s.io/utils/cpuset"
)

func main() {
	out := flag.String("out", "", "the pkg directory of nodelet's module")
	flag.Parse()
	if *out == "" {
		log.Fatal("-out is required")
	}
	cpu(filepath.Join(*out, "cpumanager", "testdata"))
	memory(filepath.Join(*out, "memorymanager", "testdata"))
	devices(filepath.Join(*out, "devicemanager", "checkpoint", "testdata"))
	dra(filepath.Join(*out, "dra", "testdata"))
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func write(dir, name string, b []byte) {
	must(os.MkdirAll(dir, 0o755))
	must(os.WriteFile(filepath.Join(dir, name), b, 0o644))
}

// cpu: a static policy state, through the kubelet's own state code (v4),
// and the v2 file kubelets before v1.36 wrote.
func cpu(dir string) {
	tmp, err := os.MkdirTemp("", "cpustate")
	must(err)
	defer os.RemoveAll(tmp)
	s, err := cpustate.NewCheckpointState(klog.Background(), tmp, "cpu_manager_state", "static", containermap.NewContainerMap())
	must(err)
	s.SetDefaultCPUSet(cpuset.New(0, 3, 4, 5, 6, 7))
	s.SetCPUSet("pod-a", "c1", cpuset.New(1, 2))
	b, err := os.ReadFile(filepath.Join(tmp, "cpu_manager_state"))
	must(err)
	write(dir, "upstream_cpu_manager_state", b)

	v2 := &cpustate.CPUManagerCheckpointV2{PolicyName: "static", DefaultCPUSet: "0,3-7",
		Entries: map[string]map[string]string{"pod-a": {"c1": "1-2"}}}
	b, err = v2.MarshalCheckpoint()
	must(err)
	write(dir, "upstream_cpu_manager_state_v2", b)
}

// memory: a static policy state on two NUMA nodes, one container pinned
// to node 1.
func memory(dir string) {
	tmp, err := os.MkdirTemp("", "memstate")
	must(err)
	defer os.RemoveAll(tmp)
	s, err := memstate.NewCheckpointState(klog.Background(), tmp, "memory_manager_state", "Static")
	must(err)
	table := func(total, reserved, used uint64) *memstate.MemoryTable {
		return &memstate.MemoryTable{TotalMemSize: total, SystemReserved: reserved, Allocatable: total - reserved, Reserved: used, Free: total - reserved - used}
	}
	s.SetMachineState(memstate.NUMANodeMap{
		0: {NumberOfAssignments: 0, Cells: []int{0}, MemoryMap: map[v1.ResourceName]*memstate.MemoryTable{
			v1.ResourceMemory: table(4<<30, 512<<20, 0), "hugepages-2Mi": table(0, 0, 0)}},
		1: {NumberOfAssignments: 1, Cells: []int{1}, MemoryMap: map[v1.ResourceName]*memstate.MemoryTable{
			v1.ResourceMemory: table(4<<30, 0, 1<<30), "hugepages-2Mi": table(0, 0, 0)}},
	})
	s.SetMemoryBlocks("pod-a", "c1", []memstate.Block{{NUMAAffinity: []int{1}, Type: v1.ResourceMemory, Size: 1 << 30}})
	b, err := os.ReadFile(filepath.Join(tmp, "memory_manager_state"))
	must(err)
	write(dir, "upstream_memory_manager_state", b)
}

// devices: two devices of example.com/resource given to one container.
func devices(dir string) {
	resp, err := proto.Marshal(&pluginapi.ContainerAllocateResponse{
		Envs:       map[string]string{"EXAMPLE": "1"},
		Mounts:     []*pluginapi.Mount{{ContainerPath: "/tmp/Dev-1", HostPath: "/tmp/Dev-1"}},
		CdiDevices: []*pluginapi.CDIDevice{{Name: "example.com/resource=CDI-Dev-1"}},
	})
	must(err)
	cp := devcheckpoint.New([]devcheckpoint.PodDevicesEntry{{
		PodUID: "pod-a", ContainerName: "c1", ResourceName: "example.com/resource",
		DeviceIDs: devcheckpoint.DevicesPerNUMA{-1: {"Dev-1", "Dev-2"}}, AllocResp: resp,
	}}, map[string][]string{"example.com/resource": {"Dev-1", "Dev-2"}})
	b, err := cp.MarshalCheckpoint()
	must(err)
	write(dir, "upstream_kubelet_internal_checkpoint", b)
}

// dra: one claim prepared by one driver for one pod.
func dra(dir string) {
	cp, err := drastate.NewCheckpoint(drastate.ClaimInfoStateList{{
		ClaimUID: types.UID("claim-uid"), ClaimName: "gpu", Namespace: "ns", PodUIDs: sets.New("pod-a"),
		DriverState: map[string]drastate.DriverState{"test-driver.cdi.k8s.io": {Devices: []drastate.Device{{
			PoolName: "node-1", DeviceName: "device-00", RequestNames: []string{"gpu"},
			CDIDeviceIDs: []string{"test-driver.cdi.k8s.io/test=claim-claim-uid-gpu"},
		}}}},
	}})
	must(err)
	b, err := cp.MarshalCheckpoint()
	must(err)
	write(dir, "upstream_dra_manager_state", b)
}
