package eviction

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	testingclock "k8s.io/utils/clock/testing"
)

const mi = 1 << 20

// fakeStats returns the summaries queued, one per measure of the node
// (the last one again once the queue is down to it); the pods' stats are
// those of the node's last measure.
type fakeStats struct {
	queue []*statsapi.Summary
	calls int
	// podCalls counts the reads of the pods' stats.
	podCalls int
	current  *statsapi.Summary
}

func (f *fakeStats) NodeSummary(context.Context) (*statsapi.Summary, error) {
	f.calls++
	f.current = f.queue[0]
	if len(f.queue) > 1 {
		f.queue = f.queue[1:]
	}
	return &statsapi.Summary{Node: f.current.Node}, nil
}

func (f *fakeStats) PodStats(context.Context) ([]statsapi.PodStats, error) {
	f.podCalls++
	return f.current.Pods, nil
}

type kill struct {
	pod    string
	grace  int64
	status v1.PodStatus
}

type fakePods struct {
	pods  []*v1.Pod
	kills []kill
}

func (f *fakePods) ActivePods() []*v1.Pod { return append([]*v1.Pod(nil), f.pods...) }

func (f *fakePods) EvictPod(pod *v1.Pod, grace int64, status func(*v1.PodStatus)) <-chan struct{} {
	k := kill{pod: pod.Name, grace: grace}
	status(&k.status)
	f.kills = append(f.kills, k)
	done := make(chan struct{})
	close(done)
	return done
}

// node is a summary with memory available, nodefs available and pods'
// usage (memory and disk working set, in MiB).
func node(memAvail, fsAvail uint64, pods map[string][2]uint64) *statsapi.Summary {
	ws, capacity, inodes := uint64(1000*mi), uint64(10000*mi), uint64(1000000)
	memAvail, fsAvail = memAvail*mi, fsAvail*mi
	s := &statsapi.Summary{Node: statsapi.NodeStats{
		Memory: &statsapi.MemoryStats{AvailableBytes: &memAvail, WorkingSetBytes: &ws},
		Fs:     &statsapi.FsStats{AvailableBytes: &fsAvail, CapacityBytes: &capacity, InodesFree: &inodes, Inodes: &inodes},
	}}
	for name, u := range pods {
		mem, disk := u[0]*mi, u[1]*mi
		zero := uint64(0)
		s.Pods = append(s.Pods, statsapi.PodStats{
			PodRef:           statsapi.PodReference{Name: name, Namespace: "ns", UID: name},
			Memory:           &statsapi.MemoryStats{WorkingSetBytes: &mem},
			EphemeralStorage: &statsapi.FsStats{UsedBytes: &disk},
			Containers: []statsapi.ContainerStats{{Name: "main", Memory: &statsapi.MemoryStats{WorkingSetBytes: &mem},
				Rootfs: &statsapi.FsStats{UsedBytes: &disk}, Logs: &statsapi.FsStats{UsedBytes: &zero}}},
		})
	}
	return s
}

// pod asks for memory and disk (MiB) with the priority.
func pod(name string, memReq, diskReq int64, prio int32) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name)},
		Spec: v1.PodSpec{Priority: &prio, Containers: []v1.Container{{Name: "main"}}}}
	req := v1.ResourceList{}
	if memReq > 0 {
		req[v1.ResourceMemory] = *resource.NewQuantity(memReq*mi, resource.BinarySI)
	}
	if diskReq > 0 {
		req[v1.ResourceEphemeralStorage] = *resource.NewQuantity(diskReq*mi, resource.BinarySI)
	}
	p.Spec.Containers[0].Resources.Requests = req
	return p
}

func thresholds(t *testing.T, m map[string]string) Thresholds {
	t.Helper()
	th, err := ParseThresholds(m)
	if err != nil {
		t.Fatal(err)
	}
	return th
}

type fixture struct {
	m     *Manager
	stats *fakeStats
	pods  *fakePods
	clock *testingclock.FakeClock
	rec   *record.FakeRecorder
}

func newFixture(t *testing.T, o Options, pods []*v1.Pod, summaries ...*statsapi.Summary) *fixture {
	f := &fixture{stats: &fakeStats{queue: summaries}, pods: &fakePods{pods: pods},
		clock: testingclock.NewFakeClock(time.Unix(1000, 0)), rec: record.NewFakeRecorder(10)}
	o.Pods, o.Stats, o.Clock, o.Recorder = f.pods, f.stats, f.clock, f.rec
	if o.PodCleanedUp == nil {
		o.PodCleanedUp = func(types.UID) bool { return true }
	}
	f.m = New(o)
	return f
}

func (f *fixture) sync(t *testing.T) string {
	t.Helper()
	p, err := f.m.Synchronize(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p == nil {
		return ""
	}
	return p.Name
}

// Under a hard memory threshold the pod using most beyond its request is
// evicted with a 1 s grace period, Failed/Evicted with upstream's message,
// a DisruptionTarget condition and an event; the pod within its request
// stays.
func TestHardMemoryEvictsTheHogFirst(t *testing.T) {
	f := newFixture(t, Options{Hard: thresholds(t, map[string]string{"memory.available": "500Mi"})},
		[]*v1.Pod{pod("guaranteed", 300, 0, 0), pod("hog", 0, 0, 0), pod("small", 0, 0, 0)},
		node(400, 5000, map[string][2]uint64{"guaranteed": {250, 0}, "hog": {900, 0}, "small": {10, 0}}))
	if got := f.sync(t); got != "hog" {
		t.Fatalf("evicted %q, want hog", got)
	}
	k := f.pods.kills[0]
	want := "The node was low on resource: memory. Threshold quantity: 500Mi, available: 400Mi. Container main was using 900Mi, request is 0, has larger consumption of memory. "
	if k.grace != 1 || k.status.Phase != v1.PodFailed || k.status.Reason != "Evicted" || k.status.Message != want {
		t.Fatalf("kill %+v\nwant message %q", k, want)
	}
	if c := k.status.Conditions; len(c) != 1 || c[0].Type != v1.DisruptionTarget || c[0].Reason != v1.PodReasonTerminationByKubelet {
		t.Fatalf("conditions %+v", c)
	}
	if e := <-f.rec.Events; e != "Warning Evicted "+want {
		t.Fatalf("event %q", e)
	}
	if len(f.pods.kills) != 1 {
		t.Fatalf("one pod per interval, got %v", f.pods.kills)
	}
}

// Static pods, mirror pods and system-critical pods are never evicted.
func TestCriticalPodsAreSpared(t *testing.T) {
	static := pod("static", 0, 0, 0)
	static.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	critical := pod("critical", 0, 0, 2000001000)
	f := newFixture(t, Options{Hard: thresholds(t, map[string]string{"memory.available": "500Mi"})},
		[]*v1.Pod{static, critical, pod("victim", 0, 0, 1000)},
		node(100, 5000, map[string][2]uint64{"static": {900, 0}, "critical": {800, 0}, "victim": {1, 0}}))
	if got := f.sync(t); got != "victim" {
		t.Fatalf("evicted %q, want victim", got)
	}
	f.pods.pods = f.pods.pods[:2]
	if _, err := f.m.Synchronize(context.Background()); err == nil || !strings.Contains(err.Error(), "no pod may be evicted") {
		t.Fatalf("only critical pods left: err %v", err)
	}
}

// A soft threshold acts only once crossed for its grace period, and the
// pod gets the smaller of its own grace period and evictionMaxPodGracePeriod.
func TestSoftThresholdWaitsForItsGracePeriod(t *testing.T) {
	p := pod("a", 0, 0, 0)
	p.Spec.TerminationGracePeriodSeconds = new(int64(5))
	f := newFixture(t, Options{
		Hard:            thresholds(t, map[string]string{"memory.available": "100Mi"}),
		Soft:            thresholds(t, map[string]string{"memory.available": "1Gi"}),
		SoftGracePeriod: map[string]time.Duration{"memory.available": time.Minute}, MaxPodGracePeriod: 30,
	}, []*v1.Pod{p}, node(500, 5000, map[string][2]uint64{"a": {100, 0}}))
	if got := f.sync(t); got != "" {
		t.Fatalf("evicted %q at once", got)
	}
	f.clock.Step(59 * time.Second)
	if got := f.sync(t); got != "" || f.stats.calls != 2 {
		t.Fatalf("evicted %q before the grace period (%d measures)", got, f.stats.calls)
	}
	f.clock.Step(time.Second)
	if got := f.sync(t); got != "a" || f.pods.kills[0].grace != 5 {
		t.Fatalf("evicted %q with %+v", got, f.pods.kills)
	}
}

// Once met, a threshold holds until the signal is back above it by the
// minimum reclaim.
func TestMinimumReclaim(t *testing.T) {
	f := newFixture(t, Options{
		Hard:       thresholds(t, map[string]string{"memory.available": "500Mi"}),
		MinReclaim: thresholds(t, map[string]string{"memory.available": "200Mi"}),
	}, []*v1.Pod{pod("a", 0, 0, 0), pod("b", 0, 0, 0)},
		node(400, 5000, map[string][2]uint64{"a": {10, 0}, "b": {20, 0}}),
		node(600, 5000, map[string][2]uint64{"a": {10, 0}}),
		node(800, 5000, map[string][2]uint64{"a": {10, 0}}))
	if got := f.sync(t); got != "b" {
		t.Fatalf("evicted %q, want b (more memory)", got)
	}
	f.pods.pods = f.pods.pods[:1]
	if got := f.sync(t); got != "a" {
		t.Fatalf("600Mi is below 500Mi+200Mi: evicted %q", got)
	}
	if got := f.sync(t); got != "" || f.stats.calls != 3 {
		t.Fatalf("recovered past the reclaim: evicted %q (%d measures)", got, f.stats.calls)
	}
}

// Disk pressure reclaims images and dead containers first; when that is
// enough no pod goes, and when it is not the pod writing most beyond its
// request is evicted.
func TestDiskReclaimsBeforeEvicting(t *testing.T) {
	for _, tc := range []struct {
		name    string
		after   uint64
		evicted string
	}{{"reclaim suffices", 2000, ""}, {"reclaim falls short", 900, "writer"}} {
		t.Run(tc.name, func(t *testing.T) {
			var reclaimed []string
			rec := func(name string) Reclaim {
				return Reclaim{name, func(context.Context) error { reclaimed = append(reclaimed, name); return nil }}
			}
			usage := map[string][2]uint64{"writer": {1, 700}, "reader": {1, 100}, "big-request": {1, 900}}
			f := newFixture(t, Options{
				Hard:         thresholds(t, map[string]string{"nodefs.available": "10%"}),
				DiskReclaims: []Reclaim{rec("images"), rec("containers")},
			}, []*v1.Pod{pod("reader", 0, 0, 0), pod("writer", 0, 100, 0), pod("big-request", 0, 1000, 0)},
				node(5000, 800, usage), node(5000, tc.after, usage))
			if got := f.sync(t); got != tc.evicted || strings.Join(reclaimed, ",") != "images,containers" {
				t.Fatalf("evicted %q after reclaiming %v", got, reclaimed)
			}
			if tc.evicted != "" && !strings.HasPrefix(f.pods.kills[0].status.Message,
				"The node was low on resource: ephemeral-storage. Threshold quantity: 1000Mi, available: 800Mi. Container main was using 700Mi, request is 100Mi") {
				t.Fatalf("message %q", f.pods.kills[0].status.Message)
			}
		})
	}
}

// With nothing met, nothing is reclaimed or evicted, though the node was
// measured.
func TestNothingMet(t *testing.T) {
	f := newFixture(t, Options{Hard: thresholds(t, map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"}),
		DiskReclaims: []Reclaim{{"images", func(context.Context) error { t.Fatal("reclaimed"); return nil }}}},
		[]*v1.Pod{pod("a", 0, 0, 0)}, node(5000, 5000, map[string][2]uint64{"a": {4000, 4000}}))
	if got := f.sync(t); got != "" || f.stats.calls != 1 || len(f.pods.kills) != 0 {
		t.Fatalf("evicted %q, measured %d times", got, f.stats.calls)
	}
}

// The pods are measured only when a pass needs them: a threshold met, or a
// pod with a local storage limit of its own (not a critical one, which is
// never evicted for it). The node is measured on every pass.
func TestPodsAreMeasuredOnlyWhenNeeded(t *testing.T) {
	limited := pod("limited", 0, 0, 0)
	limited.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("1Gi")}
	critical := pod("critical", 0, 0, 2000001000)
	critical.Spec.Containers[0].Resources.Limits = limited.Spec.Containers[0].Resources.Limits
	quiet, short := node(5000, 5000, map[string][2]uint64{"a": {1, 1}}), node(50, 5000, map[string][2]uint64{"a": {1, 1}})
	for _, tc := range []struct {
		name     string
		pods     []*v1.Pod
		summary  *statsapi.Summary
		podReads int
	}{
		{"nothing met, no limit", []*v1.Pod{pod("a", 0, 0, 0), critical}, quiet, 0},
		{"a pod with a limit", []*v1.Pod{pod("a", 0, 0, 0), limited}, quiet, 1},
		{"a threshold met", []*v1.Pod{pod("a", 0, 0, 0)}, short, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Options{Hard: thresholds(t, map[string]string{"memory.available": "100Mi"})}, tc.pods, tc.summary)
			f.sync(t)
			if f.stats.calls != 1 || f.stats.podCalls != tc.podReads {
				t.Fatalf("measured the node %d times and the pods %d, want 1 and %d", f.stats.calls, f.stats.podCalls, tc.podReads)
			}
		})
	}
}

// PID pressure ranks by priority, then by process count.
func TestPIDRanking(t *testing.T) {
	procs := func(n uint64) *statsapi.ProcessStats { return &statsapi.ProcessStats{ProcessCount: &n} }
	s := &statsapi.Summary{Pods: []statsapi.PodStats{
		{PodRef: statsapi.PodReference{UID: "few"}, ProcessStats: procs(5)},
		{PodRef: statsapi.PodReference{UID: "many"}, ProcessStats: procs(500)},
		{PodRef: statsapi.PodReference{UID: "important"}, ProcessStats: procs(5000)},
	}}
	pods := []*v1.Pod{pod("important", 0, 0, 100), pod("few", 0, 0, 0), pod("many", 0, 0, 0)}
	rank(SignalPIDAvailable, pods, usageByPod(s))
	if got := pods[0].Name + "," + pods[1].Name + "," + pods[2].Name; got != "many,few,important" {
		t.Fatalf("ranked %s", got)
	}
}

// The next pod is chosen only once the evicted one's resources are
// released (its volumes unmounted), checked every second, or 30 s passed.
func TestEvictionWaitsForTheCleanup(t *testing.T) {
	var checks atomic.Int32
	f := newFixture(t, Options{Hard: thresholds(t, map[string]string{"memory.available": "500Mi"}),
		PodCleanedUp: func(types.UID) bool { return checks.Add(1) == 3 }},
		[]*v1.Pod{pod("a", 0, 0, 0)}, node(400, 5000, map[string][2]uint64{"a": {10, 0}}))
	done := make(chan string)
	go func() { p, _ := f.m.Synchronize(context.Background()); done <- p.Name }()
	// One poll period per check made: stepping whenever the clock has
	// waiters ran the clock past the 30 s timeout before a descheduled
	// manager checked again (seen under -race on a loaded machine).
	stepped := int32(0)
	for {
		select {
		case got := <-done:
			if got != "a" || checks.Load() != 3 {
				t.Fatalf("evicted %q after %d checks", got, checks.Load())
			}
			return
		default:
			if n := checks.Load(); n > stepped && f.clock.HasWaiters() {
				stepped = n
				f.clock.Step(cleanupPoll)
			}
			runtime.Gosched()
		}
	}
}

// A pod over one of its own local storage limits is evicted whatever the
// node's signals: an emptyDir over its sizeLimit, a container over its
// ephemeral-storage limit, the pod over the sum of its limits. Pods within
// their limits, and critical ones, stay; all offenders go at once.
func TestLocalStorageLimits(t *testing.T) {
	q := func(s string) resource.Quantity { return resource.MustParse(s) }
	withLimit := func(p *v1.Pod, l string) *v1.Pod {
		p.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceEphemeralStorage: q(l)}
		return p
	}
	emptyDir := func(p *v1.Pod, size string) *v1.Pod {
		sl := q(size)
		p.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: &sl}}}}
		return p
	}
	twoContainers := withLimit(pod("pod-over", 0, 0, 0), "60Mi")
	twoContainers.Spec.Containers = append(twoContainers.Spec.Containers, v1.Container{Name: "side",
		Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceEphemeralStorage: q("60Mi")}}})
	critical := emptyDir(pod("critical", 0, 0, 2000001000), "1Mi")
	pods := []*v1.Pod{emptyDir(pod("dir-over", 0, 0, 0), "10Mi"), emptyDir(pod("dir-within", 0, 0, 0), "100Mi"),
		withLimit(pod("container-over", 0, 0, 0), "50Mi"), withLimit(pod("container-within", 0, 0, 0), "500Mi"), twoContainers, critical}
	s := node(5000, 5000, map[string][2]uint64{"dir-over": {1, 1}, "dir-within": {1, 1}, "container-over": {1, 80},
		"container-within": {1, 80}, "pod-over": {1, 50}, "critical": {1, 1}})
	for i := range s.Pods {
		used := uint64(20 * mi)
		s.Pods[i].VolumeStats = []statsapi.VolumeStats{{Name: "scratch", FsStats: statsapi.FsStats{UsedBytes: &used}}}
		total := *s.Pods[i].Containers[0].Rootfs.UsedBytes + used
		if s.Pods[i].PodRef.Name == "pod-over" {
			total += 80 * mi // the side container's share
		}
		s.Pods[i].EphemeralStorage = &statsapi.FsStats{UsedBytes: &total}
	}
	f := newFixture(t, Options{Hard: thresholds(t, map[string]string{"memory.available": "100Mi"})}, pods, s)
	if got := f.sync(t); got != "dir-over" {
		t.Fatalf("first evicted %q", got)
	}
	want := map[string]string{
		"dir-over":       `Usage of EmptyDir volume "scratch" exceeds the limit "10Mi". `,
		"container-over": `Pod ephemeral local storage usage exceeds the total limit of containers 50Mi. `,
		"pod-over":       `Pod ephemeral local storage usage exceeds the total limit of containers 120Mi. `,
	}
	if len(f.pods.kills) != len(want) {
		t.Fatalf("kills %+v", f.pods.kills)
	}
	for _, k := range f.pods.kills {
		if k.status.Message != want[k.pod] || k.grace != 1 || k.status.Reason != "Evicted" {
			t.Errorf("%s: grace %d, %s %q, want %q", k.pod, k.grace, k.status.Reason, k.status.Message, want[k.pod])
		}
	}
}

// A container over its own limit while the pod's total is within the sum
// of its containers' limits is named.
func TestContainerOverItsOwnLimit(t *testing.T) {
	p := pod("a", 0, 0, 0)
	p.Spec.Containers = []v1.Container{
		{Name: "main", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("10Mi")}}},
		{Name: "big", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("1Gi")}}},
	}
	s := node(5000, 5000, map[string][2]uint64{"a": {1, 30}})
	if got := overLocalLimit(p, &s.Pods[0]); got != `Container main exceeded its local ephemeral storage limit "10Mi". ` {
		t.Fatalf("message %q", got)
	}
}
