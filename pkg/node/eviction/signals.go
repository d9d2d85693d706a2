package eviction

import (
	"fmt"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// Eviction signals, as upstream names them in evictionHard.
const (
	SignalMemoryAvailable   = "memory.available"
	SignalNodeFsAvailable   = "nodefs.available"
	SignalNodeFsInodesFree  = "nodefs.inodesFree"
	SignalImageFsAvailable  = "imagefs.available"
	SignalImageFsInodesFree = "imagefs.inodesFree"
	SignalPIDAvailable      = "pid.available"
)

// signalCondition is the node condition each signal drives.
var signalCondition = map[string]v1.NodeConditionType{
	SignalMemoryAvailable:   v1.NodeMemoryPressure,
	SignalNodeFsAvailable:   v1.NodeDiskPressure,
	SignalNodeFsInodesFree:  v1.NodeDiskPressure,
	SignalImageFsAvailable:  v1.NodeDiskPressure,
	SignalImageFsInodesFree: v1.NodeDiskPressure,
	SignalPIDAvailable:      v1.NodePIDPressure,
}

// DefaultEvictionHard is upstream's default evictionHard on Linux: the
// pressure conditions and eviction watch all of it, and allocatable holds
// back its memory.available and nodefs.available.
var DefaultEvictionHard = map[string]string{
	SignalMemoryAvailable: "100Mi", SignalNodeFsAvailable: "10%", SignalNodeFsInodesFree: "5%",
	SignalImageFsAvailable: "15%", SignalImageFsInodesFree: "5%",
}

// limit is a minimum of something available: an absolute amount or a
// fraction of capacity.
type limit struct {
	amount  int64
	percent float64
}

func (t limit) min(capacity uint64) uint64 {
	if t.percent > 0 {
		return uint64(float64(capacity) * t.percent / 100)
	}
	return uint64(t.amount)
}

// Thresholds are the parsed evictionHard thresholds, by signal.
type Thresholds map[string]limit

// ParseThresholds reads evictionHard. Unknown signals are an error, so a
// typo does not silently disable a condition.
func ParseThresholds(evictionHard map[string]string) (Thresholds, error) {
	out := Thresholds{}
	for signal, v := range evictionHard {
		if _, ok := signalCondition[signal]; !ok {
			return nil, fmt.Errorf("unknown signal %q", signal)
		}
		if pct, isPct := strings.CutSuffix(v, "%"); isPct {
			f, err := strconv.ParseFloat(pct, 64)
			if err != nil || f < 0 || f > 100 {
				return nil, fmt.Errorf("%s=%q is not a percentage", signal, v)
			}
			if f > 0 {
				out[signal] = limit{percent: f}
			}
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: %w", signal, v, err)
		}
		if q.Sign() > 0 {
			out[signal] = limit{amount: q.Value()}
		}
	}
	return out, nil
}

// Reading is one signal's reading: how much is available of how much.
type Reading struct{ Available, Capacity uint64 }

// Readings reads every signal the node stats cover.
func Readings(n *statsapi.NodeStats) map[string]Reading {
	m := map[string]Reading{}
	add := func(signal string, available, capacity *uint64) {
		if available != nil && capacity != nil {
			m[signal] = Reading{*available, *capacity}
		}
	}
	if mem := n.Memory; mem != nil && mem.AvailableBytes != nil && mem.WorkingSetBytes != nil {
		capacity := *mem.AvailableBytes + *mem.WorkingSetBytes
		add(SignalMemoryAvailable, mem.AvailableBytes, &capacity)
	}
	if fs := n.Fs; fs != nil {
		add(SignalNodeFsAvailable, fs.AvailableBytes, fs.CapacityBytes)
		add(SignalNodeFsInodesFree, fs.InodesFree, fs.Inodes)
	}
	if n.Runtime != nil && n.Runtime.ImageFs != nil {
		fs := n.Runtime.ImageFs
		add(SignalImageFsAvailable, fs.AvailableBytes, fs.CapacityBytes)
		add(SignalImageFsInodesFree, fs.InodesFree, fs.Inodes)
	}
	if r := n.Rlimit; r != nil && r.MaxPID != nil && r.NumOfRunningProcesses != nil {
		capacity := uint64(*r.MaxPID)
		available := uint64(max(*r.MaxPID-*r.NumOfRunningProcesses, 0))
		add(SignalPIDAvailable, &available, &capacity)
	}
	return m
}

// Min is the least that must stay available of the signal, given its
// capacity; false when the signal has no threshold.
func (th Thresholds) Min(signal string, capacity uint64) (uint64, bool) {
	t, ok := th[signal]
	if !ok {
		return 0, false
	}
	return t.min(capacity), true
}
