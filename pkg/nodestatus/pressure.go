package nodestatus

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/periodic"
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
// pressure conditions watch all of it, and allocatable holds back its
// memory.available and nodefs.available.
var DefaultEvictionHard = map[string]string{
	SignalMemoryAvailable: "100Mi", SignalNodeFsAvailable: "10%", SignalNodeFsInodesFree: "5%",
	SignalImageFsAvailable: "15%", SignalImageFsInodesFree: "5%",
}

// threshold is a minimum of something available: an absolute amount or
// a fraction of capacity.
type threshold struct {
	amount  int64
	percent float64
}

func (t threshold) min(capacity uint64) uint64 {
	if t.percent > 0 {
		return uint64(float64(capacity) * t.percent / 100)
	}
	return uint64(t.amount)
}

// Thresholds are the parsed evictionHard thresholds, by signal.
type Thresholds map[string]threshold

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
				out[signal] = threshold{percent: f}
			}
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: %w", signal, v, err)
		}
		if q.Sign() > 0 {
			out[signal] = threshold{amount: q.Value()}
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

// observe returns, for each signal below its threshold, a message saying
// by how much. Signals the stats do not cover are skipped.
func (th Thresholds) observe(n *statsapi.NodeStats) map[string]string {
	measures := Readings(n)
	out := map[string]string{}
	for signal, t := range th {
		v, ok := measures[signal]
		if !ok {
			continue
		}
		if want := t.min(v.Capacity); v.Available < want {
			out[signal] = fmt.Sprintf("%s is %d, below its threshold %d", signal, v.Available, want)
		}
	}
	return out
}

// PressureOptions configure a PressureMonitor.
type PressureOptions struct {
	// Signals measures the node (stats.Provider.Signals).
	Signals    func(ctx context.Context) (*statsapi.NodeStats, error)
	Thresholds Thresholds
	// Soft thresholds (evictionSoft) bring a condition as soon as they
	// are crossed, before their grace period lets eviction act.
	Soft Thresholds
	// TransitionPeriod is how long a condition stays True after its
	// signal last crossed the threshold (evictionPressureTransitionPeriod),
	// so a node hovering at the line does not flap.
	TransitionPeriod time.Duration
	Interval         time.Duration
	Clock            clock.WithTicker
}

// PressureMonitor watches the eviction signals and says which pressure
// conditions hold (admission refuses pods under them, as upstream's);
// pkg/eviction acts on the same signals.
type PressureMonitor struct {
	o  PressureOptions
	mu sync.Mutex
	// lastCrossed is when each condition's signal was last below its
	// threshold, with the message then.
	lastCrossed map[v1.NodeConditionType]time.Time
	messages    map[v1.NodeConditionType]string
}

// NewPressureMonitor returns a monitor; nothing is measured before Run
// or Check.
func NewPressureMonitor(o PressureOptions) *PressureMonitor {
	return &PressureMonitor{o: o, lastCrossed: map[v1.NodeConditionType]time.Time{}, messages: map[v1.NodeConditionType]string{}}
}

// Run checks every Interval until ctx ends.
func (m *PressureMonitor) Run(ctx context.Context) {
	periodic.Run(ctx, m.o.Clock, m.o.Interval, true, m.Check)
}

// Check measures the node once.
func (m *PressureMonitor) Check(ctx context.Context) {
	n, err := m.o.Signals(ctx)
	if err != nil {
		// No measurement is no news: the conditions keep their state.
		klog.ErrorS(err, "Unable to measure the node for its pressure conditions")
		return
	}
	crossed := m.o.Thresholds.observe(n)
	for signal, msg := range m.o.Soft.observe(n) {
		if _, hard := crossed[signal]; !hard {
			crossed[signal] = msg + " (soft)"
		}
	}
	now := m.o.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	signals := make([]string, 0, len(crossed))
	for s := range crossed {
		signals = append(signals, s)
	}
	sort.Strings(signals)
	fresh := map[v1.NodeConditionType][]string{}
	for _, s := range signals {
		c := signalCondition[s]
		fresh[c] = append(fresh[c], crossed[s])
	}
	for c, msgs := range fresh {
		if _, was := m.messages[c]; !was {
			klog.InfoS("Node is under pressure", "condition", c, "signals", msgs)
		}
		m.lastCrossed[c], m.messages[c] = now, strings.Join(msgs, "; ")
	}
	for c, at := range m.lastCrossed {
		if _, still := fresh[c]; !still && now.Sub(at) >= m.o.TransitionPeriod {
			klog.InfoS("Node is no longer under pressure", "condition", c)
			delete(m.lastCrossed, c)
			delete(m.messages, c)
		}
	}
}

// Pressure returns the conditions under pressure, each with its message.
func (m *PressureMonitor) Pressure() map[v1.NodeConditionType]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[v1.NodeConditionType]string, len(m.messages))
	for c, msg := range m.messages {
		out[c] = msg
	}
	return out
}
