package nodestatus

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	testingclock "k8s.io/utils/clock/testing"
)

func u(v uint64) *uint64 { return &v }
func i64(v int64) *int64 { return &v }

// signals is a node with 1 GiB of memory, a 100 GiB root filesystem, a
// 200 GiB image filesystem and room for 1000 processes.
func signals(memAvailable, rootAvailable, imageAvailable uint64, procs int64) *statsapi.NodeStats {
	return &statsapi.NodeStats{
		Memory: &statsapi.MemoryStats{AvailableBytes: u(memAvailable), WorkingSetBytes: u(1<<30 - memAvailable)},
		Fs:     &statsapi.FsStats{AvailableBytes: u(rootAvailable), CapacityBytes: u(100 << 30), InodesFree: u(900), Inodes: u(1000)},
		Runtime: &statsapi.RuntimeStats{ImageFs: &statsapi.FsStats{AvailableBytes: u(imageAvailable), CapacityBytes: u(200 << 30),
			InodesFree: u(10), Inodes: u(1000)}},
		Rlimit: &statsapi.RlimitStats{MaxPID: i64(1000), NumOfRunningProcesses: i64(procs)},
	}
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

// Each signal below its threshold turns its condition True; the
// condition goes back to False only a transition period after the signal
// recovered.
func TestPressureMonitor(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	th, err := ParseThresholds(map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "15%",
		"imagefs.inodesFree": "5%", "pid.available": "10%"})
	if err != nil {
		t.Fatal(err)
	}
	cur := signals(500<<20, 50<<30, 100<<30, 100)
	m := NewPressureMonitor(PressureOptions{Thresholds: th, TransitionPeriod: 5 * time.Minute, Clock: clk, Interval: 10 * time.Second,
		Signals: func(context.Context) (*statsapi.NodeStats, error) { return cur, nil }})
	check := func(want ...v1.NodeConditionType) map[v1.NodeConditionType]string {
		t.Helper()
		m.Check(context.Background())
		got := m.Pressure()
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
	cur.Runtime.ImageFs.InodesFree = u(900)
	got = check(v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure)
	if msg := got[v1.NodeDiskPressure]; !strings.Contains(msg, "nodefs.available") || strings.Contains(msg, "inodes") {
		t.Errorf("disk pressure message %q: not the signal below its threshold now", msg)
	}
	// Recovered: True for the transition period, then False.
	cur = signals(500<<20, 50<<30, 100<<30, 100)
	cur.Runtime.ImageFs.InodesFree = u(900)
	clk.Step(4 * time.Minute)
	check(v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure)
	clk.Step(time.Minute)
	check()
}

// The reporter turns pressure into conditions with upstream's reasons and
// records an event when one changes.
func TestReporterPressureConditions(t *testing.T) {
	var ready error
	r, client, clk := newReporter(t, &ready)
	pressure := map[v1.NodeConditionType]string{}
	r.o.Pressure = func() map[v1.NodeConditionType]string { return pressure }
	events := record.NewFakeRecorder(100)
	r.o.Recorder = events
	ctx := context.Background()
	if !r.register(ctx) {
		t.Fatal("registration failed")
	}
	condition := func(typ v1.NodeConditionType) v1.NodeCondition {
		for _, c := range getNode(t, client).Status.Conditions {
			if c.Type == typ {
				return c
			}
		}
		return v1.NodeCondition{}
	}
	r.SyncStatus(ctx)
	if c := condition(v1.NodeDiskPressure); c.Status != v1.ConditionFalse || c.Reason != "KubeletHasNoDiskPressure" {
		t.Fatalf("disk pressure %+v", c)
	}
	pressure[v1.NodeDiskPressure] = "nodefs.available is 1, below its threshold 2"
	clk.Step(10 * time.Second)
	useAPINode(t, r, client)
	r.SyncStatus(ctx)
	if c := condition(v1.NodeDiskPressure); c.Status != v1.ConditionTrue || c.Reason != "KubeletHasDiskPressure" || !strings.Contains(c.Message, "nodefs.available is 1") {
		t.Fatalf("disk pressure %+v", c)
	}
	delete(pressure, v1.NodeDiskPressure)
	clk.Step(10 * time.Second)
	useAPINode(t, r, client)
	r.SyncStatus(ctx)
	var got []string
	for len(events.Events) > 0 {
		if e := <-events.Events; strings.Contains(e, "DiskPressure") {
			got = append(got, e)
		}
	}
	if len(got) != 2 || !strings.Contains(got[0], "NodeHasDiskPressure") || !strings.Contains(got[1], "NodeHasNoDiskPressure") {
		t.Errorf("events %q, want NodeHasDiskPressure then NodeHasNoDiskPressure", got)
	}
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
	cur.Runtime = nil
	m := NewPressureMonitor(PressureOptions{Thresholds: hard, Soft: soft, Clock: clk, Interval: 10 * time.Second,
		Signals: func(context.Context) (*statsapi.NodeStats, error) { return cur, nil }})
	m.Check(context.Background())
	got := m.Pressure()
	if msg := got[v1.NodeMemoryPressure]; len(got) != 1 || !strings.Contains(msg, "below its threshold 1073741824 (soft)") {
		t.Fatalf("pressure %v", got)
	}
}
