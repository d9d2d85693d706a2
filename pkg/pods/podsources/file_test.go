package podsources

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testutil"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
)

// setRecorder collects the sets a source delivers; onSet, if set, runs
// first (a slow merge, say).
type setRecorder struct {
	sets  chan []*v1.Pod
	onSet func()
}

func (r *setRecorder) Set(ctx context.Context, source string, pods []*v1.Pod) {
	if r.onSet != nil {
		r.onSet()
	}
	select {
	case r.sets <- pods:
	case <-ctx.Done():
	}
}

func manifest(name, image string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\nspec:\n  containers:\n  - name: c\n    image: %s\n", name, image)
}

type fileFixture struct {
	t      *testing.T
	dir    string
	clock  *testingclock.FakeClock
	rec    *setRecorder
	events *record.FakeRecorder
	// relisted gets a value after each re-read has ended.
	relisted chan struct{}
}

func startFileSource(t *testing.T, path string) *fileFixture {
	return startFileSourceWith(t, path, nil)
}

func startFileSourceWith(t *testing.T, path string, onSet func(*testingclock.FakeClock)) *fileFixture {
	f := &fileFixture{t: t, dir: path, clock: testingclock.NewFakeClock(time.Unix(1000, 0)),
		rec: &setRecorder{sets: make(chan []*v1.Pod, 100)}, events: record.NewFakeRecorder(100)}
	if onSet != nil {
		f.rec.onSet = func() { onSet(f.clock) }
	}
	src := NewFileSource(path, Static{NodeName: "node1"}, 20*time.Second, f.rec, f.events, f.clock)
	f.relisted = make(chan struct{}, 100)
	src.relisted = func() { f.relisted <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { src.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

// names formats a set as "name@image" entries, sorted.
func names(pods []*v1.Pod) string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name+"@"+p.Spec.Containers[0].Image)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// waitFor waits for a delivered set matching want, and for the re-read
// that delivered it to end, failing after 5 s.
func (f *fileFixture) waitFor(want string) []*v1.Pod {
	f.t.Helper()
	// Generous: under -race beside the integration suites on 2 cores, the
	// first read (a manifest past the size limit among them) took over 5 s.
	deadline := time.After(30 * time.Second)
	last := "<none>"
	for {
		select {
		case pods := <-f.rec.sets:
			select {
			case <-f.relisted:
			case <-deadline:
				f.t.Fatalf("the re-read that delivered %q did not end", names(pods))
			}
			if last = names(pods); last == want {
				return pods
			}
		case <-deadline:
			f.t.Fatalf("no set %q delivered; last was %q", want, last)
		}
	}
}

// waitForStepping is waitFor for a re-read that may be held back: while
// no set matching want has come, it steps the clock by step every 50 ms
// of real time (past the pace, so a held-back re-read runs).
func (f *fileFixture) waitForStepping(want string, step time.Duration) []*v1.Pod {
	f.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	last := "<none>"
	for time.Now().Before(deadline) {
		select {
		case pods := <-f.rec.sets:
			if last = names(pods); last == want {
				return pods
			}
		case <-time.After(50 * time.Millisecond):
			f.clock.Step(step)
		}
	}
	f.t.Fatalf("no set %q delivered; last was %q", want, last)
	return nil
}

func (f *fileFixture) write(name, content string) {
	f.t.Helper()
	tmp := filepath.Join(f.dir, ".tmp-"+name)
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(f.dir, name)); err != nil {
		f.t.Fatal(err)
	}
}

// Re-reads caused by file events are spaced by four times the last one's
// length, so a burst of writes (one event per file) is read a few times,
// not once per file. The first write after a quiet spell is read at once.
func TestFileSourcePacesRereadsInABurst(t *testing.T) {
	dir := t.TempDir()
	// Every re-read takes 100 ms of the fake clock.
	f := startFileSourceWith(t, dir, func(clk *testingclock.FakeClock) { clk.Step(100 * time.Millisecond) })
	f.waitFor("")
	f.clock.Step(time.Second) // a quiet spell after the first read
	f.write("a.yaml", manifest("a", "img:1"))
	f.waitFor("a-node1@img:1")
	// Within 400 ms of that re-read: held back until then (the period's
	// ticker is the clock's other waiter).
	f.write("b.yaml", manifest("b", "img:1"))
	testutil.WaitFor(t, "the held-back re-read's timer", func() bool { return f.clock.Waiters() == 2 })
	select {
	case pods := <-f.rec.sets:
		t.Fatalf("re-read %q within the pace", names(pods))
	default:
	}
	f.clock.Step(400 * time.Millisecond)
	f.waitFor("a-node1@img:1,b-node1@img:1")
	// After a quiet spell the next write is read at once.
	f.clock.Step(time.Second)
	f.write("d.yaml", manifest("d", "img:1"))
	f.waitFor("a-node1@img:1,b-node1@img:1,d-node1@img:1")
}

// A manifest removed and put back before the source re-reads is
// delivered gone, then back, as upstream's source delivers each file
// event: its pod is stopped and started again (node e2e: "MirrorPod when
// create a mirror pod without changes should successfully recreate when
// file is removed and recreated"), under the same UID.
func TestFileSourceRemovedAndPutBackIsGoneThenBack(t *testing.T) {
	dir := t.TempDir()
	testutil.Must(t, os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(manifest("a", "img:1")), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(dir, "b.yaml"), []byte(manifest("b", "img:1")), 0o644))
	// Every re-read takes 100 ms of the fake clock, so a file event right
	// after one is held back: the removal and the write back are read
	// together.
	f := startFileSourceWith(t, dir, func(clk *testingclock.FakeClock) { clk.Step(100 * time.Millisecond) })
	first := f.waitFor("a-node1@img:1,b-node1@img:1")
	testutil.Must(t, os.Remove(filepath.Join(dir, "a.yaml")))
	f.write("a.yaml", manifest("a", "img:1"))
	testutil.WaitFor(t, "the held-back re-read's timer", func() bool { return f.clock.Waiters() == 2 })
	f.clock.Step(400 * time.Millisecond)
	var got []string
	var back []*v1.Pod
	for len(got) < 2 {
		select {
		case pods := <-f.rec.sets:
			got = append(got, names(pods))
			back = pods
		case <-time.After(30 * time.Second):
			t.Fatalf("sets delivered %q, want two", got)
		}
	}
	if strings.Join(got, " then ") != "b-node1@img:1 then a-node1@img:1,b-node1@img:1" {
		t.Fatalf("sets %q, want a gone then back", got)
	}
	for _, p := range back {
		if p.Name == "a-node1" && string(p.UID) != podUID(first, "a-node1") {
			t.Errorf("the same manifest put back got another UID")
		}
	}
	// A removal alone is one set without it; nothing comes back. The
	// write back's last events may come after the re-read that delivered
	// it, and hold a re-read back on the fake clock: step it until the
	// removal is read.
	testutil.Must(t, os.Remove(filepath.Join(dir, "a.yaml")))
	f.waitForStepping("b-node1@img:1", 500*time.Millisecond)
	f.clock.Step(20 * time.Second)
	f.waitFor("b-node1@img:1")
}

func podUID(pods []*v1.Pod, name string) string {
	for _, p := range pods {
		if p.Name == name {
			return string(p.UID)
		}
	}
	return ""
}

func TestFileSourceFollowsTheDirectory(t *testing.T) {
	dir := t.TempDir()
	testutil.Must(t, os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(manifest("a", "img:1")), 0o644))
	f := startFileSource(t, dir)
	first := f.waitFor("a-node1@img:1")

	f.write("b.json", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"b"},"spec":{"containers":[{"name":"c","image":"img:1"}]}}`)
	f.waitFor("a-node1@img:1,b-node1@img:1")

	// Editing in place (not via rename) is seen too.
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(manifest("a", "img:2")), 0o644); err != nil {
		t.Fatal(err)
	}
	edited := f.waitFor("a-node1@img:2,b-node1@img:1")
	for _, p := range edited {
		if p.Name == "a-node1" && p.UID == first[0].UID {
			t.Error("changed content kept the UID")
		}
	}

	f.write(".hidden.yaml", manifest("hidden", "img:1"))
	testutil.Must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	testutil.Must(t, os.WriteFile(filepath.Join(dir, "sub", "c.yaml"), []byte(manifest("c", "img:1")), 0o644))
	testutil.Must(t, os.Remove(filepath.Join(dir, "b.json")))
	f.waitFor("a-node1@img:2")
	// Periodic re-reads deliver the same set again; the merge dedups.
	f.clock.Step(20 * time.Second)
	f.waitFor("a-node1@img:2")
}

func TestFileSourceTouchKeepsTheUID(t *testing.T) {
	dir := t.TempDir()
	f := startFileSource(t, dir)
	f.waitFor("")
	f.clock.Step(time.Second) // a quiet spell after the first read
	f.write("a.yaml", manifest("a", "img:1"))
	first := f.waitFor("a-node1@img:1")
	// Reformatted but equal content, rewritten by rename.
	f.write("a.yaml", "# reformatted\n"+manifest("a", "img:1"))
	again := f.waitFor("a-node1@img:1")
	if again[0].UID != first[0].UID {
		t.Fatal("rewriting equal content changed the UID")
	}
}

func TestFileSourceSymlinkSwap(t *testing.T) {
	dir, store := t.TempDir(), t.TempDir()
	testutil.Must(t, os.WriteFile(filepath.Join(store, "v1.yaml"), []byte(manifest("web", "img:1")), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(store, "v2.yaml"), []byte(manifest("web", "img:2")), 0o644))
	if err := os.Symlink(filepath.Join(store, "v1.yaml"), filepath.Join(dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	f := startFileSource(t, dir)
	f.waitFor("web-node1@img:1")
	tmp := filepath.Join(dir, ".web.yaml.new")
	testutil.Must(t, os.Symlink(filepath.Join(store, "v2.yaml"), tmp))
	if err := os.Rename(tmp, filepath.Join(dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	f.waitFor("web-node1@img:2")
}

func TestFileSourceSingleFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "only.yaml")
	testutil.Must(t, os.WriteFile(path, []byte(manifest("only", "img:1")), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(dir, "other.yaml"), []byte(manifest("other", "img:1")), 0o644))
	f := startFileSource(t, path)
	f.waitFor("only-node1@img:1")
	tmp := filepath.Join(dir, "only.yaml.swp")
	testutil.Must(t, os.WriteFile(tmp, []byte(manifest("only", "img:2")), 0o644))
	testutil.Must(t, os.Rename(tmp, path))
	f.waitFor("only-node1@img:2")
}

func TestFileSourceDirectoryAppearing(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "manifests")
	f := startFileSource(t, dir)
	// A missing path is an empty set, so the source counts as ready.
	f.waitFor("")
	testutil.Must(t, os.Mkdir(dir, 0o755))
	testutil.Must(t, os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(manifest("a", "img:1")), 0o644))
	f.waitFor("a-node1@img:1")
}

func TestFileSourceReportsBadFilesOnce(t *testing.T) {
	dir := t.TempDir()
	testutil.Must(t, os.WriteFile(filepath.Join(dir, "good.yaml"), []byte(manifest("good", "img:1")), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(dir, "garbage.yaml"), []byte("{{{ not yaml"), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(dir, "invalid.yaml"), []byte(manifest("Bad_Name", "img:1")), 0o644))
	testutil.Must(t, os.WriteFile(filepath.Join(dir, "service.yaml"), []byte("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n"), 0o644))
	testutil.Must(t, os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, "dangling.yaml")))
	testutil.Must(t, os.Symlink(filepath.Join(dir, "loop2.yaml"), filepath.Join(dir, "loop1.yaml")))
	testutil.Must(t, os.Symlink(filepath.Join(dir, "loop1.yaml"), filepath.Join(dir, "loop2.yaml")))
	huge := manifest("huge", "img:1") + "# " + strings.Repeat("x", maxManifestBytes) + "\n"
	testutil.Must(t, os.WriteFile(filepath.Join(dir, "huge.yaml"), []byte(huge), 0o644))
	f := startFileSource(t, dir)
	f.waitFor("good-node1@img:1")
	f.clock.Step(20 * time.Second)
	f.waitFor("good-node1@img:1")

	var events []string
	for len(f.events.Events) > 0 {
		events = append(events, <-f.events.Events)
	}
	joined := strings.Join(events, "\n")
	for _, want := range []string{"garbage.yaml", "invalid.yaml", "Bad_Name", "service.yaml", "Service", "dangling.yaml",
		"loop1.yaml: too many levels of symbolic links", "loop2.yaml", "huge.yaml: manifest is larger than 10485760 bytes"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no event mentions %q:\n%s", want, joined)
		}
	}
	if len(events) != 7 {
		t.Errorf("%d events after two reads, want 7 (one per bad file):\n%s", len(events), joined)
	}
}

func TestFileSourceSameNameKeepsTheOlderFile(t *testing.T) {
	dir := t.TempDir()
	f := startFileSource(t, dir)
	f.waitFor("")
	f.write("z-first.yaml", manifest("web", "img:1"))
	f.waitFor("web-node1@img:1")
	// a-second.yaml sorts first but appeared later: z-first.yaml wins, and
	// the merge (not the source) drops the duplicate.
	f.write("a-second.yaml", manifest("web", "img:2"))
	pods := f.waitFor("web-node1@img:1,web-node1@img:2")
	if pods[0].Spec.Containers[0].Image != "img:1" {
		t.Fatalf("the newer file comes first: %s", names(pods))
	}
}
