package journal

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/pkg/observe/timeline"
)

var t0 = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)

func testPod(name string, uid types.UID, cm string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: uid, ResourceVersion: "7"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "main", Image: "busybox"}}}}
	if cm != "" {
		p.Spec.Volumes = []v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: cm}}}}}
	}
	return p
}

// running is an open journal whose writer runs until the test ends (or
// stop is called).
type running struct {
	*Journal
	state *State
	stop  func()
}

func openRunning(t *testing.T, o Options) running {
	t.Helper()
	j, state, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = j.Run(ctx); close(done) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			stop()
		}
	})
	return running{j, state, stop}
}

func options(t *testing.T, clk *testingclock.FakeClock) Options {
	return Options{Path: filepath.Join(t.TempDir(), "journal.db"), Clock: clk, KeepTimelines: 2, LockTimeout: 50 * time.Millisecond}
}

func flush(t *testing.T, j *Journal) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// Everything written is there after a restart, and a pod that left its
// source leaves nothing behind, even a status written after it left.
func TestRecordsSurviveARestart(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	o := options(t, clk)
	j := openRunning(t, o)
	web, gone := testPod("web", "uid-web", "cfg"), testPod("gone", "uid-gone", "")
	j.PutPod("api", web)
	j.PutPod("api", gone)
	j.Decide(web, true, "", "")
	j.Decide(gone, false, "OutOfcpu", "no cpu")
	j.PodStatus(web.UID, &v1.PodStatus{Phase: v1.PodSucceeded}, true)
	j.PutObject("configmap", "default", "cfg", &v1.ConfigMap{Data: map[string]string{"k": "v"}})
	j.PutObject("configmap", "default", "unreferenced", &v1.ConfigMap{})
	j.PutToken("default/sa/uid-web//3600", TokenRecord{Namespace: "default", ServiceAccount: "sa", Pod: web.UID, Token: "t", Expires: t0.Add(time.Hour)})
	j.PutTimeline(timeline.Timeline{UID: "uid-old", Name: "old", Steps: []timeline.Step{{Kind: "sync"}}})
	j.ForgetPod(gone.UID)
	j.PodStatus(gone.UID, &v1.PodStatus{Phase: v1.PodFailed}, true) // late, after the pod left
	j.stop()

	j = openRunning(t, o)
	s := j.state
	// The late status of the pod that left may be there (an orphan, for
	// the prune below) or pruned already, by the first Run's prune.
	if g, ok := s.Pod(gone.UID); ok && (g.Pod != nil || g.Decision != nil) {
		t.Fatalf("the pod that left is still recorded: %+v", g)
	}
	e, ok := s.Pod(web.UID)
	if !ok || e.Pod.Name != "web" || e.Source != "api" || !e.Decision.Admitted || e.Status.Status.Phase != v1.PodSucceeded || !e.Status.Finished {
		t.Errorf("web's entry: %+v", e)
	}
	if admitted, _, _, ok := j.Decision(web.UID); !ok || !admitted {
		t.Errorf("web's decision not loaded")
	}
	if _, _, _, ok := j.Decision(gone.UID); ok {
		t.Errorf("the forgotten pod's decision survived")
	}
	// The unreferenced object may be pruned already, as above.
	if len(s.Timelines) != 1 || s.Timelines[0].Name != "old" || len(s.Tokens) != 1 || len(s.Objects) == 0 || s.Objects[0] != "configmap/default/cfg" {
		t.Errorf("timelines %v, tokens %v, objects %v", s.Timelines, s.Tokens, s.Objects)
	}
	var cm v1.ConfigMap
	if ok, err := j.Object("configmap", "default", "cfg", &cm); !ok || err != nil || cm.Data["k"] != "v" {
		t.Errorf("configMap: %v %v %v", ok, err, cm.Data)
	}
	// Run pruned at its start: the late status of the pod that left, and
	// the object nobody refers to.
	j.stop()
	s, _, err := Inspect(o.Path)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Pods) != 1 || s.Pods[0].UID != web.UID || len(s.Objects) != 1 || s.Objects[0] != "configmap/default/cfg" {
		t.Errorf("after pruning: pods %+v, objects %v", s.Pods, s.Objects)
	}
}

// A record whose bytes were damaged on disk is detected and skipped,
// never half-applied; the others load.
func TestDamagedRecordIsSkipped(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	o := options(t, clk)
	j := openRunning(t, o)
	j.PutPod("api", testPod("intact", "uid-intact", ""))
	j.PutPod("api", testPod("marker-damaged-pod", "uid-damaged", ""))
	j.stop()

	s := damageAndReopen(t, o, func(b []byte) {
		i := bytes.Index(b, []byte("marker-damaged-pod"))
		if i < 0 {
			t.Fatal("the record's bytes are not in the file")
		}
		b[i] = 'M'
	})
	if len(s.Pods) != 1 || s.Pods[0].Pod.Name != "intact" {
		t.Errorf("pods: %+v", s.Pods)
	}
	if len(s.Damaged) != 1 || s.Damaged[0] != "pods/uid-damaged" {
		t.Errorf("damaged: %v", s.Damaged)
	}
}

// A file bbolt cannot open is moved aside and a new journal started,
// with the reason.
func TestDamagedFileIsMovedAside(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	o := options(t, clk)
	j := openRunning(t, o)
	j.PutPod("api", testPod("web", "uid-web", ""))
	j.stop()
	s := damageAndReopen(t, o, func(b []byte) {
		// Both meta pages (the first two pages) torn.
		for i := 0; i < 2*os.Getpagesize() && i < len(b); i++ {
			b[i] = 0xff
		}
	})
	if len(s.Pods) != 0 || s.MovedAside == "" || !strings.Contains(s.MovedAside, ".damaged-") {
		t.Fatalf("state: %+v", s)
	}
	if _, err := os.Stat(s.MovedAside); err != nil {
		t.Errorf("the damaged file was not kept: %v", err)
	}
}

// damageAndReopen changes the journal file's bytes, then opens it again.
func damageAndReopen(t *testing.T, o Options, damage func([]byte)) *State {
	t.Helper()
	b, err := os.ReadFile(o.Path)
	if err != nil {
		t.Fatal(err)
	}
	damage(b)
	if err := os.WriteFile(o.Path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	j, s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.db.Close() })
	return s
}

// A second nodelet on the same root directory is refused, clearly.
func TestLockedJournalIsRefused(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	o := options(t, clk)
	j := openRunning(t, o)
	j.PutPod("api", testPod("web", "uid-web", ""))
	flush(t, j.Journal)
	_, _, err := Open(o)
	if err == nil || !strings.Contains(err.Error(), "another nodelet") {
		t.Fatalf("second open: %v", err)
	}
	// Operators can still read it: from a copy.
	s, copied, err := Inspect(o.Path)
	if err != nil || !copied || len(s.Pods) != 1 {
		t.Fatalf("inspect while held: %v copied=%v %+v", err, copied, s)
	}
}

// Standalone, a finished pod's records go after the retention period;
// a running pod's stay; only the newest timelines are kept.
func TestPruneRetentionAndTimelines(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	o := options(t, clk)
	o.Retention, o.PruneEvery = time.Hour, time.Minute
	j := openRunning(t, o)
	done, live := testPod("done", "uid-done", ""), testPod("live", "uid-live", "")
	j.PutPod("file", done)
	j.PutPod("file", live)
	j.PodStatus(done.UID, &v1.PodStatus{Phase: v1.PodSucceeded}, true)
	j.PodStatus(live.UID, &v1.PodStatus{Phase: v1.PodRunning}, false)
	for i, uid := range []types.UID{"a", "b", "c"} {
		clk.Step(time.Second)
		j.PutTimeline(timeline.Timeline{UID: uid, Name: string(uid), Steps: make([]timeline.Step, i)})
	}
	flush(t, j.Journal)
	clk.Step(2 * time.Hour)
	// The prune tick; flush afterwards so the prune has run.
	testutil.WaitFor(t, "the journal to catch up", func() bool {
		clk.Step(time.Minute)
		flush(t, j.Journal)
		s, _, err := Inspect(o.Path)
		return err == nil && len(s.Pods) == 1 && len(s.Timelines) == 2
	})
	s, _, _ := Inspect(o.Path)
	if s.Pods[0].UID != live.UID || s.Timelines[0].UID != "b" || s.Timelines[1].UID != "c" {
		t.Errorf("kept: pods %+v, timelines %+v", s.Pods, s.Timelines)
	}
}

var errRefused = errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")

// The API server's copy is kept; while it cannot be asked, the journal's
// copy stands in; an answer such as NotFound is never papered over.
func TestReadThrough(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	j := openRunning(t, options(t, clk))
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "default", ResourceVersion: "5"}, Data: map[string]string{"k": "v"}}
	if got, err := ReadThrough(j.Journal, "configmap", "default", "cfg", cm, nil); err != nil || got != cm {
		t.Fatal(got, err)
	}
	queued := j.queued
	_, _ = ReadThrough(j.Journal, "configmap", "default", "cfg", cm, nil)
	if j.queued != queued {
		t.Errorf("an unchanged object was written again")
	}
	got, err := ReadThrough(j.Journal, "configmap", "default", "cfg", (*v1.ConfigMap)(nil), errRefused)
	if err != nil || got.Data["k"] != "v" {
		t.Errorf("unreachable: %v %v", got, err)
	}
	notFound := apierrors.NewNotFound(v1.Resource("configmaps"), "cfg")
	if _, err := ReadThrough(j.Journal, "configmap", "default", "cfg", (*v1.ConfigMap)(nil), notFound); !apierrors.IsNotFound(err) {
		t.Errorf("NotFound became %v", err)
	}
	if _, err := ReadThrough(j.Journal, "configmap", "default", "other", (*v1.ConfigMap)(nil), errRefused); err != errRefused {
		t.Errorf("an object never kept: %v", err)
	}
}

// The node's attached volumes are kept, written only when they change,
// and stand in while the API server cannot be asked, never over another
// answer.
func TestAttachedVolumesFallBack(t *testing.T) {
	j := openRunning(t, options(t, testingclock.NewFakeClock(t0)))
	if _, err := ReadAttachedVolumes(j.Journal, nil, errRefused); err != errRefused {
		t.Errorf("nothing kept yet: %v", err)
	}
	list := []v1.AttachedVolume{{Name: "kubernetes.io/csi/d1^h1", DevicePath: "/dev/x"}}
	if got, err := ReadAttachedVolumes(j.Journal, list, nil); err != nil || len(got) != 1 {
		t.Fatal(got, err)
	}
	queued := j.queued
	_, _ = ReadAttachedVolumes(j.Journal, append([]v1.AttachedVolume(nil), list...), nil)
	if j.queued != queued {
		t.Errorf("an unchanged list was written again")
	}
	flush(t, j.Journal)
	if got, err := ReadAttachedVolumes(j.Journal, nil, errRefused); err != nil || len(got) != 1 || got[0].DevicePath != "/dev/x" {
		t.Errorf("unreachable: %v %v", got, err)
	}
	forbidden := apierrors.NewForbidden(v1.Resource("nodes"), "n1", errors.New("no"))
	if _, err := ReadAttachedVolumes(j.Journal, nil, forbidden); !apierrors.IsForbidden(err) {
		t.Errorf("Forbidden became %v", err)
	}
}

type fakeTokens struct {
	err   error
	calls int
}

func (f *fakeTokens) CreateToken(_ context.Context, _, _ string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	out := req.DeepCopy()
	out.Status = authenticationv1.TokenRequestStatus{Token: "issued", ExpirationTimestamp: metav1.NewTime(t0.Add(time.Hour))}
	return out, nil
}

// A token issued is kept and handed out while the API server cannot be
// asked, until it expires.
func TestTokensFallBack(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	j := openRunning(t, options(t, clk))
	api := &fakeTokens{}
	tokens := Tokens{TokenCreator: api, Journal: j.Journal}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"api"},
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", Name: "web", UID: "uid-web"}}}
	if _, err := tokens.CreateToken(context.Background(), "default", "sa", req); err != nil {
		t.Fatal(err)
	}
	api.err = errRefused
	got, err := tokens.CreateToken(context.Background(), "default", "sa", req)
	if err != nil || got.Status.Token != "issued" || api.calls != 2 {
		t.Fatalf("while unreachable: %v %v (calls %d)", got, err, api.calls)
	}
	clk.Step(2 * time.Hour)
	if _, err := tokens.CreateToken(context.Background(), "default", "sa", req); err != errRefused {
		t.Errorf("an expired token was handed out: %v", err)
	}
}

// A recorded pod keeps the claim it mounts, the claim its volume, and
// the volume its CSI driver; a volume no kept claim names goes.
func TestPruneKeepsClaimsTheirVolumesAndDrivers(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	o := options(t, clk)
	j := openRunning(t, o)
	pod := testPod("db", "uid-db", "")
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
	j.PutPod("api", pod)
	j.PutObject(KindClaim, "default", "data", &v1.PersistentVolumeClaim{Spec: v1.PersistentVolumeClaimSpec{VolumeName: "pv-1"}})
	j.PutObject(KindVolume, "", "pv-1", &v1.PersistentVolume{Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "d1"}}}})
	j.PutObject(KindVolume, "", "pv-other", &v1.PersistentVolume{})
	j.PutObject(KindCSIDriver, "", "d1", &v1.ConfigMap{})
	j.PutObject(KindCSIDriver, "", "d2", &v1.ConfigMap{})
	attachment := func(pv string) *storagev1.VolumeAttachment {
		return &storagev1.VolumeAttachment{Spec: storagev1.VolumeAttachmentSpec{Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}}}
	}
	j.PutObject(KindAttachment, "", "csi-1", attachment("pv-1"))
	j.PutObject(KindAttachment, "", "csi-other", attachment("pv-other"))
	j.PutObject(KindAttachedVolumes, "", "node", &AttachedVolumes{})
	flush(t, j.Journal)
	j.prune()
	j.stop()
	s, _, err := Inspect(o.Path)
	if err != nil {
		t.Fatal(err)
	}
	want := "attachedvolumes//node,csidriver//d1,persistentvolume//pv-1,persistentvolumeclaim/default/data,volumeattachment//csi-1"
	if got := strings.Join(s.Objects, ","); got != want {
		t.Errorf("objects kept %s\nwant %s", got, want)
	}
}

// A container's probe results survive a restart, one per container and
// probe (a new instance's replaces the old one's), and go with their pod.
func TestProbeResults(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	o := options(t, clk)
	j := openRunning(t, o)
	web := testPod("web", "uid-web", "")
	j.PutPod("api", web)
	rec := func(pod types.UID, id, probe, result string) ProbeRecord {
		return ProbeRecord{Pod: pod, Container: "app", ContainerID: id, Probe: probe, Result: result, At: t0, ValidFor: 30 * time.Second}
	}
	j.PutProbe(rec(web.UID, "c1", "Readiness", "Failure"))
	j.PutProbe(rec(web.UID, "c2", "Readiness", "Success")) // a new instance
	j.PutProbe(rec(web.UID, "c2", "Startup", "Success"))
	j.PutProbe(rec("uid-gone", "c9", "Readiness", "Success")) // a pod not recorded
	j.stop()

	j = openRunning(t, o)
	got := map[string]ProbeRecord{}
	for _, r := range j.state.Probes {
		got[string(r.Pod)+"/"+r.Probe] = r
	}
	if r := got["uid-web/Readiness"]; r.ContainerID != "c2" || r.Result != "Success" || !r.At.Equal(t0) || r.ValidFor != 30*time.Second {
		t.Errorf("readiness: %+v", r)
	}
	if r := got["uid-web/Startup"]; r.ContainerID != "c2" || r.Result != "Success" {
		t.Errorf("startup: %+v", r)
	}
	// Run pruned the result of the pod that is not recorded at its
	// start; the restart's load may have seen it before.
	testutil.WaitFor(t, "the start's prune", func() bool {
		s, _, err := Inspect(o.Path)
		return err == nil && len(s.Probes) == 2
	})
	j.ForgetPod(web.UID)
	j.stop()
	j = openRunning(t, o)
	j.stop()
	if s, _, _ := Inspect(o.Path); len(s.Probes) != 0 {
		t.Errorf("results of a forgotten pod kept: %+v", s.Probes)
	}
}

// In a burst, commits are at least commitWindow apart: a change right
// after a commit waits for the window (Run is seen waiting on its timer)
// and is committed when it ends; a Flush does not wait for it; a change
// after a quiet spell is committed at once.
func TestCommitWindow(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	j := openRunning(t, options(t, clk))
	testutil.WaitFor(t, "Run's prune ticker", func() bool { return clk.Waiters() == 1 })
	upToDate := func() bool {
		j.mu.Lock()
		defer j.mu.Unlock()
		return j.committed == j.queued
	}
	decide := func(name string) { j.Decide(testPod(name, types.UID(name), ""), true, "", "") }

	decide("first")
	testutil.WaitFor(t, "the first change committed at once", upToDate)
	decide("second")
	testutil.WaitFor(t, "the second change waiting for the window", func() bool { return clk.Waiters() == 2 })
	if upToDate() {
		t.Fatal("a change right after a commit was committed within the window")
	}
	clk.Step(commitWindow)
	testutil.WaitFor(t, "the second change committed when the window ended", upToDate)

	decide("third")
	testutil.WaitFor(t, "the third change waiting for the window", func() bool { return clk.Waiters() == 2 })
	flush(t, j.Journal)

	clk.Step(time.Second)
	decide("after a quiet spell")
	testutil.WaitFor(t, "a change after a quiet spell committed at once", upToDate)
	if n := clk.Waiters(); n != 1 {
		t.Fatalf("%d waiters after the quiet spell's commit, want the prune ticker alone", n)
	}
}
