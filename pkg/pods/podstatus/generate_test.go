package podstatus

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// Container states for the phase table.
var (
	running      = v1.ContainerState{Running: &v1.ContainerStateRunning{}}
	succeeded    = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 0}}
	failed       = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1}}
	waiting      = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	crashLoop    = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	noState      = v1.ContainerState{}
	yes, no      = true, false
	alwaysPolicy = v1.ContainerRestartPolicyAlways
)

type cs struct {
	name    string
	state   v1.ContainerState
	last    v1.ContainerState
	started *bool
}

func statuses(list ...cs) []v1.ContainerStatus {
	out := make([]v1.ContainerStatus, len(list))
	for i, c := range list {
		out[i] = v1.ContainerStatus{Name: c.name, State: c.state, LastTerminationState: c.last, Started: c.started}
	}
	return out
}

func phasePod(policy v1.RestartPolicy, init []string, sidecars []string, containers ...string) *v1.Pod {
	p := &v1.Pod{}
	p.Spec.RestartPolicy = policy
	for _, n := range sidecars {
		p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: n, RestartPolicy: &alwaysPolicy})
	}
	for _, n := range init {
		p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: n})
	}
	for _, n := range containers {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: n})
	}
	return p
}

func TestPodPhase(t *testing.T) {
	A, O, N := v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever
	static := func(p *v1.Pod) *v1.Pod {
		p.Annotations = map[string]string{podutil.ConfigSourceAnnotationKey: podutil.FileSource}
		return p
	}
	tests := []struct {
		name     string
		pod      *v1.Pod
		init     []v1.ContainerStatus
		main     []v1.ContainerStatus
		terminal bool
		want     v1.PodPhase
	}{
		{"no statuses yet", phasePod(A, nil, nil, "a"), nil, nil, false, v1.PodPending},
		{"waiting", phasePod(A, nil, nil, "a"), nil, statuses(cs{name: "a", state: waiting}), false, v1.PodPending},
		{"running", phasePod(A, nil, nil, "a"), nil, statuses(cs{name: "a", state: running}), false, v1.PodRunning},
		{"one running one waiting", phasePod(A, nil, nil, "a", "b"), nil, statuses(cs{name: "a", state: running}, cs{name: "b", state: waiting}), false, v1.PodPending},
		{"one running one unknown", phasePod(A, nil, nil, "a", "b"), nil, statuses(cs{name: "a", state: running}), false, v1.PodPending},
		{"Always: all exited 0 are restarting", phasePod(A, nil, nil, "a"), nil, statuses(cs{name: "a", state: succeeded}), false, v1.PodRunning},
		{"Always: crash looping", phasePod(A, nil, nil, "a"), nil, statuses(cs{name: "a", state: crashLoop, last: failed}), false, v1.PodRunning},
		{"OnFailure: all succeeded", phasePod(O, nil, nil, "a", "b"), nil, statuses(cs{name: "a", state: succeeded}, cs{name: "b", state: succeeded}), false, v1.PodSucceeded},
		{"OnFailure: one failed, restarting", phasePod(O, nil, nil, "a", "b"), nil, statuses(cs{name: "a", state: succeeded}, cs{name: "b", state: failed}), false, v1.PodRunning},
		{"OnFailure: running", phasePod(O, nil, nil, "a"), nil, statuses(cs{name: "a", state: running}), false, v1.PodRunning},
		{"Never: all succeeded", phasePod(N, nil, nil, "a"), nil, statuses(cs{name: "a", state: succeeded}), false, v1.PodSucceeded},
		{"Never: one failed", phasePod(N, nil, nil, "a", "b"), nil, statuses(cs{name: "a", state: succeeded}, cs{name: "b", state: failed}), false, v1.PodFailed},
		{"Never: one still running", phasePod(N, nil, nil, "a", "b"), nil, statuses(cs{name: "a", state: failed}, cs{name: "b", state: running}), false, v1.PodRunning},
		{"terminal pod: Always, all exited 0", phasePod(A, nil, nil, "a"), nil, statuses(cs{name: "a", state: succeeded}), true, v1.PodSucceeded},
		{"terminal pod: Always, one failed", phasePod(A, nil, nil, "a", "b"), nil, statuses(cs{name: "a", state: succeeded}, cs{name: "b", state: failed}), true, v1.PodFailed},
		{"terminal static pod keeps its restart policy's phase", static(phasePod(A, nil, nil, "a")), nil, statuses(cs{name: "a", state: succeeded}), true, v1.PodRunning},
		{"terminal pod with a waiting container", phasePod(A, nil, nil, "a"), nil, statuses(cs{name: "a", state: waiting}), true, v1.PodPending},
		{"init not started", phasePod(A, []string{"i"}, nil, "a"), nil, statuses(cs{name: "a", state: waiting}), false, v1.PodPending},
		{"init running", phasePod(A, []string{"i"}, nil, "a"), statuses(cs{name: "i", state: running}), statuses(cs{name: "a", state: waiting}), false, v1.PodPending},
		{"init done, app waiting", phasePod(A, []string{"i"}, nil, "a"), statuses(cs{name: "i", state: succeeded}), statuses(cs{name: "a", state: waiting}), false, v1.PodPending},
		{"init done, app running", phasePod(A, []string{"i"}, nil, "a"), statuses(cs{name: "i", state: succeeded}), statuses(cs{name: "a", state: running}), false, v1.PodRunning},
		{"init failed under Never", phasePod(N, []string{"i"}, nil, "a"), statuses(cs{name: "i", state: failed}), statuses(cs{name: "a", state: waiting}), false, v1.PodFailed},
		{"init failed under Always: retrying", phasePod(A, []string{"i"}, nil, "a"), statuses(cs{name: "i", state: failed}), statuses(cs{name: "a", state: waiting}), false, v1.PodPending},
		{"init crash looping under Never still failed", phasePod(N, []string{"i"}, nil, "a"), statuses(cs{name: "i", state: crashLoop, last: failed}), statuses(cs{name: "a", state: waiting}), false, v1.PodFailed},
		{"init waiting after a success", phasePod(A, []string{"i"}, nil, "a"), statuses(cs{name: "i", state: waiting, last: succeeded}), statuses(cs{name: "a", state: running}), false, v1.PodRunning},
		{"second init pending", phasePod(A, []string{"i1", "i2"}, nil, "a"), statuses(cs{name: "i1", state: succeeded}), statuses(cs{name: "a", state: waiting}), false, v1.PodPending},
		{"sidecar not started", phasePod(A, nil, []string{"s"}, "a"), statuses(cs{name: "s", state: running, started: &no}), statuses(cs{name: "a", state: waiting}), false, v1.PodPending},
		{"sidecar started, app running", phasePod(A, nil, []string{"s"}, "a"), statuses(cs{name: "s", state: running, started: &yes}), statuses(cs{name: "a", state: running}), false, v1.PodRunning},
		{"sidecar restarting after the app ran: still running", phasePod(A, nil, []string{"s"}, "a"), statuses(cs{name: "s", state: crashLoop, last: failed}), statuses(cs{name: "a", state: running}), false, v1.PodRunning},
		{"Never: app done, sidecar running: still running", phasePod(N, nil, []string{"s"}, "a"), statuses(cs{name: "s", state: running, started: &yes}), statuses(cs{name: "a", state: succeeded}), false, v1.PodRunning},
		{"Never: app done, sidecar stopped", phasePod(N, nil, []string{"s"}, "a"), statuses(cs{name: "s", state: failed}), statuses(cs{name: "a", state: succeeded}), false, v1.PodSucceeded},
		{"container without any state", phasePod(A, nil, nil, "a"), nil, statuses(cs{name: "a", state: noState}), false, v1.PodPending},
		{"Never pod, container Always: restarting", withContainerPolicy(phasePod(N, nil, nil, "a", "b"), "a", v1.ContainerRestartPolicyAlways),
			nil, statuses(cs{name: "a", state: succeeded}, cs{name: "b", state: succeeded}), false, v1.PodRunning},
		{"Always pod, container Never exited: done", withContainerPolicy(phasePod(A, nil, nil, "a"), "a", v1.ContainerRestartPolicyNever),
			nil, statuses(cs{name: "a", state: failed}), false, v1.PodFailed},
		{"Never pod, rule restarts exit code 1", withRetryRule(phasePod(N, nil, nil, "a"), "a", 1),
			nil, statuses(cs{name: "a", state: crashLoop, last: failed}), false, v1.PodRunning},
		{"Never pod, init with a rule restarting its exit code: pending", withRetryRule(phasePod(N, []string{"i"}, nil, "a"), "i", 1),
			statuses(cs{name: "i", state: failed}), statuses(cs{name: "a", state: waiting}), false, v1.PodPending},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := podPhase(tc.pod, tc.init, tc.main, tc.terminal); got != tc.want {
				t.Errorf("phase %s, want %s", got, tc.want)
			}
		})
	}
}

func withContainerPolicy(p *v1.Pod, name string, pol v1.ContainerRestartPolicy) *v1.Pod {
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == name {
			p.Spec.Containers[i].RestartPolicy = &pol
		}
	}
	return p
}

// withRetryRule gives a container (init or app) restartPolicy Never with
// a rule restarting it on code.
func withRetryRule(p *v1.Pod, name string, code int32) *v1.Pod {
	never := v1.ContainerRestartPolicyNever
	for _, cs := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == name {
				cs[i].RestartPolicy = &never
				cs[i].RestartPolicyRules = []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart,
					ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{code}}}}
			}
		}
	}
	return p
}

var now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func rs(sandboxReady bool, ips []string, cs ...*container.Status) *container.PodStatus {
	s := &container.PodStatus{ID: "uid", ContainerStatuses: cs}
	if sandboxReady || ips != nil {
		s.SandboxStatuses = []*container.SandboxStatus{{ID: "sb", Ready: sandboxReady, IPs: ips}}
		s.IPs = ips
	}
	return s
}

func ctrStatus(name string, state container.State, exit int, created time.Time) *container.Status {
	return &container.Status{
		ID: container.ContainerID{Type: "fake", ID: name + created.Format("150405")}, Name: name, State: state,
		ExitCode: exit, CreatedAt: created, StartedAt: created, FinishedAt: created.Add(time.Second), RestartCount: int(created.Sub(now) / time.Minute),
	}
}

func condition(s v1.PodStatus, t v1.PodConditionType) v1.PodCondition {
	for _, c := range s.Conditions {
		if c.Type == t {
			return c
		}
	}
	return v1.PodCondition{}
}

func TestGenerateAPIPodStatus(t *testing.T) {
	pod := phasePod(v1.RestartPolicyAlways, []string{"init"}, nil, "app")
	pod.UID = "uid"

	// Nothing yet: Pending, init waiting, app waiting on initialisation.
	s := generate(Input{Pod: pod, Runtime: rs(false, nil), HostIPs: []string{"192.0.2.1"}})
	if s.Phase != v1.PodPending || s.InitContainerStatuses[0].State.Waiting.Reason != "PodInitializing" ||
		s.ContainerStatuses[0].State.Waiting.Reason != "PodInitializing" {
		t.Fatalf("initial status %+v", s)
	}
	if c := condition(s, v1.PodReadyToStartContainers); c.Status != v1.ConditionFalse {
		t.Errorf("ready to start: %+v", c)
	}
	if c := condition(s, v1.PodInitialized); c.Status != v1.ConditionFalse || c.Reason != "ContainersNotInitialized" {
		t.Errorf("initialized: %+v", c)
	}
	if s.HostIP != "192.0.2.1" || s.QOSClass != v1.PodQOSBestEffort {
		t.Errorf("host IP %q QoS %q", s.HostIP, s.QOSClass)
	}
	// Containers not created yet say they have not started, as upstream's
	// (node e2e: "should be ready immediately after startupProbe
	// succeeds" dereferences the field while the pod is pending).
	for _, c := range append(s.InitContainerStatuses, s.ContainerStatuses...) {
		if c.Started == nil || *c.Started {
			t.Errorf("%s: started %v, want false", c.Name, c.Started)
		}
	}

	// Running.
	run := rs(true, []string{"10.0.0.5"}, ctrStatus("init", container.StateExited, 0, now), ctrStatus("app", container.StateRunning, 0, now.Add(time.Second)))
	s = generate(Input{Pod: pod, Runtime: run})
	if s.Phase != v1.PodRunning || s.PodIP != "10.0.0.5" || !s.ContainerStatuses[0].Ready {
		t.Fatalf("running status %+v", s)
	}
	for _, ct := range []v1.PodConditionType{v1.PodReadyToStartContainers, v1.PodInitialized, v1.ContainersReady, v1.PodReady, v1.PodScheduled} {
		if c := condition(s, ct); c.Status != v1.ConditionTrue {
			t.Errorf("%s: %+v", ct, c)
		}
	}
	if st := s.InitContainerStatuses[0].State.Terminated; st == nil || st.Reason != "Completed" {
		t.Errorf("init status %+v", s.InitContainerStatuses[0])
	}

	// Crash looping: waiting with the back-off reason, last state kept.
	crash := rs(true, []string{"10.0.0.5"}, ctrStatus("init", container.StateExited, 0, now),
		ctrStatus("app", container.StateExited, 2, now.Add(time.Minute)), ctrStatus("app", container.StateExited, 1, now.Add(time.Second)))
	s = generate(Input{Pod: pod, Runtime: crash, StartFailures: map[string]StartFailure{
		"app": {Err: container.ErrCrashLoopBackOff, Message: "back-off 10s restarting failed container"}}})
	app := s.ContainerStatuses[0]
	if app.State.Waiting == nil || app.State.Waiting.Reason != "CrashLoopBackOff" || app.LastTerminationState.Terminated == nil ||
		app.LastTerminationState.Terminated.ExitCode != 2 || app.RestartCount != 1 || app.Ready {
		t.Fatalf("crash looping container %+v", app)
	}
	if c := condition(s, v1.ContainersReady); c.Status != v1.ConditionFalse || c.Reason != "ContainersNotReady" {
		t.Errorf("containers ready: %+v", c)
	}
	if s.Phase != v1.PodRunning {
		t.Errorf("crash looping pod is %s", s.Phase)
	}
}

func TestGeneratedStatusKeepsWhatTheRuntimeLost(t *testing.T) {
	pod := phasePod(v1.RestartPolicyNever, nil, nil, "app")
	old := v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{Name: "app",
		State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}}}
	s := generate(Input{Pod: pod, Runtime: rs(false, nil), Old: old})
	if s.ContainerStatuses[0].State.Terminated == nil || s.Phase != v1.PodSucceeded {
		t.Fatalf("garbage-collected container lost its exit status: %+v", s)
	}

	// A container that was running and vanished must have stopped.
	old.ContainerStatuses[0].State = v1.ContainerState{Running: &v1.ContainerStateRunning{}}
	s = generate(Input{Pod: phasePod(v1.RestartPolicyAlways, nil, nil, "app"), Runtime: rs(true, []string{"10.0.0.1"}), Old: old})
	c := s.ContainerStatuses[0]
	if c.LastTerminationState.Terminated == nil || c.LastTerminationState.Terminated.ExitCode != 137 || c.RestartCount != 1 {
		t.Fatalf("vanished running container %+v", c)
	}
}

func TestTerminalPhaseIsKept(t *testing.T) {
	pod := phasePod(v1.RestartPolicyAlways, nil, nil, "app")
	s := generate(Input{Pod: pod, Runtime: rs(true, []string{"10.0.0.1"}, ctrStatus("app", container.StateRunning, 0, now)),
		Old: v1.PodStatus{Phase: v1.PodFailed, Reason: "Evicted"}})
	if s.Phase != v1.PodFailed || s.Reason != "Evicted" {
		t.Fatalf("phase %s reason %q", s.Phase, s.Reason)
	}
	pod.Status.Phase = v1.PodSucceeded
	if s := generate(Input{Pod: pod, Runtime: rs(false, nil)}); s.Phase != v1.PodSucceeded {
		t.Fatalf("source's terminal phase overridden: %s", s.Phase)
	}
}

func TestReadinessGates(t *testing.T) {
	pod := phasePod(v1.RestartPolicyAlways, nil, nil, "app")
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/ready"}}
	run := rs(true, []string{"10.0.0.1"}, ctrStatus("app", container.StateRunning, 0, now))
	s := generate(Input{Pod: pod, Runtime: run})
	if c := condition(s, v1.PodReady); c.Status != v1.ConditionFalse || c.Reason != "ReadinessGatesNotReady" {
		t.Fatalf("ready without its gate: %+v", c)
	}
	pod.Status.Conditions = []v1.PodCondition{{Type: "example.com/ready", Status: v1.ConditionTrue}}
	s = generate(Input{Pod: pod, Runtime: run})
	if c := condition(s, v1.PodReady); c.Status != v1.ConditionTrue {
		t.Fatalf("gate true, pod not ready: %+v", c)
	}
	if c := condition(s, "example.com/ready"); c.Status != v1.ConditionTrue {
		t.Fatal("a condition owned by someone else was dropped")
	}
}

func TestQOSClass(t *testing.T) {
	res := func(req, lim map[v1.ResourceName]string) v1.ResourceRequirements {
		r := v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}
		for k, v := range req {
			r.Requests[k] = resource.MustParse(v)
		}
		for k, v := range lim {
			r.Limits[k] = resource.MustParse(v)
		}
		return r
	}
	cpu, mem := v1.ResourceCPU, v1.ResourceMemory
	for _, tc := range []struct {
		name string
		rs   []v1.ResourceRequirements
		want v1.PodQOSClass
	}{
		{"nothing", []v1.ResourceRequirements{{}}, v1.PodQOSBestEffort},
		{"limits only: requests default to them", []v1.ResourceRequirements{res(nil, map[v1.ResourceName]string{cpu: "1", mem: "1Gi"})}, v1.PodQOSGuaranteed},
		{"equal", []v1.ResourceRequirements{res(map[v1.ResourceName]string{cpu: "1", mem: "1Gi"}, map[v1.ResourceName]string{cpu: "1", mem: "1Gi"})}, v1.PodQOSGuaranteed},
		{"request below limit", []v1.ResourceRequirements{res(map[v1.ResourceName]string{cpu: "500m", mem: "1Gi"}, map[v1.ResourceName]string{cpu: "1", mem: "1Gi"})}, v1.PodQOSBurstable},
		{"memory missing", []v1.ResourceRequirements{res(nil, map[v1.ResourceName]string{cpu: "1"})}, v1.PodQOSBurstable},
		{"one container unset", []v1.ResourceRequirements{res(nil, map[v1.ResourceName]string{cpu: "1", mem: "1Gi"}), {}}, v1.PodQOSBurstable},
		{"request only", []v1.ResourceRequirements{res(map[v1.ResourceName]string{cpu: "100m"}, nil)}, v1.PodQOSBurstable},
	} {
		p := &v1.Pod{}
		for i, r := range tc.rs {
			p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: string(rune('a' + i)), Resources: r})
		}
		if got := podutil.QOSClass(p); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// Init container statuses as upstream's prober reports them: a regular
// init container is ready once it succeeded and not while it runs; a
// sidecar is ready while it runs and is started (no readiness probe);
// only running containers are started.
func TestInitContainerStatusFields(t *testing.T) {
	pod := phasePod(v1.RestartPolicyAlways, []string{"setup", "migrate"}, []string{"proxy"}, "app")
	pod.UID = "uid"
	run := rs(true, []string{"10.0.0.5"}, ctrStatus("proxy", container.StateRunning, 0, now),
		ctrStatus("setup", container.StateExited, 0, now), ctrStatus("migrate", container.StateRunning, 0, now.Add(time.Second)))
	s := generate(Input{Pod: pod, Runtime: run})
	want := map[string][2]bool{ // started, ready
		"proxy": {true, true}, "setup": {false, true}, "migrate": {true, false},
	}
	for _, c := range s.InitContainerStatuses {
		w := want[c.Name]
		if c.Started == nil || *c.Started != w[0] || c.Ready != w[1] {
			t.Errorf("%s: started %v ready %v, want %v", c.Name, ptrBool(c.Started), c.Ready, w)
		}
	}
	// A failed init container is not ready.
	failedRun := rs(true, []string{"10.0.0.5"}, ctrStatus("proxy", container.StateRunning, 0, now), ctrStatus("setup", container.StateExited, 1, now))
	s = generate(Input{Pod: pod, Runtime: failedRun})
	if c, _ := findStatus(s.InitContainerStatuses, "setup"); c.Ready {
		t.Errorf("failed init container reported ready")
	}
}

func ptrBool(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}

// The status and nodelet's own conditions carry the generation of the
// spec they were computed from; others' conditions keep theirs.
func TestObservedGeneration(t *testing.T) {
	pod := phasePod(v1.RestartPolicyAlways, nil, nil, "app")
	pod.UID, pod.Generation = "uid", 3
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/lb"}}
	pod.Status.Conditions = []v1.PodCondition{{Type: "example.com/lb", Status: v1.ConditionTrue, ObservedGeneration: 1}}
	s := generate(Input{Pod: pod, Runtime: rs(true, []string{"10.0.0.1"}, ctrStatus("app", container.StateRunning, 0, now))})
	if s.ObservedGeneration != 3 {
		t.Errorf("status observedGeneration %d, want 3", s.ObservedGeneration)
	}
	for _, c := range s.Conditions {
		want := int64(3)
		if c.Type == "example.com/lb" {
			want = 1
		}
		if c.ObservedGeneration != want {
			t.Errorf("%s observedGeneration %d, want %d", c.Type, c.ObservedGeneration, want)
		}
	}
}
