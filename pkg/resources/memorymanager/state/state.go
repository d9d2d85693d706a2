// Package state is the memory manager's state and its file,
// <root>/memory_manager_state, in the upstream kubelet's format. Its
// types carry upstream's names (the file's checksum is computed over a
// dump of them that names their types), so the kubelet and nodelet read
// each other's files.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/infra/checksum"
	"github.com/nodelet/nodelet/pkg/pods/poddirs"
)

// File is the state file's name in the root directory.
const File = "memory_manager_state"

// MemoryTable is one memory type of one NUMA node, in bytes.
type MemoryTable struct {
	TotalMemSize   uint64 `json:"total"`
	SystemReserved uint64 `json:"systemReserved"`
	Allocatable    uint64 `json:"allocatable"`
	Reserved       uint64 `json:"reserved"`
	Free           uint64 `json:"free"`
}

// NUMANodeState is one NUMA node: its memory types, how many
// allocations use it, and the nodes it is grouped with (itself, or the
// set a multi-node allocation spans: a node serves single-node or
// multi-node allocations, never both).
type NUMANodeState struct {
	NumberOfAssignments int                              `json:"numberOfAssignments"`
	MemoryMap           map[v1.ResourceName]*MemoryTable `json:"memoryMap"`
	Cells               []int                            `json:"cells"`
}

// NUMANodeMap is the machine's NUMA nodes by ID.
type NUMANodeMap map[int]*NUMANodeState

// Clone is a deep copy.
func (m NUMANodeMap) Clone() NUMANodeMap {
	out := NUMANodeMap{}
	for id, n := range m {
		c := &NUMANodeState{NumberOfAssignments: n.NumberOfAssignments, Cells: append([]int(nil), n.Cells...), MemoryMap: map[v1.ResourceName]*MemoryTable{}}
		for r, t := range n.MemoryMap {
			tc := *t
			c.MemoryMap[r] = &tc
		}
		out[id] = c
	}
	return out
}

// Block is memory of one type given to a container on some NUMA nodes.
type Block struct {
	NUMAAffinity []int           `json:"numaAffinity"`
	Type         v1.ResourceName `json:"type"`
	Size         uint64          `json:"size"`
}

// ContainerMemoryAssignments are the containers' blocks, by pod UID and
// container name.
type ContainerMemoryAssignments map[string]map[string][]Block

// State is the whole state.
type State struct {
	Policy  string
	Machine NUMANodeMap
	Entries ContainerMemoryAssignments
}

// checkpointData is upstream's MemoryManagerCheckpointData.
type checkpointData struct {
	PolicyName   string                     `json:"policyName"`
	MachineState NUMANodeMap                `json:"machineState"`
	Entries      ContainerMemoryAssignments `json:"entries,omitempty"`
}

// memoryManagerCheckpointV1 is upstream's MemoryManagerCheckpointV1, the
// fields kubelets before v1.36 read, checksummed under the name
// MemoryManagerCheckpoint.
type memoryManagerCheckpointV1 struct {
	PolicyName   string                     `json:"policyName"`
	MachineState NUMANodeMap                `json:"machineState"`
	Entries      ContainerMemoryAssignments `json:"entries,omitempty"`
	Checksum     uint64                     `json:"checksum"`
}

func (c *memoryManagerCheckpointV1) checksum() uint64 {
	return checksum.DumpZeroed(c, &c.Checksum, "state.memoryManagerCheckpointV1", "state.MemoryManagerCheckpoint", "Checksum:(uint64)", "Checksum:(checksum.Checksum)")
}

type checkpointFile struct {
	memoryManagerCheckpointV1 `json:",inline"`
	Data                      string `json:"data"`
	DataChecksum              uint64 `json:"dataChecksum"`
}

// Encode is the file's content, as upstream's v3 writes it.
func (s *State) Encode() ([]byte, error) {
	d := checkpointData{PolicyName: s.Policy, MachineState: s.Machine, Entries: s.Entries}
	data, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	f := checkpointFile{memoryManagerCheckpointV1: memoryManagerCheckpointV1{PolicyName: s.Policy, MachineState: s.Machine, Entries: s.Entries}, Data: string(data)}
	f.DataChecksum = checksum.Dump(f.Data)
	f.Checksum = f.memoryManagerCheckpointV1.checksum()
	return json.Marshal(f)
}

// Decode reads a file written by nodelet or the kubelet (v3, or v1 from
// kubelets before v1.36).
func Decode(b []byte) (*State, error) {
	var f checkpointFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	if f.Data != "" {
		if sum := checksum.Dump(f.Data); sum != f.DataChecksum {
			return nil, fmt.Errorf("data checksum %d does not match its data (%d)", f.DataChecksum, sum)
		}
		var d checkpointData
		if err := json.Unmarshal([]byte(f.Data), &d); err != nil {
			return nil, err
		}
		return &State{Policy: d.PolicyName, Machine: d.MachineState, Entries: orEmpty(d.Entries)}, nil
	}
	if sum := f.memoryManagerCheckpointV1.checksum(); f.Checksum != 0 && sum != f.Checksum {
		return nil, fmt.Errorf("checksum %d does not match the data (%d)", f.Checksum, sum)
	}
	return &State{Policy: f.PolicyName, Machine: f.MachineState, Entries: orEmpty(f.Entries)}, nil
}

func orEmpty(e ContainerMemoryAssignments) ContainerMemoryAssignments {
	if e == nil {
		return ContainerMemoryAssignments{}
	}
	return e
}

// Load reads the file; nil without one.
func Load(path string) (*State, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("memory manager state %s is corrupt: %w", path, err)
	}
	return s, nil
}

// Save writes the file, durably.
func (s *State) Save(path string) error {
	b, err := s.Encode()
	if err != nil {
		return err
	}
	return poddirs.WriteFileDurable(path, b, 0o600)
}

// NodeIDs lists the machine's NUMA nodes, ascending.
func (m NUMANodeMap) NodeIDs() []int {
	ids := make([]int, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}
