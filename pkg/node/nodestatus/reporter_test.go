package nodestatus

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/kubeclienttest"
	"github.com/nodelet/nodelet/internal/testutil"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
)

func newReporter(t *testing.T, ready *error) (*Reporter, *fake.Clientset, *testingclock.FakeClock) {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	client := fake.NewClientset()
	node := Node(Config{NodeName: "n1", MaxPods: 10, HostIPs: []string{"10.0.0.1"}}, Machine{CPUs: 2, MemoryBytes: 1 << 30, EphemeralStorage: 1 << 34})
	r := NewReporter(ReporterOptions{
		Client: kubeclienttest.Wrap(client), Node: node, Clock: clk, Recorder: record.NewFakeRecorder(100),
		Ready: func() error { return *ready },
	})
	return r, client, clk
}

func getNode(t *testing.T, c *fake.Clientset) *v1.Node {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func statusUpdates(c *fake.Clientset) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

func readyCondition(n *v1.Node) v1.NodeCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c
		}
	}
	return v1.NodeCondition{}
}

// useAPINode feeds the reporter's node cache as its watch would.
func useAPINode(t *testing.T, r *Reporter, c *fake.Clientset) {
	t.Helper()
	if err := r.store.Replace([]interface{}{getNode(t, c)}, ""); err != nil {
		t.Fatal(err)
	}
}

func TestReporterRegistersAndReportsReadiness(t *testing.T) {
	var notReady error = errors.New("container runtime network not ready: cni config uninitialized")
	r, client, clk := newReporter(t, &notReady)
	ctx := context.Background()
	if !r.register(ctx) {
		t.Fatal("registration failed")
	}
	n := getNode(t, client)
	if n.Labels[LabelHostname] != "n1" || readyCondition(n).Reason != "KubeletNotReady" {
		t.Fatalf("registered node %+v", n)
	}
	r.SyncStatus(ctx)
	useAPINode(t, r, client)
	if c := readyCondition(getNode(t, client)); c.Status != v1.ConditionFalse || c.Message != notReady.Error() {
		t.Fatalf("ready condition %+v", c)
	}

	// Unchanged: nothing is written until the report frequency.
	writes := statusUpdates(client)
	clk.Step(10 * time.Second)
	r.SyncStatus(ctx)
	if statusUpdates(client) != writes {
		t.Fatal("an unchanged status was written")
	}
	notReady = nil
	clk.Step(10 * time.Second)
	r.SyncStatus(ctx)
	useAPINode(t, r, client)
	if c := readyCondition(getNode(t, client)); c.Status != v1.ConditionTrue || c.Reason != "KubeletReady" || !c.LastTransitionTime.Time.Equal(clk.Now().Truncate(time.Second)) {
		t.Fatalf("ready condition %+v", c)
	}
	writes = statusUpdates(client)
	clk.Step(DefaultStatusReportFrequency)
	r.SyncStatus(ctx)
	if statusUpdates(client) != writes+1 {
		t.Fatal("the status was not reported in full after the report frequency")
	}

	// Another component marks the node Unknown: nodelet corrects it.
	useAPINode(t, r, client)
	n = getNode(t, client)
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == v1.NodeReady {
			n.Status.Conditions[i].Status, n.Status.Conditions[i].Reason = v1.ConditionUnknown, "NodeStatusUnknown"
		}
	}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	useAPINode(t, r, client)
	clk.Step(10 * time.Second)
	r.SyncStatus(ctx)
	if c := readyCondition(getNode(t, client)); c.Status != v1.ConditionTrue {
		t.Fatalf("ready condition after the controller marked it Unknown: %+v", c)
	}

	// A restart finds the node and keeps it.
	r2, _, _ := newReporter(t, &notReady)
	r2.o.Client = kubeclienttest.Wrap(client)
	if !r2.register(ctx) {
		t.Fatal("re-registration failed")
	}
}

func TestReporterLease(t *testing.T) {
	var ok error
	r, client, clk := newReporter(t, &ok)
	ctx := context.Background()
	if !r.register(ctx) {
		t.Fatal("registration failed")
	}
	n := getNode(t, client)
	n.UID = "node-uid" // the fake API server assigns none
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	useAPINode(t, r, client)
	if err := r.RenewLease(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := client.CoordinationV1().Leases(LeaseNamespace).Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *l.Spec.HolderIdentity != "n1" || *l.Spec.LeaseDurationSeconds != 40 || len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != "node-uid" {
		t.Fatalf("lease %+v", l)
	}
	first := l.Spec.RenewTime.Time
	clk.Step(10 * time.Second)
	if err := r.RenewLease(ctx); err != nil {
		t.Fatal(err)
	}
	l, _ = client.CoordinationV1().Leases(LeaseNamespace).Get(ctx, "n1", metav1.GetOptions{})
	if !l.Spec.RenewTime.Time.After(first) {
		t.Fatalf("lease not renewed: %v", l.Spec.RenewTime)
	}
	// Renewal after a failure reads the lease again and updates it.
	r.lease = nil
	clk.Step(10 * time.Second)
	if err := r.RenewLease(ctx); err != nil {
		t.Fatal(err)
	}
}

// When the lease can be renewed again after an outage, the reporter reads
// the node afresh and puts right the Unknown the node lifecycle
// controller wrote meanwhile, even though its watched copy still says
// Ready.
func TestReporterCorrectsStatusWhenAPIServerReturns(t *testing.T) {
	var ok error
	r, client, clk := newReporter(t, &ok)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !r.register(ctx) {
		t.Fatal("registration failed")
	}
	r.SyncStatus(ctx)
	useAPINode(t, r, client)

	var down atomic.Bool
	down.Store(true)
	client.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.runLease(ctx)
	}()
	testutil.WaitFor(t, "the lease loop to back off", clk.HasWaiters)

	n := getNode(t, client)
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == v1.NodeReady {
			n.Status.Conditions[i].Status, n.Status.Conditions[i].Reason = v1.ConditionUnknown, "NodeStatusUnknown"
		}
	}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The watched copy is stale: a regular check sees nothing to do.
	before := statusUpdates(client)
	r.SyncStatus(ctx)
	if statusUpdates(client) != before {
		t.Fatal("the regular check wrote although its copy says Ready")
	}

	down.Store(false)
	clk.Step(retryMin)
	testutil.WaitFor(t, "Ready to be written back", func() bool { return readyCondition(getNode(t, client)).Status == v1.ConditionTrue })
	cancel()
	<-done
}

// When the watch brings a Node another component marked Unknown (the
// node lifecycle controller, whose own watches were stale after an
// outage), the reporter puts it right at once, not at its next periodic
// check: the fake clock never moves here.
func TestReporterCorrectsAWatchedUnknownAtOnce(t *testing.T) {
	var ok error
	r, client, clk := newReporter(t, &ok)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	testutil.WaitFor(t, "the node registered Ready and watched", func() bool {
		obj, ok, _ := r.store.GetByKey("n1")
		return ok && readyCondition(obj.(*v1.Node)).Status == v1.ConditionTrue && r.lastReportedReady()
	})
	testutil.WaitFor(t, "the status loop to wait for its period", clk.HasWaiters)

	n := getNode(t, client)
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == v1.NodeReady {
			n.Status.Conditions[i].Status, n.Status.Conditions[i].Reason = v1.ConditionUnknown, "NodeStatusUnknown"
		}
	}
	before := statusUpdates(client)
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "Ready to be written back", func() bool { return readyCondition(getNode(t, client)).Status == v1.ConditionTrue })
	// Ours: the controller's write, then the reporter's.
	if got := statusUpdates(client); got != before+2 {
		t.Fatalf("%d status writes after the controller's, want 1", got-before-1)
	}
}

// TestRegisterNodeFalseWaitsForTheNode: with registration skipped the
// reporter never creates the Node; once someone else has, it adopts it
// (its labels brought up to date) and goes on.
func TestRegisterNodeFalseWaitsForTheNode(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	client := fake.NewClientset()
	node := Node(Config{NodeName: "n1", MaxPods: 10, Labels: map[string]string{"role": "edge"}}, Machine{CPUs: 2, MemoryBytes: 1 << 30})
	r := NewReporter(ReporterOptions{Client: kubeclienttest.Wrap(client), Node: node, Clock: clk, Recorder: record.NewFakeRecorder(100),
		Ready: func() error { return nil }, SkipRegistration: true})
	ctx := context.Background()
	if r.register(ctx) {
		t.Fatal("registered a node that does not exist")
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" {
			t.Fatalf("created %s with registerNode false", a.GetResource().Resource)
		}
	}
	if gets := len(client.Actions()); gets != 1 {
		t.Fatalf("%d API calls, want the one get that looked for the node", gets)
	}
	existing := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	if _, err := client.CoreV1().Nodes().Create(ctx, existing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !r.register(ctx) {
		t.Fatal("did not adopt the existing node")
	}
	if got := getNode(t, client).Labels["role"]; got != "edge" {
		t.Fatalf("labels not brought up to date: role=%q", got)
	}
}

// TestFirstLeaseNamesItsOwner: the lease written right after registration
// is owned by the Node, before the node watch has listed anything.
func TestFirstLeaseNamesItsOwner(t *testing.T) {
	var ready error
	r, client, _ := newReporter(t, &ready)
	// The API server gives a created Node its UID (the fake does not).
	client.PrependReactor("create", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(*v1.Node).UID = "node-uid"
		return false, nil, nil
	})
	ctx := context.Background()
	if !r.register(ctx) {
		t.Fatal("registration failed")
	}
	testutil.Must(t, r.RenewLease(ctx))
	l, err := client.CoordinationV1().Leases("kube-node-lease").Get(ctx, "n1", metav1.GetOptions{})
	testutil.Must(t, err)
	node := getNode(t, client)
	if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != node.UID || node.UID == "" {
		t.Fatalf("lease owners %+v, want the node %q", l.OwnerReferences, node.UID)
	}
}

// TestAdmissionNodeHasTheMeasuredResources: after a restart the API's
// Node still shows the previous run's allocatable; admission uses what
// nodelet measured now, and the API's labels.
func TestAdmissionNodeHasTheMeasuredResources(t *testing.T) {
	var ready error
	r, client, _ := newReporter(t, &ready)
	ctx := context.Background()
	old := r.o.Node.DeepCopy()
	old.Labels["zone"] = "a" // set by an administrator
	old.Status.Allocatable[v1.ResourcePods] = resource.MustParse("110")
	_, err := client.CoreV1().Nodes().Create(ctx, old, metav1.CreateOptions{})
	testutil.Must(t, err)
	if !r.register(ctx) {
		t.Fatal("registration failed")
	}
	n := r.AdmissionNode()
	if pods := n.Status.Allocatable[v1.ResourcePods]; pods.Value() != 10 || n.Labels["zone"] != "a" {
		t.Fatalf("admission node: pods %s, zone %q; want the measured 10 and the API's label", pods.String(), n.Labels["zone"])
	}
	if api := r.Node().Status.Allocatable[v1.ResourcePods]; api.Value() != 110 {
		t.Fatalf("the API's node changed: pods %s", api.String())
	}
}

// TestAdmissionNodeHasDevicesBeforeTheInformer: pods come from the API
// source before the Node informer has synced; they are admitted against
// the devices too (a restarted nodelet's running pods hold some).
func TestAdmissionNodeHasDevicesBeforeTheInformer(t *testing.T) {
	var ready error
	r, _, _ := newReporter(t, &ready)
	r.o.AdmissionDeviceResources = func() v1.ResourceList {
		return v1.ResourceList{"example.com/resource": resource.MustParse("1")}
	}
	if r.Node() != r.o.Node {
		t.Fatal("the test wants the informer empty")
	}
	n := r.AdmissionNode()
	if q := n.Status.Allocatable["example.com/resource"]; q.Value() != 1 {
		t.Fatalf("admission node allocatable %v, want the device", n.Status.Allocatable)
	}
	if _, ok := r.o.Node.Status.Allocatable["example.com/resource"]; ok {
		t.Fatal("the node's own description was changed in place")
	}
}

// TestStatusKeepsOthersExtendedResources: extended resources another
// writer advertises on the Node (an operator's patch of its status) stay
// through nodelet's status writes, with allocatable equal to capacity, and
// count at admission; the device plugins' resources are nodelet's own and
// follow the device manager; an extended allocatable without a capacity
// goes, as upstream's does.
func TestStatusKeepsOthersExtendedResources(t *testing.T) {
	var ready error
	r, client, clk := newReporter(t, &ready)
	r.o.DeviceResources = func() (v1.ResourceList, v1.ResourceList) {
		return v1.ResourceList{"example.com/gpu": resource.MustParse("2"), "example.com/gone": resource.MustParse("0")},
			v1.ResourceList{"example.com/gpu": resource.MustParse("1"), "example.com/gone": resource.MustParse("0")}
	}
	r.o.AdmissionDeviceResources = func() v1.ResourceList {
		return v1.ResourceList{"example.com/gpu": resource.MustParse("1"), "example.com/gone": resource.MustParse("0")}
	}
	ctx := context.Background()
	if !r.register(ctx) {
		t.Fatal("registration failed")
	}
	r.SyncStatus(ctx)

	n := getNode(t, client)
	n.Status.Capacity["example.com/dongle"] = resource.MustParse("4")
	n.Status.Capacity["example.com/gpu"] = resource.MustParse("8") // stale: the plugin's is 2
	n.Status.Allocatable["example.com/orphan"] = resource.MustParse("3")
	_, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	testutil.Must(t, err)
	useAPINode(t, r, client)
	if !r.differs(r.Node(), clk.Now()) {
		t.Fatal("a stale device count and an allocatable without capacity are not seen as differing")
	}
	r.write(ctx, clk.Now())

	got := getNode(t, client).Status
	for name, want := range map[v1.ResourceName][2]string{
		"example.com/dongle": {"4", "4"},
		"example.com/gpu":    {"2", "1"},
		"example.com/gone":   {"0", "0"},
	} {
		c, a := got.Capacity[name], got.Allocatable[name]
		if c.String() != want[0] || a.String() != want[1] {
			t.Errorf("%s: capacity %s, allocatable %s; want %s and %s", name, c.String(), a.String(), want[0], want[1])
		}
	}
	if q, ok := got.Allocatable["example.com/orphan"]; ok {
		t.Errorf("an allocatable without capacity kept: %s", q.String())
	}
	useAPINode(t, r, client)
	if r.differs(r.Node(), clk.Now()) {
		t.Fatal("the written status still differs: every check would write again")
	}

	adm := r.AdmissionNode().Status.Allocatable
	if d, g := adm["example.com/dongle"], adm["example.com/gpu"]; d.Value() != 4 || g.Value() != 1 {
		t.Fatalf("admission allocatable %v, want dongle 4 (the API's) and gpu 1 (the device manager's)", adm)
	}
	if _, ok := r.o.Node.Status.Capacity["example.com/dongle"]; ok {
		t.Fatal("the node's own description was changed in place")
	}
}

// TestRecreatedNodeZeroesExtendedResources: when nodelet finds its Node
// registered and the device manager has no checkpoint (the node may have
// been recreated), the Node's extended resources are set to 0, as
// upstream's kubelet does, until their plugins advertise them again; with
// a checkpoint, or with registerNode false, they stay.
func TestRecreatedNodeZeroesExtendedResources(t *testing.T) {
	for _, tc := range []struct {
		name       string
		reset      bool
		skip       bool
		wantDongle string
	}{
		{"no checkpoint", true, false, "0"},
		{"a checkpoint", false, false, "4"},
		{"registerNode false", true, true, "4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ready error
			r, client, clk := newReporter(t, &ready)
			r.o.SkipRegistration = tc.skip
			asked := false
			r.o.ResetExtendedResources = func() bool { asked = true; return tc.reset }
			r.o.DeviceResources = func() (v1.ResourceList, v1.ResourceList) {
				return v1.ResourceList{"example.com/gpu": resource.MustParse("1")}, v1.ResourceList{"example.com/gpu": resource.MustParse("1")}
			}
			ctx := context.Background()
			old := r.o.Node.DeepCopy()
			for _, l := range []v1.ResourceList{old.Status.Capacity, old.Status.Allocatable} {
				l["example.com/dongle"], l["example.com/gpu"] = resource.MustParse("4"), resource.MustParse("8")
			}
			_, err := client.CoreV1().Nodes().Create(ctx, old, metav1.CreateOptions{})
			testutil.Must(t, err)
			if !r.register(ctx) {
				t.Fatal("registration failed")
			}
			if asked == tc.skip {
				t.Fatalf("reset asked: %v, with registerNode false: %v", asked, tc.skip)
			}
			got := getNode(t, client).Status
			if tc.reset && !tc.skip {
				for _, name := range []v1.ResourceName{"example.com/dongle", "example.com/gpu"} {
					if c, a := got.Capacity[name], got.Allocatable[name]; !c.IsZero() || !a.IsZero() {
						t.Errorf("%s after registration: capacity %s, allocatable %s; want 0", name, c.String(), a.String())
					}
				}
				if cpu := got.Capacity[v1.ResourceCPU]; cpu.Value() != 2 {
					t.Errorf("cpu changed: %s", cpu.String())
				}
			}
			useAPINode(t, r, client)
			r.write(ctx, clk.Now())
			got = getNode(t, client).Status
			if c, a := got.Capacity["example.com/dongle"], got.Allocatable["example.com/dongle"]; c.String() != tc.wantDongle || a.String() != tc.wantDongle {
				t.Errorf("dongle after a status write: capacity %s, allocatable %s; want %s", c.String(), a.String(), tc.wantDongle)
			}
			if c := got.Capacity["example.com/gpu"]; c.Value() != 1 {
				t.Errorf("gpu after a status write: %s, want the device manager's 1", c.String())
			}
		})
	}
}

// The Node is marked for the attach/detach controller (also when it was
// registered before without the mark), and the volumes in use are
// reported, sorted, as they change.
func TestAttachDetachAnnotationAndVolumesInUse(t *testing.T) {
	var ready error
	r, client, clk := newReporter(t, &ready)
	inUse := []v1.UniqueVolumeName{"kubernetes.io/csi/b^2", "kubernetes.io/csi/a^1"}
	r.o.VolumesInUse = func() []v1.UniqueVolumeName { return append([]v1.UniqueVolumeName(nil), inUse...) }
	ctx := context.Background()
	existing := r.o.Node.DeepCopy()
	existing.Annotations = nil
	if _, err := client.CoreV1().Nodes().Create(ctx, existing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !r.register(ctx) {
		t.Fatal("registration failed")
	}
	if n := getNode(t, client); n.Annotations[ControllerManagedAttachAnnotation] != "true" {
		t.Fatalf("annotations %v", n.Annotations)
	}
	r.SyncStatus(ctx)
	useAPINode(t, r, client)
	if got := getNode(t, client).Status.VolumesInUse; len(got) != 2 || got[0] != "kubernetes.io/csi/a^1" {
		t.Fatalf("volumes in use %v", got)
	}
	inUse = inUse[:1]
	clk.Step(10 * time.Second)
	r.SyncStatus(ctx)
	if got := getNode(t, client).Status.VolumesInUse; len(got) != 1 || got[0] != "kubernetes.io/csi/b^2" {
		t.Fatalf("volumes in use after one went %v", got)
	}
}

// TestExternalCloudProvider: the node registers tainted uninitialized,
// hands over its --node-ip in the annotation, and once a cloud
// controller has set the addresses the reporter writes them back as the
// controller left them; without the option nodelet's own win.
func TestExternalCloudProvider(t *testing.T) {
	for _, external := range []bool{true, false} {
		var ok error
		r, client, _ := newReporter(t, &ok)
		if external {
			ForExternalCloudProvider(r.o.Node, []string{"10.0.0.1"})
		}
		r.o.ExternalCloudProvider = external
		ctx := context.Background()
		if !r.register(ctx) {
			t.Fatal("registration failed")
		}
		n := getNode(t, client)
		tainted := len(n.Spec.Taints) == 1 && n.Spec.Taints[0].Key == TaintExternalCloudProvider && n.Spec.Taints[0].Effect == v1.TaintEffectNoSchedule
		if tainted != external || (n.Annotations[AnnotationProvidedIPAddress] == "10.0.0.1") != external {
			t.Fatalf("external %v: registered with taints %v, annotations %v", external, n.Spec.Taints, n.Annotations)
		}
		cloud := []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "172.16.0.9"}, {Type: v1.NodeInternalDNS, Address: "ip-172-16-0-9.internal"}}
		n.Status.Addresses = cloud
		if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		useAPINode(t, r, client)
		r.SyncStatus(ctx)
		got := getNode(t, client).Status.Addresses
		if kept := len(got) == 2 && got[0].Address == "172.16.0.9"; kept != external {
			t.Fatalf("external %v: addresses after a status write %v", external, got)
		}
	}
}

func (r *Reporter) lastReportedReady() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastReady != nil && *r.lastReady
}
