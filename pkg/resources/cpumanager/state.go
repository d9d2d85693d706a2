package cpumanager

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/pkg/infra/checksum"
	"github.com/nodelet/nodelet/pkg/pods/poddirs"
)

// StateFile is the CPU manager's state in the root directory, upstream's
// name and format: the shared pool and each container's exclusive CPUs.
const StateFile = "cpu_manager_state"

// state is the CPU manager's: the shared (default) set and the CPUs
// assigned to containers, by pod UID and container name.
type state struct {
	policy      string
	defaultSet  cpuset.CPUSet
	assignments map[string]map[string]cpuset.CPUSet
}

func newState(policy string) *state {
	return &state{policy: policy, defaultSet: cpuset.New(), assignments: map[string]map[string]cpuset.CPUSet{}}
}

func (s *state) cpus(pod, container string) (cpuset.CPUSet, bool) {
	c, ok := s.assignments[pod][container]
	return c, ok
}

func (s *state) set(pod, container string, cpus cpuset.CPUSet) {
	if s.assignments[pod] == nil {
		s.assignments[pod] = map[string]cpuset.CPUSet{}
	}
	s.assignments[pod][container] = cpus
}

func (s *state) remove(pod, container string) {
	delete(s.assignments[pod], container)
	if len(s.assignments[pod]) == 0 {
		delete(s.assignments, pod)
	}
}

// The file is upstream's v4 checkpoint: the data as a JSON string with
// its own checksum, beside the v2 fields (and their checksum) that
// kubelets before v1.36 read.
type checkpointData struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries,omitempty"`
}

// checkpointV2 is upstream's CPUManagerCheckpointV2, whose checksum is
// computed under the name CPUManagerCheckpoint.
type checkpointV2 struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries,omitempty"`
	Checksum      uint64                       `json:"checksum"`
}

type checkpointFile struct {
	checkpointV2 `json:",inline"`
	Data         string `json:"data"`
	DataChecksum uint64 `json:"dataChecksum"`
}

func (c *checkpointV2) checksum() uint64 {
	return checksum.DumpZeroed(c, &c.Checksum, "cpumanager.checkpointV2", "state.CPUManagerCheckpoint", "Checksum:(uint64)", "Checksum:(checksum.Checksum)")
}

func (s *state) encode() ([]byte, error) {
	d := checkpointData{PolicyName: s.policy, DefaultCPUSet: s.defaultSet.String(), Entries: map[string]map[string]string{}}
	for pod, cs := range s.assignments {
		d.Entries[pod] = map[string]string{}
		for c, cpus := range cs {
			d.Entries[pod][c] = cpus.String()
		}
	}
	data, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	f := checkpointFile{checkpointV2: checkpointV2{PolicyName: d.PolicyName, DefaultCPUSet: d.DefaultCPUSet, Entries: d.Entries}, Data: string(data)}
	f.DataChecksum = checksum.Dump(f.Data)
	f.Checksum = f.checkpointV2.checksum()
	return json.Marshal(f)
}

// decode reads a checkpoint written by nodelet or the kubelet: v4 (the
// data string) or, from kubelets before v1.36, v2.
func decode(b []byte) (checkpointData, error) {
	var f checkpointFile
	if err := json.Unmarshal(b, &f); err != nil {
		return checkpointData{}, err
	}
	if f.Data != "" {
		if sum := checksum.Dump(f.Data); sum != f.DataChecksum {
			return checkpointData{}, fmt.Errorf("data checksum %d does not match its data (%d)", f.DataChecksum, sum)
		}
		var d checkpointData
		err := json.Unmarshal([]byte(f.Data), &d)
		return d, err
	}
	// A zero checksum is accepted, as upstream accepts it, for files
	// written before checksums.
	if sum := f.checkpointV2.checksum(); f.Checksum != 0 && sum != f.Checksum {
		return checkpointData{}, fmt.Errorf("checksum %d does not match the data (%d)", f.Checksum, sum)
	}
	return checkpointData{PolicyName: f.PolicyName, DefaultCPUSet: f.DefaultCPUSet, Entries: f.Entries}, nil
}

// loadState reads the state file; a missing file is an empty state. A
// file of another policy is an error, as upstream's: its assignments
// would not hold under this one (drain the node, remove the file).
func loadState(path, policy string) (*state, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return newState(policy), nil
	}
	if err != nil {
		return nil, err
	}
	d, err := decode(b)
	if err != nil {
		return nil, fmt.Errorf("CPU manager state %s is corrupt: %w", path, err)
	}
	if d.PolicyName != policy {
		return nil, fmt.Errorf("CPU manager state %s was written for policy %q, not the configured %q: drain the node and remove the file", path, d.PolicyName, policy)
	}
	s := newState(policy)
	if s.defaultSet, err = cpuset.Parse(d.DefaultCPUSet); err != nil {
		return nil, fmt.Errorf("CPU manager state %s: default set %q: %w", path, d.DefaultCPUSet, err)
	}
	for pod, cs := range d.Entries {
		for c, text := range cs {
			cpus, err := cpuset.Parse(text)
			if err != nil {
				return nil, fmt.Errorf("CPU manager state %s: pod %s container %s: %w", path, pod, c, err)
			}
			s.set(pod, c, cpus)
		}
	}
	return s, nil
}

func (s *state) save(path string) error {
	b, err := s.encode()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	return poddirs.WriteFileDurable(path, b, 0o600)
}
