// Package userns gives each pod that asks for it (hostUsers: false) a
// user namespace of its own: a range of host user and group IDs no other
// pod has, mapped from 0 in the pod, so the pod's root is nobody on the
// host.
//
// Ranges are taken from the node's range, as upstream takes them: the
// kubelet entry of /etc/subuid and /etc/subgid (which must agree), or by
// default every ID from idsPerPod up. Each pod's range is written to
// <root>/pods/<uid>/userns, in upstream's format, before its sandbox is
// made, so a restarted nodelet (or the upstream kubelet) gives the pod
// the same range and never hands it to another pod while the pod's
// directory remains.
package userns

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/pods/poddirs"
)

// DefaultIDsPerPod is upstream's idsPerPod default, and the unit every
// range is a multiple of.
const DefaultIDsPerPod = 65536

// mappingsFile is the name of a pod's range file in its directory.
const mappingsFile = "userns"

// Options are what the allocator depends on.
type Options struct {
	RootDir string
	// IDsPerPod is the length of each pod's range (0: 65536).
	IDsPerPod uint32
	MaxPods   int
	// SubUID and SubGID are the files naming the node's range
	// (/etc/subuid and /etc/subgid when empty).
	SubUID, SubGID string
}

// Allocator hands out and remembers pods' ranges.
type Allocator struct {
	dirs   poddirs.Root
	length uint32
	// first is the first block (range index) of the node's range, count
	// the number of blocks in it.
	first, count uint32

	mu    sync.Mutex
	used  map[uint32]types.UID
	byPod map[types.UID]uint32
}

// New reads the node's range and every range already written under the
// root directory. A range file that cannot be read fails the start, as
// upstream's does: handing its range to another pod could give two pods
// the same host IDs.
func New(o Options) (*Allocator, error) {
	if o.IDsPerPod == 0 {
		o.IDsPerPod = DefaultIDsPerPod
	}
	if o.IDsPerPod%DefaultIDsPerPod != 0 {
		return nil, fmt.Errorf("userNamespaces.idsPerPod %d is not a multiple of %d", o.IDsPerPod, DefaultIDsPerPod)
	}
	start, length, err := nodeRange(o.SubUID, o.SubGID, o.IDsPerPod)
	if err != nil {
		return nil, err
	}
	if err := checkRange(start, length, o.IDsPerPod, o.MaxPods); err != nil {
		return nil, err
	}
	a := &Allocator{dirs: poddirs.Root(o.RootDir), length: o.IDsPerPod, first: start / o.IDsPerPod, count: length / o.IDsPerPod,
		used: map[uint32]types.UID{}, byPod: map[types.UID]uint32{}}
	return a, a.recordExisting()
}

func checkRange(start, length, perPod uint32, maxPods int) error {
	switch {
	case start%perPod != 0:
		return fmt.Errorf("user namespaces: the node's first ID %d is not a multiple of %d", start, perPod)
	case start < perPod:
		return fmt.Errorf("user namespaces: the node's first ID %d must be at least %d", start, perPod)
	case length%perPod != 0:
		return fmt.Errorf("user namespaces: the node's range length %d is not a multiple of %d", length, perPod)
	case int64(length/perPod) < int64(maxPods):
		return fmt.Errorf("user namespaces: the node's range (%d IDs) is not enough for %d pods of %d IDs", length, maxPods, perPod)
	}
	return nil
}

// recordExisting takes back the ranges of pods that have a directory.
func (a *Allocator) recordExisting() error {
	entries, err := os.ReadDir(a.dirs.Pods())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		uid := types.UID(e.Name())
		m, err := a.read(uid)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil {
			err = a.record(uid, m.UIDMappings[0].HostID)
		}
		if err != nil {
			return fmt.Errorf("user namespace of pod %s: %w", uid, err)
		}
	}
	return nil
}

// Namespace is the user namespace of a pod's sandbox and containers:
// the node's for pods that do not ask for one, else the pod's range,
// allocated and written down the first time.
func (a *Allocator) Namespace(pod *v1.Pod) (*runtimeapi.UserNamespace, error) {
	if pod.Spec.HostUsers == nil || *pod.Spec.HostUsers {
		return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	hostID, err := a.rangeOf(pod.UID)
	if err != nil {
		return nil, fmt.Errorf("user namespace: %w", err)
	}
	ids := []*runtimeapi.IDMapping{{HostId: hostID, ContainerId: 0, Length: a.length}}
	return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: ids, Gids: ids}, nil
}

// rangeOf returns the pod's first host ID: remembered, read from its
// file, or allocated now and written down.
func (a *Allocator) rangeOf(uid types.UID) (uint32, error) {
	if block, ok := a.byPod[uid]; ok {
		return block * a.length, nil
	}
	m, err := a.read(uid)
	if err == nil {
		host := m.UIDMappings[0].HostID
		return host, a.record(uid, host)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	block, ok := a.free()
	if !ok {
		return 0, fmt.Errorf("no free range of %d IDs left in the node's range", a.length)
	}
	host := block * a.length
	if err := a.write(uid, host); err != nil {
		return 0, err
	}
	return host, a.record(uid, host)
}

// free picks a free block, starting at a random one so that a range
// just released is not the next one handed out.
func (a *Allocator) free() (uint32, bool) {
	start := rand.Uint32N(a.count)
	for i := uint32(0); i < a.count; i++ {
		block := a.first + (start+i)%a.count
		if _, taken := a.used[block]; !taken {
			return block, true
		}
	}
	return 0, false
}

func (a *Allocator) record(uid types.UID, host uint32) error {
	if host%a.length != 0 {
		return fmt.Errorf("range starting at %d is not aligned to %d", host, a.length)
	}
	block := host / a.length
	if block < a.first || block >= a.first+a.count {
		return fmt.Errorf("range starting at %d is outside the node's range", host)
	}
	if other, taken := a.used[block]; taken && other != uid {
		return fmt.Errorf("range starting at %d is already pod %s's", host, other)
	}
	a.used[block], a.byPod[uid] = uid, block
	return nil
}

// Release frees the range of a pod whose directory is gone.
func (a *Allocator) Release(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if block, ok := a.byPod[uid]; ok {
		delete(a.used, block)
		delete(a.byPod, uid)
		klog.V(4).InfoS("Released the pod's user namespace", "podUID", uid, "firstHostID", block*a.length)
	}
}

// mappings is upstream's range file.
type mappings struct {
	UIDMappings []idMapping `json:"uidMappings"`
	GIDMappings []idMapping `json:"gidMappings"`
}

type idMapping struct {
	HostID      uint32 `json:"hostId"`
	ContainerID uint32 `json:"containerId"`
	Length      uint32 `json:"length"`
}

func (a *Allocator) path(uid types.UID) string {
	return filepath.Join(a.dirs.Pod(uid), mappingsFile)
}

// read reads and checks a pod's range file, as upstream checks it.
func (a *Allocator) read(uid types.UID) (mappings, error) {
	var m mappings
	data, err := os.ReadFile(a.path(uid))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("invalid user namespace file %s: %w", a.path(uid), err)
	}
	if len(m.UIDMappings) != 1 || len(m.GIDMappings) != 1 || m.UIDMappings[0] != m.GIDMappings[0] {
		return m, fmt.Errorf("invalid user namespace file %s: want one mapping, the same for users and groups", a.path(uid))
	}
	if u := m.UIDMappings[0]; u.ContainerID != 0 || u.Length != a.length {
		return m, fmt.Errorf("invalid user namespace file %s: want IDs 0-%d mapped", a.path(uid), a.length-1)
	}
	return m, nil
}

// write writes a pod's range file whole (a temporary file renamed).
func (a *Allocator) write(uid types.UID, host uint32) error {
	id := idMapping{HostID: host, ContainerID: 0, Length: a.length}
	data, err := json.Marshal(mappings{UIDMappings: []idMapping{id}, GIDMappings: []idMapping{id}})
	if err != nil {
		return err
	}
	if err := poddirs.WriteFileAtomic(a.path(uid), data, 0o600); err != nil {
		return fmt.Errorf("writing the pod's user namespace: %w", err)
	}
	return nil
}
