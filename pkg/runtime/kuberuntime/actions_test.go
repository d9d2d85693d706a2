package kuberuntime

import (
	"reflect"
	"sort"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type podBuilder struct{ pod *v1.Pod }

func newPod(policy v1.RestartPolicy, names ...string) *podBuilder {
	p := &v1.Pod{}
	p.Name, p.Namespace, p.UID = "p", "ns", "uid"
	p.Spec.RestartPolicy = policy
	for _, n := range names {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: n, Image: "img"})
	}
	return &podBuilder{p}
}

func (b *podBuilder) init(names ...string) *podBuilder {
	for _, n := range names {
		b.pod.Spec.InitContainers = append(b.pod.Spec.InitContainers, v1.Container{Name: n, Image: "img"})
	}
	return b
}

func (b *podBuilder) sidecar(name string) *podBuilder {
	always := v1.ContainerRestartPolicyAlways
	b.pod.Spec.InitContainers = append(b.pod.Spec.InitContainers, v1.Container{Name: name, Image: "img", RestartPolicy: &always})
	return b
}

// retryOn gives the app container restartPolicy Never and a rule
// restarting it on code.
func (b *podBuilder) retryOn(code int32) *podBuilder {
	never := v1.ContainerRestartPolicyNever
	c := &b.pod.Spec.Containers[0]
	c.RestartPolicy = &never
	c.RestartPolicyRules = []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{code}}}}
	return b
}

func (b *podBuilder) hostNetwork() *podBuilder { b.pod.Spec.HostNetwork = true; return b }

func (b *podBuilder) deleted() *podBuilder {
	now := metav1.NewTime(t0)
	b.pod.DeletionTimestamp = &now
	return b
}

func (b *podBuilder) ephemeral(name string) *podBuilder {
	b.pod.Spec.EphemeralContainers = append(b.pod.Spec.EphemeralContainers, v1.EphemeralContainer{
		EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: name, Image: "img"}})
	return b
}

type statusBuilder struct {
	pod *v1.Pod
	s   *container.PodStatus
	n   int
}

func rtStatus(pod *v1.Pod) *statusBuilder {
	return &statusBuilder{pod: pod, s: &container.PodStatus{ID: pod.UID, Name: pod.Name, Namespace: pod.Namespace}}
}

// sandbox adds a sandbox (newest first, as the runtime manager sorts).
func (b *statusBuilder) sandbox(id string, ready bool, attempt uint32, ips ...string) *statusBuilder {
	b.n++
	b.s.SandboxStatuses = append([]*container.SandboxStatus{{
		ID: id, Ready: ready, Attempt: attempt, IPs: ips, CreatedAt: t0.Add(time.Duration(b.n) * time.Second),
		HostNetwork: b.pod.Spec.HostNetwork,
	}}, b.s.SandboxStatuses...)
	return b
}

// c adds a container status in the newest sandbox; exit is used when
// the state is exited.
func (b *statusBuilder) c(name string, state container.State, exit int) *statusBuilder {
	sb := ""
	if len(b.s.SandboxStatuses) > 0 {
		sb = b.s.SandboxStatuses[0].ID
	}
	return b.cIn(sb, name, state, exit)
}

func (b *statusBuilder) cIn(sandbox, name string, state container.State, exit int) *statusBuilder {
	b.n++
	hash := ""
	for _, cs := range [][]v1.Container{b.pod.Spec.InitContainers, b.pod.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == name {
				hash = HashContainer(&cs[i])
			}
		}
	}
	b.s.ContainerStatuses = append(b.s.ContainerStatuses, &container.Status{
		ID: container.ContainerID{Type: "fake", ID: name + "-id"}, Name: name, State: state, ExitCode: exit,
		CreatedAt: t0.Add(time.Duration(b.n) * time.Second), SandboxID: sandbox, Hash: hash,
	})
	return b
}

func (b *statusBuilder) hash(name, h string) *statusBuilder {
	for _, c := range b.s.ContainerStatuses {
		if c.Name == name {
			c.Hash = h
		}
	}
	return b
}

type want struct {
	kill, create bool
	attempt      uint32
	init, start  []int
	ephemeral    []int
	killed       []string
}

func TestComputePodActions(t *testing.T) {
	R, E, U, C := container.StateRunning, container.StateExited, container.StateUnknown, container.StateCreated
	always, onFailure, never := v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever
	tests := []struct {
		name   string
		pod    *v1.Pod
		status func(*v1.Pod) *container.PodStatus
		want   want
	}{
		{"new pod creates a sandbox and starts every container",
			newPod(always, "a", "b").pod, func(p *v1.Pod) *container.PodStatus { return rtStatus(p).s },
			want{kill: true, create: true, start: []int{0, 1}}},
		{"new pod with init containers starts only the first init container",
			newPod(always, "a").init("i1", "i2").pod, func(p *v1.Pod) *container.PodStatus { return rtStatus(p).s },
			want{kill: true, create: true, init: []int{0}}},
		{"everything running with the same spec: nothing to do",
			newPod(always, "a", "b").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("a", R, 0).c("b", R, 0).s
			}, want{}},
		{"dead sandbox is killed and recreated with the next attempt",
			newPod(always, "a").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", false, 2, "10.0.0.1").c("a", E, 137).s
			}, want{kill: true, create: true, attempt: 3, start: []int{0}}},
		{"sandbox without an IP is recreated",
			newPod(always, "a").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0).c("a", R, 0).s
			}, want{kill: true, create: true, attempt: 1, start: []int{0}}},
		{"host network pod needs no IP",
			newPod(always, "a").hostNetwork().pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0).c("a", R, 0).s
			}, want{}},
		{"network mode changed: recreate",
			newPod(always, "a").pod, func(p *v1.Pod) *container.PodStatus {
				s := rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("a", R, 0).s
				s.SandboxStatuses[0].HostNetwork = true
				return s
			}, want{kill: true, create: true, attempt: 1, start: []int{0}}},
		{"two ready sandboxes: recreate",
			newPod(always, "a").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("old", true, 0, "10.0.0.1").sandbox("new", true, 1, "10.0.0.2").c("a", R, 0).s
			}, want{kill: true, create: true, attempt: 2, start: []int{0}}},
		{"Never: dead sandbox of a pod that ran is not recreated",
			newPod(never, "a").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", false, 0, "10.0.0.1").c("a", E, 1).s
			}, want{kill: true, attempt: 1}},
		{"OnFailure: all succeeded, dead sandbox is not recreated",
			newPod(onFailure, "a", "b").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", false, 0, "10.0.0.1").c("a", E, 0).c("b", E, 0).s
			}, want{kill: true, attempt: 1}},
		{"OnFailure: new sandbox restarts only the failed container",
			newPod(onFailure, "a", "b").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", false, 0, "10.0.0.1").c("a", E, 0).c("b", E, 2).s
			}, want{kill: true, create: true, attempt: 1, start: []int{1}}},
		{"restart rule: the matching exit code restarts in an Always pod whose container says Never",
			newPod(always, "a").retryOn(42).pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("a", E, 42).s
			}, want{start: []int{0}}},
		{"restart rule: another exit code falls back to the container's Never",
			newPod(always, "a").retryOn(42).pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("a", E, 1).s
			}, want{kill: true}},
		{"Always: exited 0 is restarted",
			newPod(always, "a").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("a", E, 0).s
			}, want{start: []int{0}}},
		{"OnFailure: exited 0 is not restarted and the pod stops",
			newPod(onFailure, "a").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("a", E, 0).s
			}, want{kill: true}},
		{"OnFailure: exited 1 is restarted",
			newPod(onFailure, "a").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("a", E, 1).s
			}, want{start: []int{0}}},
		{"Never: exited 1 is not restarted and the pod stops",
			newPod(never, "a").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("a", E, 1).s
			}, want{kill: true}},
		{"Never: one exited, one running: keep running",
			newPod(never, "a", "b").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("a", E, 0).c("b", R, 0).s
			}, want{}},
		{"changed spec: kill and start again, whatever the policy",
			newPod(never, "a").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("a", R, 0).hash("a", "old").s
			}, want{start: []int{0}, killed: []string{"a"}}},
		{"unknown state: kill and start",
			newPod(always, "a").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("a", U, 0).s
			}, want{start: []int{0}, killed: []string{"a"}}},
		{"created but never started: start",
			newPod(never, "a").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("a", C, 0).s
			}, want{start: []int{0}}},
		{"first init done: start the second",
			newPod(always, "a").init("i1", "i2").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("i1", E, 0).s
			}, want{init: []int{1}}},
		{"init container running: wait",
			newPod(always, "a").init("i1").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("i1", R, 0).s
			}, want{}},
		{"failed init container is restarted under Always",
			newPod(always, "a").init("i1", "i2").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("i1", E, 0).c("i2", E, 3).s
			}, want{init: []int{1}}},
		{"failed init container under Never stops the pod",
			newPod(never, "a").init("i1").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("i1", E, 1).s
			}, want{kill: true}},
		{"all init containers done: start the app containers",
			newPod(always, "a", "b").init("i1", "i2").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("i1", E, 0).c("i2", E, 0).s
			}, want{start: []int{0, 1}}},
		{"init containers of an old sandbox do not count",
			newPod(always, "a").init("i1").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("old", false, 0, "10.0.0.1").c("i1", E, 0).sandbox("new", true, 1, "10.0.0.2").s
			}, want{attempt: 1, init: []int{0}}},
		{"once an app container exists, init containers are not re-run",
			newPod(always, "a").init("i1").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("a", R, 0).s
			}, want{}},
		{"sidecar not started yet: start it, the next init container waits",
			newPod(always, "a").sidecar("s").init("i1").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").s
			}, want{init: []int{0}}},
		{"sidecar running: the next init container starts",
			newPod(always, "a").sidecar("s").init("i1").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("s", R, 0).s
			}, want{init: []int{1}}},
		{"sidecar running, init done: app containers start beside it",
			newPod(always, "a").sidecar("s").init("i1").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("s", R, 0).c("i1", E, 0).s
			}, want{start: []int{0}}},
		{"sidecar exited after the app started: restarted, app kept",
			newPod(never, "a").sidecar("s").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("s", E, 1).c("a", R, 0).s
			}, want{init: []int{0}}},
		{"sidecar crashed after starting once: restarted, the app containers start beside it",
			newPod(always, "a").sidecar("s").init("i1").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("s", E, 1).c("i1", E, 0).s
			}, want{init: []int{0}, start: []int{0}}},
		{"sidecar crashed while a later init container runs: restarted, the init container goes on",
			newPod(always, "a").sidecar("s").init("i1").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("s", E, 1).c("i1", R, 0).s
			}, want{init: []int{0}}},
		{"sidecar running, the next init container crashed: only the init container restarts",
			newPod(always, "a").sidecar("s").init("i1").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("s", R, 0).c("i1", E, 2).s
			}, want{init: []int{1}}},
		{"init container left created under Never: started again, not a failure",
			newPod(never, "a").init("i1").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("i1", C, 0).s
			}, want{init: []int{0}}},
		{"second init container left created under OnFailure: started again",
			newPod(onFailure, "a").init("i1", "i2").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("i1", E, 0).c("i2", C, 0).s
			}, want{init: []int{1}}},
		{"sidecar left created: started again",
			newPod(never, "a").sidecar("s").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("s", C, 0).s
			}, want{init: []int{0}}},
		{"killing the pod restarts no crashed sidecar",
			newPod(never, "a").sidecar("s").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("s", E, 1).c("a", E, 0).s
			}, want{kill: true}},
		{"failed init container under Never: nothing else starts",
			newPod(never, "a").sidecar("s").init("i1").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("s", E, 1).c("i1", E, 1).s
			}, want{kill: true}},
		{"app containers done under Never: the pod (and its sidecar) stops",
			newPod(never, "a").sidecar("s").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("s", R, 0).c("a", E, 0).s
			}, want{kill: true}},
		{"deleted pod: exited containers are not restarted",
			newPod(always, "a").deleted().pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("a", E, 0).s
			}, want{kill: true}},
		{"a running container the spec does not name is killed",
			newPod(always, "a").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("a", R, 0).c("stray", R, 0).s
			}, want{killed: []string{"stray"}}},
		{"ephemeral container without status starts; one that ran does not",
			newPod(always, "a").ephemeral("dbg").ephemeral("old").pod, func(p *v1.Pod) *container.PodStatus {
				return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("a", R, 0).c("old", E, 0).s
			}, want{ephemeral: []int{0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := computePodActions(tc.pod, tc.status(tc.pod), nil)
			var killed []string
			for _, k := range a.ContainersToKill {
				killed = append(killed, k.name)
			}
			sort.Strings(killed)
			got := want{kill: a.KillPod, create: a.CreateSandbox, attempt: a.Attempt, init: a.InitContainersToStart,
				start: a.ContainersToStart, ephemeral: a.EphemeralContainersToStart, killed: killed}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("computePodActions:\n got  %+v\n want %+v\n(%s)", got, tc.want, a)
			}
		})
	}
}

// The container hash is the upstream kubelet's, value for value, so that
// moving a node between them restarts nothing. The golden values were
// computed with k8s.io/kubernetes v1.37's kubecontainer.HashContainer.
func TestHashIsUpstreams(t *testing.T) {
	for _, tc := range []struct {
		c    v1.Container
		want string
	}{
		{v1.Container{Name: "main", Image: "busybox"}, "b34e1a14"},
		{v1.Container{Name: "app", Image: "docker.io/library/busybox:1.36", Command: []string{"sleep", "3600"}}, "13385bb0"},
	} {
		if got := HashContainer(&tc.c); got != tc.want {
			t.Errorf("hash of %s (%s) = %s, upstream's is %s", tc.c.Name, tc.c.Image, got, tc.want)
		}
	}
	// Only a new image (or name) needs a new container.
	c := v1.Container{Name: "a", Image: "img", Command: []string{"sh"}}
	c2 := c
	c2.Command, c2.Resources.Limits = []string{"bash"}, v1.ResourceList{v1.ResourceCPU: *resourceQuantity("1")}
	c3 := c
	c3.Image = "img:2"
	if HashContainer(&c2) != HashContainer(&c) || HashContainer(&c3) == HashContainer(&c) {
		t.Error("the hash must follow the image and the name only")
	}
}

// The hash is recorded where the upstream kubelet reads it (an
// annotation) and read from there first; nodelet's older containers have
// it only as a label.
func TestHashIsRecordedAsUpstreamDoes(t *testing.T) {
	pod := newPod(v1.RestartPolicyAlways, "a").pod
	c := &pod.Spec.Containers[0]
	a := containerAnnotations(pod, c, 0)
	if a["io.kubernetes.container.hash"] != HashContainer(c) {
		t.Fatalf("annotations %v lack the hash", a)
	}
	if got := recordedHash(map[string]string{"io.kubernetes.container.hash": "old"}, a); got != HashContainer(c) {
		t.Errorf("read %s, want the annotation's %s", got, HashContainer(c))
	}
	if got := recordedHash(map[string]string{"io.kubernetes.container.hash": "fcef7d16"}, nil); got != "fcef7d16" {
		t.Errorf("read %q from a label-only container", got)
	}
}

// Containers nodelet started before it used upstream's hash keep
// running: their recorded hash still counts as unchanged.
func TestLegacyHashStillMatches(t *testing.T) {
	c := v1.Container{Name: "a", Image: "img", Command: []string{"sh"}}
	if legacyHash(&c) != "fcef7d16" {
		t.Fatalf("legacy hash %s: it must stay what nodelet recorded", legacyHash(&c))
	}
	if !specUnchanged("fcef7d16", &c) || !specUnchanged(HashContainer(&c), &c) {
		t.Error("a recorded hash of the same spec counts as changed")
	}
	c.Image = "img:2"
	if specUnchanged("fcef7d16", &c) {
		t.Error("a new image counts as unchanged")
	}
}

// fakeHealth fails or holds back the named container instances.
type fakeHealth struct{ liveness, startup, notStarted map[string]bool }

func (h fakeHealth) LivenessFailed(id string) bool           { return h.liveness[id] }
func (h fakeHealth) StartupFailed(id string) bool            { return h.startup[id] }
func (h fakeHealth) Started(c *v1.Container, id string) bool { return !h.notStarted[id] }

func TestComputePodActionsWithProbes(t *testing.T) {
	R := container.StateRunning
	grace := int64(3)
	withProbeGrace := newPod(v1.RestartPolicyAlways, "a").pod
	withProbeGrace.Spec.Containers[0].LivenessProbe = &v1.Probe{TerminationGracePeriodSeconds: &grace}
	tests := []struct {
		name   string
		pod    *v1.Pod
		status func(*v1.Pod) *container.PodStatus
		health fakeHealth
		start  []int
		init   []int
		kill   string
		grace  *int64
		// killPod: nothing of the pod runs on, so it stops as a whole.
		killPod bool
	}{
		{"liveness failure restarts", newPod(v1.RestartPolicyAlways, "a").pod, func(p *v1.Pod) *container.PodStatus {
			return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("a", R, 0).s
		}, fakeHealth{liveness: map[string]bool{"a-id": true}}, []int{0}, nil, "Container a failed liveness probe, will be restarted", nil, false},
		{"liveness failure under Never stops without restart", newPod(v1.RestartPolicyNever, "a").pod, func(p *v1.Pod) *container.PodStatus {
			return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("a", R, 0).s
		}, fakeHealth{liveness: map[string]bool{"a-id": true}}, nil, nil, "Container a failed liveness probe", nil, true},
		{"startup failure restarts", newPod(v1.RestartPolicyOnFailure, "a").pod, func(p *v1.Pod) *container.PodStatus {
			return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("a", R, 0).s
		}, fakeHealth{startup: map[string]bool{"a-id": true}}, []int{0}, nil, "Container a failed startup probe, will be restarted", nil, false},
		{"the probe's own grace period", withProbeGrace, func(p *v1.Pod) *container.PodStatus {
			return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("a", R, 0).s
		}, fakeHealth{liveness: map[string]bool{"a-id": true}}, []int{0}, nil, "Container a failed liveness probe, will be restarted", &grace, false},
		{"a running sidecar not started holds the next init container", newPod(v1.RestartPolicyAlways, "a").sidecar("s").init("i").pod, func(p *v1.Pod) *container.PodStatus {
			return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("s", R, 0).s
		}, fakeHealth{notStarted: map[string]bool{"s-id": true}}, nil, nil, "", nil, false},
		{"a sidecar failing liveness is restarted", newPod(v1.RestartPolicyAlways, "a").sidecar("s").pod, func(p *v1.Pod) *container.PodStatus {
			return rtStatus(p).sandbox("sb", true, 0, "10.0.0.1").c("s", R, 0).c("a", R, 0).s
		}, fakeHealth{liveness: map[string]bool{"s-id": true}}, nil, []int{0}, "Init container s failed liveness probe, will be restarted", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := computePodActions(tc.pod, tc.status(tc.pod), tc.health)
			var kill string
			var grace *int64
			for _, k := range a.ContainersToKill {
				kill, grace = k.message, k.grace
			}
			if !reflect.DeepEqual(a.ContainersToStart, tc.start) || !reflect.DeepEqual(a.InitContainersToStart, tc.init) ||
				kill != tc.kill || !reflect.DeepEqual(grace, tc.grace) || a.KillPod != tc.killPod {
				t.Fatalf("got %s (kill %q grace %v)", a, kill, grace)
			}
		})
	}
}
