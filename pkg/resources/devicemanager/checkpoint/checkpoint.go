// Package checkpoint is the device manager's checkpoint,
// <root>/device-plugins/kubelet_internal_checkpoint, in the upstream
// kubelet's format: which devices each container holds, with the
// plugin's Allocate answer for it, and the devices each resource had.
// Its types carry upstream's names, because the checksum is computed
// over a dump of them that names their types; so the kubelet and
// nodelet read each other's file and a node moves between them with its
// containers keeping their devices.
package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/nodelet/nodelet/pkg/infra/checksum"
	"github.com/nodelet/nodelet/pkg/pods/poddirs"
)

// File is the checkpoint's name in the device plugin directory.
const File = "kubelet_internal_checkpoint"

// NoTopology is the NUMA node of devices without topology.
const NoTopology = -1

// DevicesPerNUMA are device IDs by NUMA node.
type DevicesPerNUMA map[int64][]string

// PodDevicesEntry is one container's devices of one resource.
type PodDevicesEntry struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     DevicesPerNUMA
	// AllocResp is the plugin's ContainerAllocateResponse, as protobuf.
	AllocResp []byte
}

type checkpointData struct {
	PodDeviceEntries  []PodDevicesEntry
	RegisteredDevices map[string][]string
}

// Data is the file.
type Data struct {
	Data     checkpointData
	Checksum uint64
}

// New is a checkpoint of the entries and the resources' devices.
func New(entries []PodDevicesEntry, registered map[string][]string) *Data {
	if entries == nil {
		entries = []PodDevicesEntry{}
	}
	if registered == nil {
		registered = map[string][]string{}
	}
	return &Data{Data: checkpointData{PodDeviceEntries: entries, RegisteredDevices: registered}}
}

// Entries are the containers' devices.
func (d *Data) Entries() []PodDevicesEntry { return d.Data.PodDeviceEntries }

// Registered are the devices each resource had.
func (d *Data) Registered() map[string][]string { return d.Data.RegisteredDevices }

// Marshal is the file's content, with upstream's checksum.
func (d *Data) Marshal() ([]byte, error) {
	d.Checksum = checksum.Dump(d.Data)
	return json.Marshal(*d)
}

// Unmarshal reads and verifies a file.
func Unmarshal(b []byte) (*Data, error) {
	d := New(nil, nil)
	if err := json.Unmarshal(b, d); err != nil {
		return nil, err
	}
	if sum := checksum.Dump(d.Data); sum != d.Checksum {
		return nil, fmt.Errorf("checksum %d does not match the data (%d)", d.Checksum, sum)
	}
	return d, nil
}

// Load reads the file at path; an empty checkpoint without one.
func Load(path string) (*Data, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return New(nil, nil), nil
	}
	if err != nil {
		return nil, err
	}
	d, err := Unmarshal(b)
	if err != nil {
		return nil, fmt.Errorf("device manager checkpoint %s is corrupt: %w", path, err)
	}
	return d, nil
}

// Save writes the file, durably.
func (d *Data) Save(path string) error {
	b, err := d.Marshal()
	if err != nil {
		return err
	}
	return poddirs.WriteFileDurable(path, b, 0o600)
}
