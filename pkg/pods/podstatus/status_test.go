package podstatus

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

func testPod(uid string) *v1.Pod {
	p := &v1.Pod{}
	p.Name, p.Namespace, p.UID = uid, "ns", types.UID(uid)
	return p
}

func ready(s v1.ConditionStatus) v1.PodStatus {
	return v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: s}}}
}

func condTime(m *Manager, uid types.UID) time.Time {
	s, _ := m.GetPodStatus(uid)
	return s.Conditions[0].LastTransitionTime.Time
}

func TestTransitionTimeChangesOnlyWithTheCondition(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	m := New(clk)
	pod := testPod("a")
	m.SetPodStatus(pod, ready(v1.ConditionFalse))
	first := condTime(m, "a")
	clk.Step(time.Minute)
	m.SetPodStatus(pod, ready(v1.ConditionFalse))
	if got := condTime(m, "a"); !got.Equal(first) {
		t.Fatalf("unchanged condition moved from %v to %v", first, got)
	}
	m.SetPodStatus(pod, ready(v1.ConditionTrue))
	if got := condTime(m, "a"); !got.Equal(clk.Now()) {
		t.Fatalf("flipped condition has transition time %v, want %v", got, clk.Now())
	}
}

func TestStartTimeIsSetOnce(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	m := New(clk)
	pod := testPod("a")
	m.SetPodStatus(pod, ready(v1.ConditionFalse))
	clk.Step(time.Hour)
	m.SetPodStatus(pod, ready(v1.ConditionTrue))
	s, _ := m.GetPodStatus("a")
	if !s.StartTime.Time.Equal(time.Unix(1000, 0)) {
		t.Fatalf("start time %v", s.StartTime)
	}
}

func TestTerminalPhaseNeverRegresses(t *testing.T) {
	m := New(testingclock.NewFakeClock(time.Unix(1000, 0)))
	pod := testPod("a")
	m.SetPodStatus(pod, v1.PodStatus{Phase: v1.PodSucceeded})
	m.SetPodStatus(pod, v1.PodStatus{Phase: v1.PodRunning})
	if s, _ := m.GetPodStatus("a"); s.Phase != v1.PodSucceeded {
		t.Fatalf("phase went back to %s", s.Phase)
	}
}

func TestVersionGrowsOnlyOnChange(t *testing.T) {
	m := New(testingclock.NewFakeClock(time.Unix(1000, 0)))
	pod := testPod("a")
	m.SetPodStatus(pod, ready(v1.ConditionFalse))
	m.SetPodStatus(pod, ready(v1.ConditionFalse))
	if v := m.Version("a"); v != 1 {
		t.Fatalf("version %d after an unchanged update", v)
	}
	m.SetPodStatus(pod, ready(v1.ConditionTrue))
	if v := m.Version("a"); v != 2 {
		t.Fatalf("version %d after a change", v)
	}
}

func TestTerminatePod(t *testing.T) {
	m := New(testingclock.NewFakeClock(time.Unix(1000, 0)))
	pod := testPod("a")
	st := v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{
		{Name: "done", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 0}}},
		{Name: "lost", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}, Ready: true},
	}}
	m.SetPodStatus(pod, st)
	m.TerminatePod(pod)
	s, _ := m.GetPodStatus("a")
	if s.Phase != v1.PodFailed {
		t.Errorf("phase %s, want Failed", s.Phase)
	}
	if s.ContainerStatuses[0].State.Terminated.ExitCode != 0 {
		t.Error("a terminated container was overwritten")
	}
	if l := s.ContainerStatuses[1]; l.State.Terminated == nil || l.State.Terminated.Reason != "ContainerStatusUnknown" || l.Ready {
		t.Errorf("lost container %+v", l)
	}
	// Nothing changes a finished pod's status again.
	m.SetPodStatus(pod, v1.PodStatus{Phase: v1.PodRunning})
	if s2, _ := m.GetPodStatus("a"); s2.Phase != v1.PodFailed {
		t.Errorf("status changed after TerminatePod: %s", s2.Phase)
	}

	static := testPod("s")
	static.Annotations = map[string]string{podutil.ConfigSourceAnnotationKey: podutil.FileSource}
	m.SetPodStatus(static, v1.PodStatus{Phase: v1.PodRunning})
	m.TerminatePod(static)
	if s, _ := m.GetPodStatus("s"); s.Phase != v1.PodRunning {
		t.Errorf("static pod phase %s: its phase follows its manifest", s.Phase)
	}
}

func TestTerminatePodDuringInit(t *testing.T) {
	waiting := func(reason string) v1.ContainerState {
		return v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: reason}}
	}
	completed := v1.ContainerState{Terminated: &v1.ContainerStateTerminated{Reason: "Completed"}}
	running := v1.ContainerState{Running: &v1.ContainerStateRunning{}}
	always := v1.ContainerRestartPolicyAlways
	for _, tc := range []struct {
		name string
		// init is the init containers' states; sidecar makes the last one
		// a restartable init container.
		init    []v1.ContainerState
		sidecar bool
		// want137 names the containers marked ContainerStatusUnknown/137.
		want137 string
	}{
		{"killed in the first init container", []v1.ContainerState{running, waiting("PodInitializing")}, false, "i0"},
		{"killed before any init container started", []v1.ContainerState{waiting("PodInitializing"), waiting("PodInitializing")}, false, "i0"},
		{"killed in the second init container", []v1.ContainerState{completed, running}, false, "i1"},
		{"initialized", []v1.ContainerState{completed, completed}, false, "app"},
		{"sidecar not yet started", []v1.ContainerState{completed, running}, true, "i1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New(testingclock.NewFakeClock(time.Unix(1000, 0)))
			pod := testPod("a")
			pod.Spec.InitContainers = []v1.Container{{Name: "i0"}, {Name: "i1"}}
			if tc.sidecar {
				pod.Spec.InitContainers[1].RestartPolicy = &always
			}
			st := v1.PodStatus{Phase: v1.PodPending, ContainerStatuses: []v1.ContainerStatus{{Name: "app", State: waiting("PodInitializing")}}}
			for i, s := range tc.init {
				st.InitContainerStatuses = append(st.InitContainerStatuses, v1.ContainerStatus{Name: pod.Spec.InitContainers[i].Name, State: s})
			}
			m.SetPodStatus(pod, st)
			m.TerminatePod(pod)
			s, _ := m.GetPodStatus("a")
			var got []string
			for _, cs := range append(s.InitContainerStatuses, s.ContainerStatuses...) {
				if t := cs.State.Terminated; t != nil && t.ExitCode == 137 && t.Reason == "ContainerStatusUnknown" {
					got = append(got, cs.Name)
				}
			}
			if strings.Join(got, ",") != tc.want137 {
				t.Fatalf("marked 137: %v, want %s", got, tc.want137)
			}
			if s.Phase != v1.PodFailed {
				t.Fatalf("phase %s", s.Phase)
			}
		})
	}
}

func TestRemoveOrphanedStatuses(t *testing.T) {
	m := New(testingclock.NewFakeClock(time.Unix(1000, 0)))
	m.SetPodStatus(testPod("a"), v1.PodStatus{})
	m.SetPodStatus(testPod("b"), v1.PodStatus{})
	m.RemoveOrphanedStatuses(map[types.UID]bool{"a": true})
	if _, ok := m.GetPodStatus("b"); ok {
		t.Error("orphan kept")
	}
	if _, ok := m.GetPodStatus("a"); !ok {
		t.Error("kept pod removed")
	}
}

// observedGeneration never moves back: a status computed from an older
// spec does not undo a newer one's.
func TestObservedGenerationNeverRegresses(t *testing.T) {
	m := New(testingclock.NewFakeClock(time.Unix(1000, 0)))
	pod := testPod("a")
	s := ready(v1.ConditionTrue)
	s.ObservedGeneration = 4
	m.SetPodStatus(pod, s)
	s.ObservedGeneration = 3
	m.SetPodStatus(pod, s)
	if got, _ := m.GetPodStatus("a"); got.ObservedGeneration != 4 {
		t.Fatalf("observedGeneration %d, want 4", got.ObservedGeneration)
	}
	s.ObservedGeneration = 5
	m.SetPodStatus(pod, s)
	if got, _ := m.GetPodStatus("a"); got.ObservedGeneration != 5 {
		t.Fatalf("observedGeneration %d, want 5", got.ObservedGeneration)
	}
}

type journalLog []string

func (l *journalLog) PodStatus(uid types.UID, s *v1.PodStatus, finished bool) {
	*l = append(*l, string(uid)+" "+string(s.Phase)+map[bool]string{true: " finished", false: ""}[finished])
}

// Every change reaches the journal. A restored status keeps its start
// time; a finished one never changes again, but a pod stopped without
// finishing (a static pod at node shutdown) may run again.
func TestJournalAndRestore(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	j := &journalLog{}
	m := New(clk, WithJournal(j))
	started := time.Unix(500, 0)
	done, stopped := testPod("done"), testPod("stopped")
	m.Restore(done, v1.PodStatus{Phase: v1.PodSucceeded, StartTime: &metav1.Time{Time: started}}, true)
	m.Restore(stopped, v1.PodStatus{Phase: v1.PodRunning}, true)
	m.SetPodStatus(done, v1.PodStatus{Phase: v1.PodRunning})
	m.SetPodStatus(stopped, ready(v1.ConditionTrue))
	if s, _ := m.GetPodStatus("done"); s.Phase != v1.PodSucceeded || !s.StartTime.Time.Equal(started) {
		t.Errorf("done: %+v", s)
	}
	if s, _ := m.GetPodStatus("stopped"); len(s.Conditions) != 1 {
		t.Errorf("stopped could not change: %+v", s)
	}
	want := "done Succeeded finished; stopped Running; stopped Running"
	if got := strings.Join(*j, "; "); got != want {
		t.Errorf("journal %q, want %q", got, want)
	}
}
