package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/nodelet/nodelet/pkg/pods/poddirs"
)

// StateFile is the DRA manager's checkpoint in the root directory, in
// upstream's name and format: the claims prepared on the node, the pods
// using each, and each driver's devices with their CDI device IDs.
const StateFile = "dra_manager_state"

// Upstream's checkpoint kind and version.
const (
	checkpointKind       = "DRACheckpoint"
	checkpointAPIVersion = "checkpoint.dra.kubelet.k8s.io/v1"
)

// ClaimState is one claim as the node knows it (upstream's
// ClaimInfoState).
type ClaimState struct {
	ClaimUID    types.UID
	ClaimName   string
	Namespace   string
	PodUIDs     sets.Set[string]
	DriverState map[string]DriverState
}

// DriverState is what one driver prepared for a claim.
type DriverState struct {
	Devices []Device
}

// Device is one prepared device.
type Device struct {
	PoolName     string
	DeviceName   string
	ShareID      *types.UID
	RequestNames []string
	CDIDeviceIDs []string
}

type checkpointData struct {
	metav1.TypeMeta
	ClaimInfoStateList []ClaimState
}

type checkpoint struct {
	Data     string
	Checksum uint32
}

// encodeState is the checkpoint file of the claims, as upstream writes it.
func encodeState(claims []ClaimState) ([]byte, error) {
	data, err := json.Marshal(checkpointData{TypeMeta: metav1.TypeMeta{Kind: checkpointKind, APIVersion: checkpointAPIVersion}, ClaimInfoStateList: claims})
	if err != nil {
		return nil, err
	}
	return json.Marshal(checkpoint{Data: string(data), Checksum: crc32.ChecksumIEEE(data)})
}

// decodeState reads a checkpoint file, nodelet's or the kubelet's.
func decodeState(b []byte) ([]ClaimState, error) {
	var cp checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return nil, err
	}
	if sum := crc32.ChecksumIEEE([]byte(cp.Data)); sum != cp.Checksum {
		return nil, fmt.Errorf("checksum %d does not match the data (%d)", cp.Checksum, sum)
	}
	var d checkpointData
	if err := json.Unmarshal([]byte(cp.Data), &d); err != nil {
		return nil, err
	}
	if d.Kind != checkpointKind || d.APIVersion != checkpointAPIVersion {
		return nil, fmt.Errorf("unknown checkpoint %s %s", d.APIVersion, d.Kind)
	}
	return d.ClaimInfoStateList, nil
}

func loadState(path string) ([]ClaimState, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	claims, err := decodeState(b)
	if err != nil {
		return nil, fmt.Errorf("DRA manager state %s is corrupt: %w", path, err)
	}
	return claims, nil
}

func saveState(path string, claims []ClaimState) error {
	b, err := encodeState(claims)
	if err != nil {
		return err
	}
	return poddirs.WriteFileDurable(path, b, 0o600)
}
