package pleg

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testutil"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

type fakeRuntime struct {
	mu      sync.Mutex
	pods    []*container.Pod
	reads   map[types.UID]int
	lists   int
	listErr error
}

// newTestGeneric returns a PLEG relisting every second on a fake runtime
// and clock.
func newTestGeneric() (*fakeRuntime, *testingclock.FakeClock, *Generic) {
	rt := &fakeRuntime{}
	clk := testingclock.NewFakeClock(time.Unix(100, 0))
	return rt, clk, NewGeneric(GenericOptions{Runtime: rt, Period: time.Second, Clock: clk})
}

func (f *fakeRuntime) GetPods(ctx context.Context) ([]*container.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	if f.listErr != nil {
		return nil, f.listErr
	}
	out := make([]*container.Pod, len(f.pods))
	for i, p := range f.pods {
		c := *p
		c.Containers = append([]*container.Container(nil), p.Containers...)
		out[i] = &c
	}
	return out, nil
}

func (f *fakeRuntime) GetPodStatus(ctx context.Context, uid types.UID, name, ns string) (*container.PodStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reads == nil {
		f.reads = map[types.UID]int{}
	}
	f.reads[uid]++
	s := &container.PodStatus{ID: uid, Name: name, Namespace: ns}
	for _, p := range f.pods {
		if p.ID == uid {
			for _, c := range p.Containers {
				s.ContainerStatuses = append(s.ContainerStatuses, &container.Status{ID: c.ID, Name: c.Name, State: c.State})
			}
		}
	}
	return s, nil
}

func (f *fakeRuntime) set(pods ...*container.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods = pods
}

func (f *fakeRuntime) listCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists
}

func (f *fakeRuntime) readCount(uid types.UID) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads[uid]
}

func pod(uid string, cs ...*container.Container) *container.Pod {
	return &container.Pod{ID: types.UID(uid), Name: uid, Namespace: "ns", Containers: cs}
}

func ctr(id string, s container.State) *container.Container {
	return &container.Container{ID: container.ContainerID{Type: "fake", ID: id}, Name: "n" + id, State: s}
}

func events(g *Generic) []string {
	var out []string
	for {
		select {
		case e := <-g.Watch():
			out = append(out, fmt.Sprintf("%s %s %s", e.ID, e.Type, e.Data))
		default:
			return out
		}
	}
}

func TestRelistEmitsEvents(t *testing.T) {
	R, E, U := container.StateRunning, container.StateExited, container.StateUnknown
	rt, clk, g := newTestGeneric()
	ctx := context.Background()
	steps := []struct {
		pods []*container.Pod
		want []string
	}{
		{[]*container.Pod{pod("p", ctr("1", R))}, []string{"p ContainerStarted 1"}},
		{[]*container.Pod{pod("p", ctr("1", R))}, nil},
		{[]*container.Pod{pod("p", ctr("1", E), ctr("2", R))}, []string{"p ContainerDied 1", "p ContainerStarted 2"}},
		{[]*container.Pod{pod("p", ctr("2", U))}, []string{"p ContainerRemoved 1", "p ContainerChanged 2"}},
		{[]*container.Pod{pod("p", ctr("2", R))}, []string{"p ContainerStarted 2"}},
		{nil, []string{"p ContainerDied 2", "p ContainerRemoved 2"}},
	}
	for i, s := range steps {
		rt.set(s.pods...)
		clk.Step(time.Second)
		g.Relist(ctx)
		if got := events(g); !reflect.DeepEqual(got, s.want) {
			t.Fatalf("step %d: events %v, want %v", i, got, s.want)
		}
	}
	if st, _ := g.Cache().Get("p"); len(st.ContainerStatuses) != 0 {
		t.Fatalf("cache kept a vanished pod: %v", st)
	}
}

func TestRelistCachesChangedPodsOnly(t *testing.T) {
	rt, _, g := newTestGeneric()
	rt.set(pod("a", ctr("1", container.StateRunning)), pod("b", ctr("2", container.StateRunning)))
	g.Relist(context.Background())
	rt.set(pod("a", ctr("1", container.StateExited)), pod("b", ctr("2", container.StateRunning)))
	g.Relist(context.Background())
	if rt.readCount("a") != 2 || rt.readCount("b") != 1 {
		t.Fatalf("status reads a=%d b=%d, want 2 and 1", rt.readCount("a"), rt.readCount("b"))
	}
}

// TestRelistTrustsAReadOfTheSameChange: a pod the worker read back after
// starting or stopping its containers (Refresh) is not read again by the
// relist that sees that change; its events are still emitted, and its
// entry is as fresh as the relist. A change the read did not see is read.
func TestRelistTrustsAReadOfTheSameChange(t *testing.T) {
	R, E := container.StateRunning, container.StateExited
	rt, clk, g := newTestGeneric()
	ctx := context.Background()
	g.Relist(ctx)
	refresh := func() {
		t.Helper()
		if _, err := g.Refresh(ctx, "p", "p", "ns"); err != nil {
			t.Fatal(err)
		}
	}
	relist := func(want string, reads int, why string) {
		t.Helper()
		clk.Step(time.Second)
		g.Relist(ctx)
		if got := events(g); !reflect.DeepEqual(got, []string{want}) {
			t.Fatalf("events %v, want %s", got, want)
		}
		if n := rt.readCount("p"); n != reads {
			t.Fatalf("%d reads, want %d: %s", n, reads, why)
		}
	}

	rt.set(pod("p", ctr("1", R)))
	refresh()
	relist("p ContainerStarted 1", 1, "the worker's read is the started pod's")
	if _, _, fresh := g.cache.getIfFresh("p", clk.Now().Add(-time.Millisecond)); !fresh {
		t.Fatal("the vouched entry is not as fresh as the relist")
	}

	// The worker read the pod before its container exited: the relist
	// must read it.
	refresh()
	rt.set(pod("p", ctr("1", E)))
	relist("p ContainerDied 1", 3, "the exit was not in the worker's read")
	if s, _ := g.Cache().Get("p"); s.ContainerStatuses[0].State != E {
		t.Fatalf("cached %v, want the exited container", s)
	}
}

func TestGetNewerThanReadsOnDemandOnlyWhenStale(t *testing.T) {
	rt, clk, g := newTestGeneric()
	ctx := context.Background()
	rt.set(pod("p", ctr("1", container.StateRunning)))

	// Nothing cached yet: read from the runtime at once.
	if s, err := g.GetNewerThan(ctx, "p", "p", "ns", time.Time{}); err != nil || len(s.ContainerStatuses) != 1 {
		t.Fatalf("first read: %v %v", s, err)
	}
	if rt.readCount("p") != 1 {
		t.Fatalf("reads = %d", rt.readCount("p"))
	}
	clk.Step(time.Second)
	g.Relist(ctx) // caches p (new to the relist: ContainerStarted)
	reads := rt.readCount("p")
	before := clk.Now().Add(-time.Millisecond)
	if _, err := g.GetNewerThan(ctx, "p", "p", "ns", before); err != nil || rt.readCount("p") != reads {
		t.Fatalf("fresh cache entry was not used (reads %d -> %d)", reads, rt.readCount("p"))
	}
	// A sync finished after the relist: its effects may be missing from the
	// cache, so the status is read again, not waited for.
	clk.Step(10 * time.Millisecond)
	syncDone := clk.Now()
	clk.Step(10 * time.Millisecond)
	if _, err := g.GetNewerThan(ctx, "p", "p", "ns", syncDone); err != nil || rt.readCount("p") != reads+1 {
		t.Fatalf("stale entry was not refreshed (reads %d -> %d)", reads, rt.readCount("p"))
	}
	// An unknown pod after a relist newer than min is known to be empty.
	if s, err := g.GetNewerThan(ctx, "other", "other", "ns", before); err != nil || len(s.ContainerStatuses) != 0 || rt.readCount("other") != 0 {
		t.Fatalf("unknown pod: %v %v reads=%d", s, err, rt.readCount("other"))
	}
}

func TestCacheKeepsTheNewerStatus(t *testing.T) {
	c := NewCache()
	newer := &container.PodStatus{ID: "p", Name: "newer"}
	c.Set("p", newer, nil, time.Unix(200, 0))
	c.Set("p", &container.PodStatus{ID: "p", Name: "older"}, nil, time.Unix(100, 0))
	if s, _ := c.Get("p"); s.Name != "newer" {
		t.Fatalf("an older read replaced a newer one: %v", s.Name)
	}
}

func TestHealthy(t *testing.T) {
	rt, clk, g := newTestGeneric()
	g.Relist(context.Background())
	if err := g.Healthy(); err != nil {
		t.Fatal(err)
	}
	rt.listErr = errors.New("runtime down")
	clk.Step(RelistThreshold + time.Second)
	g.Relist(context.Background())
	if err := g.Healthy(); err == nil {
		t.Fatal("stalled relisting reported healthy")
	}
}

func TestRunStopsWithContext(t *testing.T) {
	_, _, g := newTestGeneric()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.Run(ctx); close(done) }()
	cancel()
	testutil.Closed(t, "Run after its context ended", done)
}

func TestTriggerRelistsAtOnce(t *testing.T) {
	rt := &fakeRuntime{}
	clk := testingclock.NewFakeClock(time.Unix(100, 0))
	g := NewGeneric(GenericOptions{Runtime: rt, Period: time.Hour, Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go g.Run(ctx)
	rt.set(pod("p", ctr("1", container.StateRunning)))
	// Without the trigger nothing would relist for an hour.
	deadline := time.After(5 * time.Second)
	for {
		g.Trigger()
		select {
		case e := <-g.Watch():
			if e.Type != ContainerStarted {
				t.Fatalf("event %v", e.Type)
			}
			return
		case <-deadline:
			t.Fatal("a trigger did not relist")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestTriggerReadsOnlyTheChangedPod: a change to a known container reads
// that one pod, not the whole runtime; an unknown ID relists everything.
func TestTriggerReadsOnlyTheChangedPod(t *testing.T) {
	rt := &fakeRuntime{}
	clk := testingclock.NewFakeClock(time.Unix(100, 0))
	g := NewGeneric(GenericOptions{Runtime: rt, Period: time.Hour, Clock: clk})
	rt.set(pod("a", ctr("1", container.StateRunning)), pod("b", ctr("2", container.StateRunning)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go g.Run(ctx)
	waitEvents := func(n int) []string {
		var got []string
		deadline := time.After(5 * time.Second)
		for len(got) < n {
			select {
			case e := <-g.Watch():
				got = append(got, fmt.Sprintf("%s %s %s", e.ID, e.Type, e.Data))
			case <-deadline:
				t.Fatalf("events %v, want %d", got, n)
			}
		}
		return got
	}
	waitEvents(2) // the first relist: both started
	lists, readsB := rt.listCount(), rt.readCount("b")

	rt.set(pod("a", ctr("1", container.StateExited)), pod("b", ctr("2", container.StateRunning)))
	g.Trigger("1")
	if got := waitEvents(1); got[0] != "a ContainerDied 1" {
		t.Fatalf("event %v", got)
	}
	if rt.listCount() != lists || rt.readCount("b") != readsB {
		t.Fatalf("a known container's change listed the runtime (%d -> %d lists) or read other pods", lists, rt.listCount())
	}
	if s, _ := g.Cache().Get("a"); s.ContainerStatuses[0].State != container.StateExited {
		t.Fatalf("cache %v", s)
	}

	// A container nobody knows yet: everything is relisted.
	rt.set(pod("a", ctr("1", container.StateExited)), pod("b", ctr("2", container.StateRunning), ctr("3", container.StateRunning)))
	g.Trigger("3")
	if got := waitEvents(1); got[0] != "b ContainerStarted 3" {
		t.Fatalf("event %v", got)
	}
	if rt.listCount() != lists+1 {
		t.Fatalf("an unknown container did not relist (%d lists)", rt.listCount()-lists)
	}
}

// runWithOneContainer runs a PLEG relisting hourly on a fake clock, over
// a runtime with one pod running one container; it stops with the test.
func runWithOneContainer(t *testing.T) (*fakeRuntime, *testingclock.FakeClock, *Generic) {
	rt := &fakeRuntime{}
	clk := testingclock.NewFakeClock(time.Unix(100, 0))
	g := NewGeneric(GenericOptions{Runtime: rt, Period: time.Hour, Clock: clk})
	rt.set(pod("a", ctr("1", container.StateRunning)))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go g.Run(ctx)
	return rt, clk, g
}

// TestTriggerRetriesAnExitNotRecordedYet: the runtime reported an exit
// its status does not show yet; the pod is read again shortly after.
func TestTriggerRetriesAnExitNotRecordedYet(t *testing.T) {
	rt, clk, g := runWithOneContainer(t)
	<-g.Watch()    // started
	g.Trigger("1") // the status still says running
	// The first relist's read, then this one.
	testutil.WaitFor(t, "the triggered pod read", func() bool { return rt.readCount("a") >= 2 })
	rt.set(pod("a", ctr("1", container.StateExited)))
	// Run's ticker waits on the clock; the retry is a second waiter.
	testutil.WaitFor(t, "a retry scheduled", func() bool { return clk.Waiters() >= 2 })
	clk.Step(exitRetryDelay)
	select {
	case e := <-g.Watch():
		if e.Type != ContainerDied {
			t.Fatalf("event %v", e.Type)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the exit was not seen on the retry")
	}
}

// TestTriggerRetriesForSeconds: an exit the runtime's status shows only
// late (a loaded node) is read again for about five seconds, then left
// to the relist.
func TestTriggerRetriesForSeconds(t *testing.T) {
	rt, clk, g := runWithOneContainer(t)
	<-g.Watch() // started
	g.Trigger("1")
	testutil.WaitFor(t, "the triggered pod read", func() bool { return rt.readCount("a") >= 2 })
	var waited time.Duration
	for reads := 2; reads < 2+exitRetries; reads++ {
		testutil.WaitFor(t, "a retry scheduled", func() bool { return clk.Waiters() >= 2 })
		d := exitRetryDelay << (reads - 2)
		clk.Step(d)
		waited += d
		testutil.WaitFor(t, "the retry's read", func() bool { return rt.readCount("a") >= reads+1 })
	}
	if waited < 5*time.Second {
		t.Fatalf("retries gave up after %v", waited)
	}
	// The last retry schedules nothing more: only Run's ticker waits.
	g.Trigger() // a full relist proves the loop went on past the last retry
	testutil.WaitFor(t, "the relist", func() bool { return rt.listCount() >= 2 })
	if w := clk.Waiters(); w != 1 {
		t.Fatalf("%d waiters after the last retry, want Run's ticker alone", w)
	}
}

// Housekeeping's view of the runtime is the last relist's, with each pod
// read since in place of what the relist found; the runtime is listed
// afresh only when no relist succeeded in the last two periods.
func TestRuntimePodsReusesTheRelist(t *testing.T) {
	R, E := container.StateRunning, container.StateExited
	rt, clk, g := newTestGeneric()
	ctx := context.Background()
	view := func() map[types.UID]string {
		t.Helper()
		pods, err := g.RuntimePods(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[types.UID]string{}
		for _, p := range pods {
			for _, c := range p.Containers {
				out[p.ID] += fmt.Sprintf("%s:%s ", c.ID.ID, c.State)
			}
		}
		return out
	}

	// No relist yet: the runtime is listed.
	rt.set(pod("a", ctr("1", R)), pod("b", ctr("2", R)), pod("c", ctr("3", R)))
	if got, want := view(), map[types.UID]string{"a": "1:running ", "b": "2:running ", "c": "3:running "}; !reflect.DeepEqual(got, want) {
		t.Fatalf("before any relist: %v, want %v", got, want)
	}
	if n := rt.listCount(); n != 1 {
		t.Fatalf("%d runtime lists before any relist, want 1", n)
	}
	g.Relist(ctx)

	// After the relist, a worker stops b and reads it back; c's
	// containers are removed and read; a is untouched. The runtime is not
	// listed again, and b does not show running: it would be taken for an
	// orphan.
	clk.Step(500 * time.Millisecond)
	rt.set(pod("a", ctr("1", R)), pod("b", ctr("2", E)))
	for _, uid := range []string{"b", "c"} {
		if _, err := g.Refresh(ctx, types.UID(uid), uid, "ns"); err != nil {
			t.Fatal(err)
		}
	}
	lists := rt.listCount()
	if got, want := view(), map[types.UID]string{"a": "1:running ", "b": "2:exited "}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after reads since the relist: %v, want %v", got, want)
	}
	if n := rt.listCount(); n != lists {
		t.Fatalf("the runtime was listed %d more times, want none", n-lists)
	}

	// Two periods without a relist: the runtime is listed afresh.
	clk.Step(1600 * time.Millisecond)
	rt.set(pod("a", ctr("1", E)))
	if got, want := view(), map[types.UID]string{"a": "1:exited "}; !reflect.DeepEqual(got, want) {
		t.Fatalf("with a stale relist: %v, want %v", got, want)
	}
	if n := rt.listCount(); n != lists+1 {
		t.Fatalf("the runtime was listed %d more times with a stale relist, want 1", n-lists)
	}
}

// TestReadBackServesTheWorkersNextSyncOnce: the worker's read back after
// its sync changed the pod (Refresh) answers the worker's next sync from
// the cache, whatever its minimum time, once; a read the worker made for
// itself at a sync's start (GetNewerThan) does not, nor does the read
// back once a newer read replaced it.
func TestReadBackServesTheWorkersNextSyncOnce(t *testing.T) {
	rt, clk, g := newTestGeneric()
	ctx := context.Background()
	rt.set(pod("p", ctr("1", container.StateRunning)))
	next := func(reads int, why string) {
		t.Helper()
		// The sync that read back ended after the read.
		clk.Step(time.Millisecond)
		if s, err := g.GetNewerThan(ctx, "p", "p", "ns", clk.Now()); err != nil || len(s.ContainerStatuses) != 1 {
			t.Fatalf("status %v %v", s, err)
		}
		if n := rt.readCount("p"); n != reads {
			t.Fatalf("%d reads, want %d: %s", n, reads, why)
		}
	}
	if _, err := g.Refresh(ctx, "p", "p", "ns"); err != nil {
		t.Fatal(err)
	}
	next(1, "the read back serves the next sync")
	next(2, "the read back served one sync already; this one may have changed the pod")
	next(3, "a sync's own read at its start is no read back")

	if _, err := g.Refresh(ctx, "p", "p", "ns"); err != nil {
		t.Fatal(err)
	}
	// A relist's newer read of the pod replaces the read back.
	g.cache.Set("p", &container.PodStatus{ID: "p"}, nil, clk.Now().Add(time.Microsecond))
	clk.Step(time.Millisecond)
	if s, _ := g.GetNewerThan(ctx, "p", "p", "ns", clk.Now()); len(s.ContainerStatuses) != 1 || rt.readCount("p") != 5 {
		t.Fatalf("status %v after %d reads: the replaced read back was used", s, rt.readCount("p"))
	}
}
