package eviction

import (
	"context"
	"math/rand"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	testingclock "k8s.io/utils/clock/testing"
)

func u(v uint64) *uint64 { return &v }
func i64(v int64) *int64 { return &v }

// signals is a node with 1 GiB of memory, a 100 GiB root filesystem, a
// 200 GiB image filesystem and room for 1000 processes.
func signals(memAvailable, rootAvailable, imageAvailable uint64, procs int64) *statsapi.Summary {
	return &statsapi.Summary{Node: statsapi.NodeStats{
		Memory: &statsapi.MemoryStats{AvailableBytes: u(memAvailable), WorkingSetBytes: u(1<<30 - memAvailable)},
		Fs:     &statsapi.FsStats{AvailableBytes: u(rootAvailable), CapacityBytes: u(100 << 30), InodesFree: u(900), Inodes: u(1000)},
		Runtime: &statsapi.RuntimeStats{ImageFs: &statsapi.FsStats{AvailableBytes: u(imageAvailable), CapacityBytes: u(200 << 30),
			InodesFree: u(10), Inodes: u(1000)}},
		Rlimit: &statsapi.RlimitStats{MaxPID: i64(1000), NumOfRunningProcesses: i64(procs)},
	}}
}

func TestParseThresholds(t *testing.T) {
	th, err := ParseThresholds(map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "pid.available": "0%"})
	if err != nil {
		t.Fatal(err)
	}
	if th[SignalMemoryAvailable].min(1<<30) != 100<<20 || th[SignalNodeFsAvailable].min(1000) != 100 {
		t.Errorf("thresholds %+v", th)
	}
	if _, ok := th[SignalPIDAvailable]; ok {
		t.Error("a 0% threshold is watched")
	}
	for _, bad := range []map[string]string{{"memory.avail": "1Mi"}, {"nodefs.available": "110%"}, {"memory.available": "lots"}} {
		if _, err := ParseThresholds(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// conditionsManager is a manager with no pods to evict, measuring cur.
func conditionsManager(hard, soft Thresholds, cur **statsapi.Summary, clk *testingclock.FakeClock, transition time.Duration) *Manager {
	return New(Options{Pods: &fakePods{}, PodCleanedUp: func(_ types.UID) bool { return true }, Stats: statsFunc(func() *statsapi.Summary { return *cur }),
		Hard: hard, Soft: soft, SoftGracePeriod: map[string]time.Duration{SignalMemoryAvailable: time.Hour},
		Conditions: NewConditions(transition, clk), Recorder: record.NewFakeRecorder(100), Clock: clk, Interval: 10 * time.Second})
}

type statsFunc func() *statsapi.Summary

func (f statsFunc) NodeSummary(context.Context) (*statsapi.Summary, error) { return f(), nil }

func (f statsFunc) PodStats(context.Context) ([]statsapi.PodStats, error) { return f().Pods, nil }

// Each signal below its threshold turns its condition True at the
// manager's measure; the condition goes back to False only a transition
// period after the signal recovered.
func TestPressureConditions(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	th, err := ParseThresholds(map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "15%",
		"imagefs.inodesFree": "5%", "pid.available": "10%"})
	if err != nil {
		t.Fatal(err)
	}
	cur := signals(500<<20, 50<<30, 100<<30, 100)
	m := conditionsManager(th, nil, &cur, clk, 5*time.Minute)
	check := func(want ...v1.NodeConditionType) map[v1.NodeConditionType]string {
		t.Helper()
		_, _ = m.Synchronize(context.Background()) // no pod to evict: an error when a threshold is met
		got := m.o.Conditions.Pressure()
		if len(got) != len(want) {
			t.Fatalf("pressure %v, want %v", got, want)
		}
		for _, c := range want {
			if _, ok := got[c]; !ok {
				t.Fatalf("pressure %v, want %v", got, want)
			}
		}
		return got
	}
	// Image inodes are low (1% free): disk pressure from the start.
	got := check(v1.NodeDiskPressure)
	if !strings.Contains(got[v1.NodeDiskPressure], "imagefs.inodesFree is 10, below its threshold 50") {
		t.Errorf("message %q", got[v1.NodeDiskPressure])
	}
	cur = signals(50<<20, 5<<30, 100<<30, 950)
	cur.Node.Runtime.ImageFs.InodesFree = u(900)
	got = check(v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure)
	if msg := got[v1.NodeDiskPressure]; !strings.Contains(msg, "nodefs.available") || strings.Contains(msg, "inodes") {
		t.Errorf("disk pressure message %q: not the signal below its threshold now", msg)
	}
	// Recovered: True for the transition period, then False.
	cur = signals(500<<20, 50<<30, 100<<30, 100)
	cur.Node.Runtime.ImageFs.InodesFree = u(900)
	clk.Step(4 * time.Minute)
	check(v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure)
	clk.Step(time.Minute)
	check()
}

// A soft threshold brings its condition as soon as it is crossed, though
// eviction waits for its grace period.
func TestSoftThresholdBringsTheCondition(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	hard, _ := ParseThresholds(map[string]string{"memory.available": "100Mi"})
	soft, err := ParseThresholds(map[string]string{"memory.available": "1Gi"})
	if err != nil {
		t.Fatal(err)
	}
	cur := signals(500<<20, 50<<30, 100<<30, 100)
	cur.Node.Runtime = nil
	m := conditionsManager(hard, soft, &cur, clk, 0)
	evicted, err := m.Synchronize(context.Background())
	got := m.o.Conditions.Pressure()
	if msg := got[v1.NodeMemoryPressure]; len(got) != 1 || !strings.Contains(msg, "below its threshold 1073741824 (soft)") {
		t.Fatalf("pressure %v", got)
	}
	if evicted != nil || err != nil {
		t.Errorf("evicted %v (%v) within the soft grace period", evicted, err)
	}
}

// The condition and the eviction decision come from one measure and can
// never disagree: over random measures, every threshold the manager acts
// on has its condition set.
func TestConditionsAndEvictionAgree(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	hard, _ := ParseThresholds(map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"})
	soft, _ := ParseThresholds(map[string]string{"memory.available": "300Mi", "nodefs.available": "20%"})
	reclaim, _ := ParseThresholds(map[string]string{"memory.available": "50Mi"})
	cur := signals(500<<20, 50<<30, 100<<30, 100)
	m := conditionsManager(hard, soft, &cur, clk, time.Minute)
	m.o.MinReclaim = reclaim
	m.o.SoftGracePeriod = map[string]time.Duration{SignalMemoryAvailable: 30 * time.Second, SignalNodeFsAvailable: 30 * time.Second}
	r := rand.New(rand.NewSource(1))
	acted := 0
	for i := 0; i < 500; i++ {
		cur = signals(uint64(r.Intn(600))<<20, uint64(r.Intn(40))<<30, 100<<30, 100)
		due, crossed := m.due(Readings(&cur.Node))
		m.o.Conditions.update(crossed)
		pressure := m.o.Conditions.Pressure()
		for _, th := range due {
			acted++
			if _, ok := pressure[signalCondition[th.signal]]; !ok {
				t.Fatalf("measure %d: eviction acts on %s but %s is not set: %v", i, th.signal, signalCondition[th.signal], pressure)
			}
		}
		clk.Step(time.Duration(r.Intn(20)) * time.Second)
	}
	if acted == 0 {
		t.Fatal("no threshold was ever due: the check proved nothing")
	}
}
