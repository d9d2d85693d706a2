package podsources

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

func mkPod(uid, name string) *v1.Pod {
	p := &v1.Pod{}
	p.UID, p.Name, p.Namespace = types.UID(uid), name, "ns"
	p.Spec.Containers = []v1.Container{{Name: "c", Image: "img:1"}}
	return p
}

// received drains what the merge delivered, formatted as "OP name,name".
func received(c *PodConfig) []string {
	var out []string
	for {
		select {
		case u := <-c.Updates():
			var names []string
			for _, p := range u.Pods {
				names = append(names, p.Name)
			}
			out = append(out, fmt.Sprintf("%s %s", u.Op, strings.Join(names, ",")))
		default:
			return out
		}
	}
}

func newConfig() (*PodConfig, *testingclock.FakeClock, *record.FakeRecorder) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rec := record.NewFakeRecorder(100)
	return New(rec, clk), clk, rec
}

func TestMerge(t *testing.T) {
	deleted := metav1.NewTime(time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC))
	ten := int64(10)
	tests := []struct {
		name   string
		before []*v1.Pod
		change func(p *v1.Pod)
		want   []string
	}{
		{"nothing changed", []*v1.Pod{mkPod("a", "a")}, func(p *v1.Pod) {}, nil},
		{"spec changed", []*v1.Pod{mkPod("a", "a")}, func(p *v1.Pod) { p.Spec.Containers[0].Image = "img:2" }, []string{"UPDATE a"}},
		{"labels changed", []*v1.Pod{mkPod("a", "a")}, func(p *v1.Pod) { p.Labels = map[string]string{"x": "y"} }, []string{"UPDATE a"}},
		{"annotation changed", []*v1.Pod{mkPod("a", "a")}, func(p *v1.Pod) { p.Annotations = map[string]string{"x": "y"} }, []string{"UPDATE a"}},
		{"only nodelet's own annotations changed", []*v1.Pod{mkPod("a", "a")}, func(p *v1.Pod) {
			p.Annotations = map[string]string{podutil.ConfigFirstSeenAnnotationKey: "other", podutil.ConfigMirrorAnnotationKey: "x"}
		}, nil},
		{"deletion timestamp set", []*v1.Pod{mkPod("a", "a")}, func(p *v1.Pod) {
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &deleted, &ten
		}, []string{"DELETE a"}},
		{"status only", []*v1.Pod{mkPod("a", "a")}, func(p *v1.Pod) { p.Status.Phase = v1.PodRunning }, []string{"RECONCILE a"}},
		{"spec and status: an update, no extra reconcile", []*v1.Pod{mkPod("a", "a")}, func(p *v1.Pod) {
			p.Spec.Containers[0].Image = "img:2"
			p.Status.Phase = v1.PodRunning
		}, []string{"UPDATE a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _, _ := newConfig()
			ctx := context.Background()
			c.Set(ctx, "api", copies(tc.before))
			received(c)
			next := copies(tc.before)
			tc.change(next[0])
			c.Set(ctx, "api", next)
			if got := received(c); strings.Join(got, ";") != strings.Join(tc.want, ";") {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func copies(pods []*v1.Pod) []*v1.Pod {
	out := make([]*v1.Pod, len(pods))
	for i, p := range pods {
		out[i] = p.DeepCopy()
	}
	return out
}

func TestMergeDeletionGracePeriodChange(t *testing.T) {
	c, _, _ := newConfig()
	ctx := context.Background()
	deleted := metav1.NewTime(time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC))
	ten, five := int64(10), int64(5)
	p := mkPod("a", "a")
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &deleted, &ten
	c.Set(ctx, "api", []*v1.Pod{p.DeepCopy()})
	received(c)
	p.DeletionGracePeriodSeconds = &five
	c.Set(ctx, "api", []*v1.Pod{p})
	if got := received(c); len(got) != 1 || got[0] != "DELETE a" {
		t.Fatalf("got %v, want a DELETE with the shorter grace period", got)
	}
}

func TestMergeOrderAndFirstSet(t *testing.T) {
	c, _, _ := newConfig()
	ctx := context.Background()

	// A source's first, empty set still tells the loop it reported.
	c.Set(ctx, "file", nil)
	if got := received(c); len(got) != 1 || got[0] != "ADD " {
		t.Fatalf("first empty set: %v", got)
	}
	c.Set(ctx, "file", nil)
	if got := received(c); len(got) != 0 {
		t.Fatalf("second empty set: %v", got)
	}

	keep, gone, upd, del, rec := mkPod("k", "keep"), mkPod("g", "gone"), mkPod("u", "upd"), mkPod("d", "del"), mkPod("r", "rec")
	c.Set(ctx, "api", copies([]*v1.Pod{keep, gone, upd, del, rec}))
	if got := received(c); len(got) != 1 || !strings.HasPrefix(got[0], "ADD ") {
		t.Fatalf("first set with pods: %v", got)
	}
	now := metav1.NewTime(time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC))
	next := copies([]*v1.Pod{keep, upd, del, rec})
	next[1].Spec.Containers[0].Image = "img:2"
	next[2].DeletionTimestamp = &now
	next[3].Status.Phase = v1.PodRunning
	next = append(next, mkPod("n", "new"))
	c.Set(ctx, "api", next)
	want := []string{"REMOVE gone", "ADD new", "UPDATE upd", "DELETE del", "RECONCILE rec"}
	if got := received(c); strings.Join(got, ";") != strings.Join(want, ";") {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestMergeAnnotations(t *testing.T) {
	c, clk, _ := newConfig()
	ctx := context.Background()
	c.Set(ctx, "file", []*v1.Pod{mkPod("a", "a")})
	add := <-c.Updates()
	seen := add.Pods[0].Annotations[podutil.ConfigFirstSeenAnnotationKey]
	if add.Pods[0].Annotations[podutil.ConfigSourceAnnotationKey] != "file" || seen == "" {
		t.Fatalf("annotations %v", add.Pods[0].Annotations)
	}
	clk.Step(time.Hour)
	p := mkPod("a", "a")
	p.Spec.Containers[0].Image = "img:2"
	c.Set(ctx, "file", []*v1.Pod{p})
	upd := <-c.Updates()
	if got := upd.Pods[0].Annotations[podutil.ConfigFirstSeenAnnotationKey]; got != seen {
		t.Fatalf("first-seen time changed from %s to %s on update", seen, got)
	}
}

func TestMergeDuplicateNamesKeepTheFirst(t *testing.T) {
	c, _, rec := newConfig()
	c.Set(context.Background(), "file", []*v1.Pod{mkPod("first", "web"), mkPod("second", "web")})
	u := <-c.Updates()
	if len(u.Pods) != 1 || u.Pods[0].UID != "first" {
		t.Fatalf("got %v", u.Pods)
	}
	if e := <-rec.Events; !strings.Contains(e, "duplicate pod name") {
		t.Fatalf("event %q", e)
	}
}

func TestMergeDeliversCopies(t *testing.T) {
	c, _, _ := newConfig()
	ctx := context.Background()
	c.Set(ctx, "api", []*v1.Pod{mkPod("a", "a")})
	first := <-c.Updates()
	p := mkPod("a", "a")
	p.Spec.Containers[0].Image = "img:2"
	c.Set(ctx, "api", []*v1.Pod{p})
	<-c.Updates()
	if first.Pods[0].Spec.Containers[0].Image != "img:1" {
		t.Fatal("a delivered pod changed under the consumer's feet")
	}
}

func TestSourcesReady(t *testing.T) {
	c, _, _ := newConfig()
	r := NewSourcesReady(c.Sources)
	if !r.AllReady() {
		t.Fatal("no sources configured is ready")
	}
	if !closed(NewSourcesReady(c.Sources).Known()) {
		t.Fatal("with no sources configured the pods are not known")
	}
	c.Register("file")
	c.Register("api")
	r.AddSource("file")
	if r.AllReady() {
		t.Fatal("ready before the api source reported")
	}
	r.AddSource("api")
	if !r.AllReady() {
		t.Fatal("not ready after every source reported")
	}
	if !closed(r.Known()) {
		t.Fatal("the pods are not known after every source reported")
	}
}

// The node's pods are known once every source reported or the journal
// stood in for it; the journal does not make a source ready.
func TestPodsKnownFromTheJournal(t *testing.T) {
	c, _, _ := newConfig()
	c.Register("file")
	c.Register("api")
	r := NewSourcesReady(c.Sources)
	r.AddSource("file")
	if closed(r.Known()) {
		t.Fatal("known before the api source reported or was restored")
	}
	r.AddRestored("api")
	if !closed(r.Known()) || r.AllReady() {
		t.Fatalf("after the journal stood in: known %v, ready %v; want known, not ready", closed(r.Known()), r.AllReady())
	}
	r.AddSource("api")
	if !closed(r.Known()) || !r.AllReady() {
		t.Fatal("not known and ready once the source reported")
	}
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestStaticPodIdentity(t *testing.T) {
	base := mkPod("", "web")
	base.Namespace = ""
	a, err := staticPod(base, "node1", "/etc/manifests/web.yaml", true)
	if err != nil {
		t.Fatal(err)
	}
	if a.Name != "web-node1" || a.Namespace != "default" || a.Spec.NodeName != "node1" {
		t.Errorf("identity: name %q namespace %q node %q", a.Name, a.Namespace, a.Spec.NodeName)
	}
	if a.UID == "" || a.Annotations[podutil.ConfigHashAnnotationKey] != string(a.UID) || a.Status.Phase != v1.PodPending {
		t.Errorf("uid %q annotations %v phase %q", a.UID, a.Annotations, a.Status.Phase)
	}
	again, _ := staticPod(base, "node1", "/etc/manifests/web.yaml", true)
	if again.UID != a.UID {
		t.Error("same content got a different UID")
	}
	changed := base.DeepCopy()
	changed.Spec.Containers[0].Image = "img:2"
	for name, other := range map[string]func() (*v1.Pod, error){
		"content": func() (*v1.Pod, error) { return staticPod(changed, "node1", "/etc/manifests/web.yaml", true) },
		"node":    func() (*v1.Pod, error) { return staticPod(base, "node2", "/etc/manifests/web.yaml", true) },
		"path":    func() (*v1.Pod, error) { return staticPod(base, "node1", "/etc/manifests/other.yaml", true) },
	} {
		p, err := other()
		if err != nil || p.UID == a.UID {
			t.Errorf("changed %s kept the UID (%v)", name, err)
		}
	}
	// Spelling out a default does not change the pod, so not its UID.
	explicit := base.DeepCopy()
	explicit.Spec.RestartPolicy = v1.RestartPolicyAlways
	if p, _ := staticPod(explicit, "node1", "/etc/manifests/web.yaml", true); p.UID != a.UID {
		t.Error("an explicit default changed the UID")
	}
	foundToleration := false
	for _, tol := range a.Spec.Tolerations {
		if tol.Operator == v1.TolerationOpExists && tol.Effect == v1.TaintEffectNoExecute {
			foundToleration = true
		}
	}
	if !foundToleration {
		t.Error("file static pod does not tolerate NoExecute taints")
	}
	// A UID given in the manifest is kept.
	fixed := base.DeepCopy()
	fixed.UID = "given"
	if p, _ := staticPod(fixed, "n", "/x", true); p.UID != "given" {
		t.Errorf("uid %q", p.UID)
	}
}

// A UID that leaves its source and comes back (a static pod's manifest
// removed and restored) is removed and then added afresh, with a new
// first-seen time.
func TestMergeUIDReuse(t *testing.T) {
	c, clk, _ := newConfig()
	ctx := context.Background()
	c.Set(ctx, "file", []*v1.Pod{mkPod("a", "web")})
	first := (<-c.Updates()).Pods[0].Annotations[podutil.ConfigFirstSeenAnnotationKey]
	c.Set(ctx, "file", nil)
	if got := received(c); strings.Join(got, ";") != "REMOVE web" {
		t.Fatalf("got %v", got)
	}
	clk.Step(time.Minute)
	c.Set(ctx, "file", []*v1.Pod{mkPod("a", "web")})
	u := <-c.Updates()
	if u.Op != ADD || u.Pods[0].Annotations[podutil.ConfigFirstSeenAnnotationKey] == first {
		t.Fatalf("re-added pod: %s %v", u.Op, u.Pods[0].Annotations)
	}
}

// TestMergeTrustsTheResourceVersion: an API pod delivered again with the
// same resourceVersion is unchanged (no comparison needed); a new version
// is compared as usual, and a status-only change records the new version
// so the next delivery of it is recognised too.
func TestMergeTrustsTheResourceVersion(t *testing.T) {
	c, _, _ := newConfig()
	ctx := context.Background()
	p := mkPod("a", "a")
	p.ResourceVersion = "1"
	c.Set(ctx, "api", []*v1.Pod{p.DeepCopy()})
	received(c)

	// Same version: nothing, even though (impossibly) the spec differs.
	same := p.DeepCopy()
	same.Spec.Containers[0].Image = "img:2"
	c.Set(ctx, "api", []*v1.Pod{same})
	if got := received(c); len(got) != 0 {
		t.Fatalf("an unchanged version was delivered: %v", got)
	}
	// A status change under a new version is a reconcile...
	st := p.DeepCopy()
	st.ResourceVersion, st.Status.Phase = "2", v1.PodRunning
	c.Set(ctx, "api", []*v1.Pod{st.DeepCopy()})
	if got := strings.Join(received(c), ";"); got != "RECONCILE a" {
		t.Fatalf("got %q", got)
	}
	// ...after which that version is known.
	c.Set(ctx, "api", []*v1.Pod{st.DeepCopy()})
	if got := received(c); len(got) != 0 {
		t.Fatalf("the reconciled version was delivered again: %v", got)
	}
	// A spec change under a new version is an update.
	upd := st.DeepCopy()
	upd.ResourceVersion, upd.Spec.Containers[0].Image = "3", "img:3"
	c.Set(ctx, "api", []*v1.Pod{upd})
	if got := strings.Join(received(c), ";"); got != "UPDATE a" {
		t.Fatalf("got %q", got)
	}
}

// TestMergeLeavesItsInputAlone: the API source hands the merge its
// cache's own objects, so the merge must only read them.
func TestMergeLeavesItsInputAlone(t *testing.T) {
	c, _, _ := newConfig()
	p := mkPod("a", "a")
	p.ResourceVersion = "1"
	before := p.DeepCopy()
	c.Set(context.Background(), "api", []*v1.Pod{p})
	if got := received(c); len(got) != 1 {
		t.Fatalf("got %v", got)
	}
	if !reflect.DeepEqual(p, before) {
		t.Fatalf("the merge changed its input: %+v", p.ObjectMeta)
	}
}

type stepLog []string

func (l *stepLog) Begin(pod *v1.Pod, kind instrument.Kind, name string) func(error, string) {
	return func(_ error, detail string) {
		*l = append(*l, fmt.Sprintf("%s %s %s (%s)", pod.Name, kind, name, detail))
	}
}

// Each pod's merge operations are steps of its timeline, but for the
// status-only RECONCILE (every status write comes back as one).
func TestMergeStepsForTheTimeline(t *testing.T) {
	steps := &stepLog{}
	c := New(record.NewFakeRecorder(100), testingclock.NewFakeClock(time.Unix(1000, 0)), WithSteps(steps))
	ctx := context.Background()
	a, b := mkPod("a", "a"), mkPod("b", "b")
	c.Set(ctx, "api", copies([]*v1.Pod{a, b})) // the updates fit the channel's buffer
	next := copies([]*v1.Pod{a})
	next[0].Status.Phase = v1.PodRunning
	c.Set(ctx, "api", next)
	want := "a merge ADD (from source api); b merge ADD (from source api); b merge REMOVE (from source api)"
	if got := strings.Join(*steps, "; "); got != want {
		t.Fatalf("steps %q\nwant  %q", got, want)
	}
}

type journalLog []string

func (l *journalLog) PutPod(source string, pod *v1.Pod) {
	*l = append(*l, fmt.Sprintf("put %s %s %s", source, pod.Name, pod.Status.Phase))
}
func (l *journalLog) ForgetPod(uid types.UID) { *l = append(*l, "forget "+string(uid)) }

// The journal gets every pod added or changed and every removal, but not
// the status-only RECONCILE of a running pod (nodelet's own status writes
// coming back) nor the restored pods it already holds.
func TestMergeKeepsTheJournal(t *testing.T) {
	j := &journalLog{}
	c := New(record.NewFakeRecorder(100), testingclock.NewFakeClock(time.Unix(1000, 0)), WithJournal(j))
	ctx := context.Background()
	a, b := mkPod("a", "a"), mkPod("b", "b")
	c.Restore(ctx, "api", copies([]*v1.Pod{a}))
	c.Set(ctx, "api", copies([]*v1.Pod{a, b}))
	running := copies([]*v1.Pod{a})
	running[0].Status.Phase = v1.PodRunning
	c.Set(ctx, "api", running)
	done := copies([]*v1.Pod{a})
	done[0].Status.Phase = v1.PodSucceeded
	c.Set(ctx, "api", done)
	want := "put api b ; forget b; put api a Succeeded"
	if got := strings.Join(*j, "; "); got != want {
		t.Fatalf("journal %q\nwant    %q", got, want)
	}
	received(c)
}

// Restored pods are delivered as such (the source does not count as
// ready for them), only until the source reports; the source's set is
// then merged against them: a pod deleted meanwhile is removed.
func TestRestoreUntilTheSourceReports(t *testing.T) {
	c, _, _ := newConfig()
	c.Register("api")
	ready := NewSourcesReady(c.Sources)
	ctx := context.Background()
	kept, deleted := mkPod("kept", "kept"), mkPod("deleted", "deleted")
	if !c.Restore(ctx, "api", copies([]*v1.Pod{kept, deleted})) {
		t.Fatal("Restore did not stand in for a silent source")
	}
	u := <-c.Updates()
	if u.Op != ADD || !u.Restored || len(u.Pods) != 2 {
		t.Fatalf("restored update: %+v", u)
	}
	if ready.AllReady() {
		t.Fatal("the journal made the source ready")
	}
	c.Set(ctx, "api", copies([]*v1.Pod{kept}))
	if got := received(c); !reflect.DeepEqual(got, []string{"REMOVE deleted", "ADD "}) {
		t.Fatalf("after the source reported: %v", got)
	}
	if c.Restore(ctx, "api", copies([]*v1.Pod{kept, deleted})) {
		t.Fatal("Restore stood in for a source that had reported")
	}
	if got := received(c); got != nil {
		t.Fatalf("a restore after the source reported: %v", got)
	}
}

// A journal that kept no pods of a silent source still stands in for it:
// an empty restored ADD tells the sync loop the node's pods are known.
func TestRestoreOfNoPods(t *testing.T) {
	c, _, _ := newConfig()
	c.Register("api")
	if !c.Restore(context.Background(), "api", nil) {
		t.Fatal("Restore of no pods did not stand in")
	}
	if u := <-c.Updates(); u.Op != ADD || !u.Restored || len(u.Pods) != 0 {
		t.Fatalf("restored update: %+v, want an empty restored ADD", u)
	}
}
