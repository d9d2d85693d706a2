package topologymanager

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/numatest"
	"github.com/nodelet/nodelet/pkg/pods/admission"
)

func h(pref bool, ids ...int) Hint { return Hint{NUMANodes: NewMask(ids...), Preferred: pref} }

// TestPolicyMerge is the golden table of merges: the providers' hints
// for one container, and what each policy makes of them.
func TestPolicyMerge(t *testing.T) {
	twoNodes := []int{0, 1}
	for _, tc := range []struct {
		name      string
		providers []map[string][]Hint
		// want per policy: the hint, and whether the pod is admitted.
		bestEffort, restricted, single string
	}{
		{
			name: "both fit on node 0",
			providers: []map[string][]Hint{
				{"cpu": {h(true, 0), h(true, 1), h(false, 0, 1)}},
				{"example.com/gpu": {h(true, 0)}},
			},
			bestEffort: "{0} preferred=true admit", restricted: "{0} preferred=true admit", single: "{0} preferred=true admit",
		},
		{
			name: "CPUs need both nodes, the device is on node 0",
			providers: []map[string][]Hint{
				{"cpu": {h(true, 0, 1)}},
				{"example.com/gpu": {h(true, 0)}},
			},
			bestEffort: "{0} preferred=false admit", restricted: "{0} preferred=false refuse", single: "{any preferred=false} refuse",
		},
		{
			name:       "no provider has a preference",
			providers:  []map[string][]Hint{nil, {"cpu": nil}},
			bestEffort: "{0,1} preferred=true admit", restricted: "{0,1} preferred=true admit", single: "{any preferred=true} admit",
		},
		{
			name:       "a resource fits nowhere",
			providers:  []map[string][]Hint{{"cpu": {}}},
			bestEffort: "{0,1} preferred=false admit", restricted: "{0,1} preferred=false refuse", single: "{any preferred=false} refuse",
		},
		{
			name: "memory on either node, CPUs only on node 1",
			providers: []map[string][]Hint{
				{"cpu": {h(true, 1), h(false, 0, 1)}},
				{"memory": {h(true, 0), h(true, 1), h(false, 0, 1)}, "hugepages-2Mi": {h(true, 1), h(false, 0, 1)}},
			},
			bestEffort: "{1} preferred=true admit", restricted: "{1} preferred=true admit", single: "{1} preferred=true admit",
		},
		{
			// No merge can be narrower than the CPUs' only placement, so the
			// placement as wide as that wins over a narrower one.
			name: "nothing preferred: as wide as the widest need",
			providers: []map[string][]Hint{
				{"cpu": {h(false, 0, 1)}},
				{"example.com/gpu": {h(false, 1), h(false, 0, 1)}},
			},
			bestEffort: "{0,1} preferred=false admit", restricted: "{0,1} preferred=false refuse", single: "{any preferred=false} refuse",
		},
	} {
		for policyName, want := range map[string]string{PolicyBestEffort: tc.bestEffort, PolicyRestricted: tc.restricted, PolicySingleNUMANode: tc.single} {
			p := &policy{name: policyName, nodes: twoNodes}
			got, admit := p.merge(tc.providers)
			verdict := map[bool]string{true: "admit", false: "refuse"}[admit]
			if s := got.String() + " " + verdict; s != want {
				t.Errorf("%s, %s: %s, want %s", tc.name, policyName, s, want)
			}
		}
	}
}

// TestPreferClosestNUMANodes: of two placements on two nodes, plain
// ranking takes the lower-numbered nodes; prefer-closest-numa-nodes the
// two nodes of one socket.
func TestPreferClosestNUMANodes(t *testing.T) {
	m := numatest.Machine(numatest.Shape{Sockets: 2, CoresPerSocket: 4, ThreadsPerCore: 1, NUMANodesPerSocket: 2, MemoryPerNode: 1 << 30})
	hints := []map[string][]Hint{{"cpu": {h(true, 0, 2), h(true, 2, 3)}}}
	for closest, want := range map[string]string{"false": "{0,2} preferred=true", "true": "{2,3} preferred=true"} {
		mgr, err := New(Options{Policy: PolicyBestEffort, Scope: ScopeContainer, Topology: m,
			PolicyOptions: map[string]string{OptionPreferClosestNUMANodes: closest}})
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := mgr.policy.merge(hints); got.String() != want {
			t.Errorf("prefer-closest-numa-nodes=%s: %s, want %s", closest, got, want)
		}
	}
}

func TestOptionsChecked(t *testing.T) {
	m := numatest.Machine(numatest.Shape{Sockets: 1, CoresPerSocket: 2, ThreadsPerCore: 1, MemoryPerNode: 1 << 30})
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Policy: "strict", Scope: ScopeContainer}, `topologyManagerPolicy "strict" is not one of`},
		{Options{Policy: PolicyRestricted, Scope: "node"}, `topologyManagerScope "node" is not one of`},
		{Options{Policy: PolicyRestricted, Scope: ScopePod, PolicyOptions: map[string]string{"align-by-socket": "true"}}, `unknown option "align-by-socket"`},
		{Options{Policy: PolicyRestricted, Scope: ScopePod, PolicyOptions: map[string]string{OptionMaxAllowableNUMANodes: "4"}}, "no less than 8"},
		{Options{Policy: PolicyNone, Scope: "anything: the scope of none is not read"}, ""},
	} {
		tc.o.Topology = m
		_, err := New(tc.o)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.want)
		}
	}
}

// provider records what the manager asks it.
type provider struct {
	name  string
	hints map[string]map[string][]Hint // by container ("" for the pod)
	fail  map[string]error             // by container
	log   *[]string
}

func (p *provider) TopologyHints(_ *v1.Pod, c *v1.Container) map[string][]Hint {
	*p.log = append(*p.log, p.name+" hints "+c.Name)
	return p.hints[c.Name]
}

func (p *provider) PodTopologyHints(*v1.Pod) map[string][]Hint {
	*p.log = append(*p.log, p.name+" pod hints")
	return p.hints[""]
}

func (p *provider) Allocate(_ *v1.Pod, c *v1.Container, affinity Hint) error {
	*p.log = append(*p.log, fmt.Sprintf("%s allocate %s %s", p.name, c.Name, affinity))
	return p.fail[c.Name]
}

type smtError struct{}

func (smtError) Error() string {
	return "SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2"
}
func (smtError) Reason() string { return "SMTAlignmentError" }

func testPod() *v1.Pod {
	p := &v1.Pod{}
	p.Name, p.Namespace, p.UID = "p", "ns", "uid"
	p.Spec.InitContainers = []v1.Container{{Name: "init"}}
	p.Spec.Containers = []v1.Container{{Name: "app"}}
	return p
}

// TestAdmitAsksAndAllocatesInOrder: per container, init first, every
// provider gives its hints, then every provider allocates with the
// merged placement.
func TestAdmitAsksAndAllocatesInOrder(t *testing.T) {
	m := numatest.Machine(numatest.Shape{Sockets: 2, CoresPerSocket: 2, ThreadsPerCore: 1, MemoryPerNode: 1 << 30})
	var log []string
	cpus := &provider{name: "cpu", log: &log, hints: map[string]map[string][]Hint{
		"init": {"cpu": {h(true, 1)}}, "app": {"cpu": {h(true, 0), h(true, 1)}},
	}}
	devices := &provider{name: "devices", log: &log, hints: map[string]map[string][]Hint{"app": {"gpu": {h(true, 1)}}}}
	mgr, err := New(Options{Policy: PolicySingleNUMANode, Scope: ScopeContainer, Topology: m, Providers: []HintProvider{cpus, devices}})
	if err != nil {
		t.Fatal(err)
	}
	if v := mgr.Admit(admission.Attributes{Pod: testPod()}); !v.Admitted() {
		t.Fatalf("refused: %+v", v)
	}
	want := "cpu hints init|devices hints init|cpu allocate init {1} preferred=true|devices allocate init {1} preferred=true|" +
		"cpu hints app|devices hints app|cpu allocate app {1} preferred=true|devices allocate app {1} preferred=true"
	if got := strings.Join(log, "|"); got != want {
		t.Errorf("calls\n%s\nwant\n%s", got, want)
	}

	// Scope pod: the pod's hints once, the same placement for all.
	log = nil
	cpus.hints[""] = map[string][]Hint{"cpu": {h(true, 0)}}
	mgr.scope = ScopePod
	if v := mgr.Admit(admission.Attributes{Pod: testPod()}); !v.Admitted() {
		t.Fatal("refused at pod scope")
	}
	want = "cpu pod hints|devices pod hints|cpu allocate init {0} preferred=true|devices allocate init {0} preferred=true|" +
		"cpu allocate app {0} preferred=true|devices allocate app {0} preferred=true"
	if got := strings.Join(log, "|"); got != want {
		t.Errorf("pod scope calls\n%s\nwant\n%s", got, want)
	}
}

// TestAdmitRefusals: upstream's reasons and messages.
func TestAdmitRefusals(t *testing.T) {
	m := numatest.Machine(numatest.Shape{Sockets: 2, CoresPerSocket: 2, ThreadsPerCore: 1, MemoryPerNode: 1 << 30})
	var log []string
	cpus := &provider{name: "cpu", log: &log, hints: map[string]map[string][]Hint{"app": {"cpu": {h(true, 0, 1)}}}}
	devices := &provider{name: "devices", log: &log, hints: map[string]map[string][]Hint{"app": {"gpu": {h(true, 1)}}}}
	mgr, err := New(Options{Policy: PolicyRestricted, Scope: ScopeContainer, Topology: m, Providers: []HintProvider{cpus, devices}})
	if err != nil {
		t.Fatal(err)
	}
	v := mgr.Admit(admission.Attributes{Pod: testPod()})
	ok, reason, msg := v.Admitted(), v.Reason, v.Message
	if ok || reason != "TopologyAffinityError" || msg != "Resources cannot be allocated with Topology locality" {
		t.Fatalf("unalignable: %v %s %q", ok, reason, msg)
	}
	if strings.Contains(strings.Join(log, "|"), "allocate app") {
		t.Fatalf("allocated what could not be placed: %v", log)
	}

	mgr.policy.name = PolicyNone
	devices.fail = map[string]error{"app": errors.New("requested number of devices unavailable for example.com/gpu. Requested: 3, Available: 2")}
	v = mgr.Admit(admission.Attributes{Pod: testPod()})
	ok, reason, msg = v.Admitted(), v.Reason, v.Message
	if ok || reason != "UnexpectedAdmissionError" ||
		msg != "Allocate failed due to requested number of devices unavailable for example.com/gpu. Requested: 3, Available: 2, which is unexpected" {
		t.Fatalf("device shortage: %v %s %q", ok, reason, msg)
	}
	cpus.fail = map[string]error{"init": smtError{}}
	v = mgr.Admit(admission.Attributes{Pod: testPod()})
	ok, reason, msg = v.Admitted(), v.Reason, v.Message
	if ok || reason != "SMTAlignmentError" || !strings.HasPrefix(msg, "SMT Alignment Error") {
		t.Fatalf("a provider's own reason: %v %s %q", ok, reason, msg)
	}
}

func TestIterateMasks(t *testing.T) {
	var got []string
	IterateMasks([]int{0, 1, 3}, func(m Mask) { got = append(got, m.String()) })
	if s := strings.Join(got, " "); s != "{0} {1} {3} {0,1} {0,3} {1,3} {0,1,3}" {
		t.Fatal(s)
	}
}
