package nodestatus

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/nodelet/nodelet/pkg/cluster/apiwatch"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/cluster/kubeclient"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// Defaults of the reporter's timing, as the kubelet's.
const (
	DefaultStatusUpdateFrequency = 10 * time.Second
	DefaultStatusReportFrequency = 5 * time.Minute
	DefaultLeaseDuration         = 40 * time.Second

	// LeaseNamespace holds the nodes' heartbeat leases.
	LeaseNamespace = "kube-node-lease"

	// startupCheckPeriod is how often readiness is checked until the node
	// was first reported Ready, so a new node becomes Ready at once.
	startupCheckPeriod = 100 * time.Millisecond
	retryMin           = 200 * time.Millisecond
	retryMax           = 7 * time.Second
	// updateRetries bounds the attempts of one status write (conflicts).
	updateRetries = 5
)

// ReporterOptions configure a Reporter.
type ReporterOptions struct {
	Client kubeclient.Interface
	// Node is the node as nodelet describes it: labels, addresses,
	// capacity, allocatable, system info and daemon endpoints.
	Node *v1.Node
	// Ready says why the node cannot run pods (runtime, network or PLEG
	// unhealthy), or nil when it can.
	Ready func() error
	// Pressure returns the pressure conditions that hold, with their
	// messages; nil reports none.
	Pressure func() map[v1.NodeConditionType]string
	Recorder record.EventRecorder
	Clock    clock.WithTicker
	// StatusUpdateFrequency is how often the status is checked and,
	// if it changed, written; StatusReportFrequency how often it is
	// written regardless.
	StatusUpdateFrequency time.Duration
	StatusReportFrequency time.Duration
	LeaseDuration         time.Duration
	// WatchBackoff paces the node watch's retries; nil for apiwatch.Backoff.
	WatchBackoff *wait.Backoff
	// SkipRegistration (registerNode: false) never creates the Node: the
	// reporter waits for someone else to, then keeps it current.
	SkipRegistration bool
	// VolumesInUse lists the attachable volumes the node has mounted
	// (node.status.volumesInUse: the attach/detach controller does not
	// detach them); nil lists none.
	VolumesInUse func() []v1.UniqueVolumeName
	// ExternalCloudProvider (--cloud-provider=external): once a cloud
	// controller has set the Node's addresses, they are its, and stay.
	ExternalCloudProvider bool
	// DeviceResources are the device plugins' resources now (capacity,
	// allocatable), and AdmissionDeviceResources allocatable as admission
	// counts it; nil for none.
	DeviceResources          func() (capacity, allocatable v1.ResourceList)
	AdmissionDeviceResources func() v1.ResourceList
	// ResetExtendedResources, asked when nodelet finds its Node already
	// registered, says the node may have been recreated (the device
	// manager has no checkpoint): the Node's extended resources are then
	// set to 0 until their plugins register again, as upstream's
	// kubelet does. Nil never resets.
	ResetExtendedResources func() bool
}

// Reporter registers the node with the API server and keeps it current:
// its status (conditions with reasons, resources, system info) written
// when it changes and in full every StatusReportFrequency, and its Lease
// in kube-node-lease renewed every quarter of the lease duration, which
// is the heartbeat the node lifecycle controller watches.
type Reporter struct {
	o       ReporterOptions
	nodeRef *v1.ObjectReference
	// store holds the node as the API server has it; it signals each
	// change the watch delivers.
	store *signallingStore

	mu sync.Mutex
	// lastReported is the status last written, heartbeats left out.
	lastReported   *v1.NodeStatus
	lastReportTime time.Time
	lastReady      *bool
	lease          *coordinationv1.Lease
}

// NewReporter returns a reporter; nothing happens before Run.
func NewReporter(o ReporterOptions) *Reporter {
	if o.StatusUpdateFrequency <= 0 {
		o.StatusUpdateFrequency = DefaultStatusUpdateFrequency
	}
	if o.StatusReportFrequency <= 0 {
		o.StatusReportFrequency = DefaultStatusReportFrequency
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	return &Reporter{
		o:       o,
		nodeRef: &v1.ObjectReference{Kind: "Node", Name: o.Node.Name, UID: types.UID(o.Node.Name), APIVersion: "v1"},
		store:   newSignallingStore(),
	}
}

// Node is the node as the API server has it (labels an administrator
// added included), or nodelet's own description before registration.
func (r *Reporter) Node() *v1.Node {
	if obj, ok, _ := r.store.GetByKey(r.o.Node.Name); ok {
		return obj.(*v1.Node)
	}
	return r.o.Node
}

// AdmissionNode is the Node pods are admitted against: the API's (its
// labels and taints are the administrator's) with the capacity and
// allocatable nodelet measured, which it is the authority on. The API's
// copy may still carry the previous run's until the first status write
// (a restart with a smaller maxPods, say).
//
// The extended resources others advertise on the Node are the API's, as
// nodelet's status writes keep them. The device plugins' resources are
// the device manager's in either case (they override what the API's copy
// says of them): pods arrive from the API source as soon as nodelet
// starts, before the Node informer has synced, and a pod holding a device
// must be admitted again then.
func (r *Reporter) AdmissionNode() *v1.Node {
	// A shallow copy: admission reads it (once per pod admitted), and only
	// the two maps are replaced, never changed in place.
	// withOthersExtended returns fresh maps (before the informer has the
	// Node, api is nodelet's own description, which has no others').
	api := r.Node()
	n := *api
	n.Status.Capacity, n.Status.Allocatable = withOthersExtended(r.o.Node.Status.Capacity, r.o.Node.Status.Allocatable, api.Status.Capacity)
	if r.o.AdmissionDeviceResources != nil {
		maps.Copy(n.Status.Allocatable, r.o.AdmissionDeviceResources())
	}
	return &n
}

// Run registers the node, then reports until ctx ends.
func (r *Reporter) Run(ctx context.Context) {
	r.o.Recorder.Eventf(r.nodeRef, v1.EventTypeNormal, "Starting", "Starting nodelet.")
	backOff := retryMin
	for !r.register(ctx) {
		select {
		case <-ctx.Done():
			return
		case <-r.o.Clock.After(backOff):
		}
		backOff = min(2*backOff, retryMax)
	}
	go r.watchNode(ctx)
	go r.runLease(ctx)
	r.runStatus(ctx)
}

// register creates the Node or, when it exists (nodelet restarted, or
// someone else registered it), brings its labels up to date. It reports
// success. The registered Node goes into the cache at once, so the first
// lease already names its owner without waiting for the watch.
func (r *Reporter) register(ctx context.Context) bool {
	want := r.o.Node.DeepCopy()
	want.Status.Conditions = r.conditions(nil, r.o.Clock.Now())
	if !r.o.SkipRegistration {
		created, err := r.o.Client.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{})
		if err == nil {
			klog.InfoS("Successfully registered node", "node", klog.KObj(created))
			r.o.Recorder.Eventf(r.nodeRef, v1.EventTypeNormal, "RegisteredNode", "Node %s registered", created.Name)
			return r.remember(created)
		}
		if !apierrors.IsAlreadyExists(err) {
			klog.ErrorS(err, "Unable to register node with API server", "node", klog.KObj(want))
			return false
		}
	}
	existing, err := r.adopt(ctx, want)
	if err != nil {
		return false
	}
	if !r.o.SkipRegistration && r.o.ResetExtendedResources != nil && r.o.ResetExtendedResources() {
		if existing, err = r.zeroExtendedResources(ctx, existing); err != nil {
			return false
		}
	}
	klog.InfoS("Node was previously registered", "node", klog.KObj(existing), "nodeUID", existing.UID)
	return r.remember(existing)
}

// adopt reads the existing Node and adds the labels and annotations
// nodelet sets.
func (r *Reporter) adopt(ctx context.Context, want *v1.Node) (*v1.Node, error) {
	nodes := r.o.Client.CoreV1().Nodes()
	existing, err := nodes.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && r.o.SkipRegistration {
		klog.InfoS("Waiting for the Node to be created: registerNode is false", "node", klog.KObj(want))
		return nil, err
	}
	if err != nil {
		klog.ErrorS(err, "Unable to read the existing node", "node", klog.KObj(want))
		return nil, err
	}
	changed := false
	if existing.Labels == nil {
		existing.Labels = map[string]string{}
	}
	for k, v := range want.Labels {
		if existing.Labels[k] != v {
			existing.Labels[k], changed = v, true
		}
	}
	if existing.Annotations == nil {
		existing.Annotations = map[string]string{}
	}
	for k, v := range want.Annotations {
		if existing.Annotations[k] != v {
			existing.Annotations[k], changed = v, true
		}
	}
	if !changed {
		return existing, nil
	}
	updated, err := nodes.Update(ctx, existing, metav1.UpdateOptions{})
	if err != nil {
		klog.ErrorS(err, "Unable to update the labels of the existing node", "node", klog.KObj(existing))
		return nil, err
	}
	return updated, nil
}

// zeroExtendedResources sets the Node's extended resources to 0, so the
// scheduler does not count on a recreated node's former devices (or an
// operator's former patch) before they are advertised again.
func (r *Reporter) zeroExtendedResources(ctx context.Context, node *v1.Node) (*v1.Node, error) {
	zeroed := node.DeepCopy()
	changed := false
	for name, q := range node.Status.Capacity {
		a, ok := node.Status.Allocatable[name]
		if !podutil.IsExtendedResourceName(name) || (q.IsZero() && ok && a.IsZero()) {
			continue
		}
		if zeroed.Status.Allocatable == nil {
			zeroed.Status.Allocatable = v1.ResourceList{}
		}
		zeroed.Status.Capacity[name] = *resource.NewQuantity(0, resource.DecimalSI)
		zeroed.Status.Allocatable[name] = *resource.NewQuantity(0, resource.DecimalSI)
		changed = true
		klog.InfoS("Zeroing an extended resource of the existing node: the device manager has no checkpoint, so the node may have been recreated", "node", klog.KObj(node), "resource", name)
	}
	if !changed {
		return node, nil
	}
	updated, err := r.o.Client.CoreV1().Nodes().UpdateStatus(ctx, zeroed, metav1.UpdateOptions{})
	if err != nil {
		klog.ErrorS(err, "Unable to zero the extended resources of the existing node", "node", klog.KObj(node))
		return nil, err
	}
	return updated, nil
}

// remember puts the registered Node into the cache the watch keeps.
func (r *Reporter) remember(node *v1.Node) bool {
	if err := r.store.Add(node); err != nil {
		klog.ErrorS(err, "Unable to cache the registered node", "node", klog.KObj(node))
	}
	return true
}

// watchNode keeps the store in step with the API's Node.
func (r *Reporter) watchNode(ctx context.Context) {
	nodes := r.o.Client.CoreV1().Nodes()
	lw := apiwatch.FieldSelected("metadata.name", r.o.Node.Name, nodes.List, nodes.Watch)
	apiwatch.Reflect(ctx, "node "+r.o.Node.Name, r.o.Client, lw, &v1.Node{}, r.store, r.o.WatchBackoff)
}

// runStatus checks the status every StatusUpdateFrequency (more often
// until the node is first Ready), and as soon as the watch brings a
// change to the Node, and writes it when needed: when the node lifecycle
// controller marks the node Unknown after an outage (its own watches
// were stale), the node is put right as soon as nodelet sees it, not up
// to StatusUpdateFrequency later.
func (r *Reporter) runStatus(ctx context.Context) {
	for {
		r.SyncStatus(ctx)
		period := r.o.StatusUpdateFrequency
		r.mu.Lock()
		if r.lastReady == nil || !*r.lastReady {
			period = startupCheckPeriod
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-r.o.Clock.After(period):
		case <-r.store.changed:
		}
	}
}

// desiredStatus is the node's status now, heartbeats left out.
func (r *Reporter) desiredStatus(old []v1.NodeCondition, now time.Time) v1.NodeStatus {
	s := *r.o.Node.Status.DeepCopy()
	s.Conditions = r.conditions(old, now)
	if r.o.ExternalCloudProvider {
		if api := r.Node(); api != r.o.Node && len(api.Status.Addresses) > 0 {
			s.Addresses = api.Status.Addresses
		}
	}
	if r.o.VolumesInUse != nil {
		s.VolumesInUse = r.o.VolumesInUse()
		slices.Sort(s.VolumesInUse)
	}
	if r.o.DeviceResources != nil {
		capacity, allocatable := r.o.DeviceResources()
		maps.Copy(s.Capacity, capacity)
		maps.Copy(s.Allocatable, allocatable)
	}
	return s
}

// pressureConditions are the pressure conditions with upstream's reasons
// and the events recorded when they change.
var pressureConditions = []struct {
	typ                             v1.NodeConditionType
	okReason, okMessage, okEvent    string
	badReason, badMessage, badEvent string
}{
	{v1.NodeMemoryPressure, "KubeletHasSufficientMemory", "nodelet has sufficient memory available", "NodeHasSufficientMemory",
		"KubeletHasInsufficientMemory", "nodelet has insufficient memory available", "NodeHasInsufficientMemory"},
	{v1.NodeDiskPressure, "KubeletHasNoDiskPressure", "nodelet has no disk pressure", "NodeHasNoDiskPressure",
		"KubeletHasDiskPressure", "nodelet has disk pressure", "NodeHasDiskPressure"},
	{v1.NodePIDPressure, "KubeletHasSufficientPID", "nodelet has sufficient PID available", "NodeHasSufficientPID",
		"KubeletHasInsufficientPID", "nodelet has insufficient PID available", "NodeHasInsufficientPID"},
}

// conditions computes the node conditions: the pressure conditions from
// the eviction signals, and Ready from the runtime, network and PLEG.
// Transition times carry over from old while a condition keeps its
// status; a pressure condition that changes is recorded as an event.
func (r *Reporter) conditions(old []v1.NodeCondition, now time.Time) []v1.NodeCondition {
	ready := v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", Message: "nodelet is posting ready status"}
	if err := r.o.Ready(); err != nil {
		ready.Status, ready.Reason, ready.Message = v1.ConditionFalse, "KubeletNotReady", err.Error()
	}
	var pressure map[v1.NodeConditionType]string
	if r.o.Pressure != nil {
		pressure = r.o.Pressure()
	}
	var conds []v1.NodeCondition
	for _, pc := range pressureConditions {
		c := v1.NodeCondition{Type: pc.typ, Status: v1.ConditionFalse, Reason: pc.okReason, Message: pc.okMessage}
		if detail, ok := pressure[pc.typ]; ok {
			c.Status, c.Reason, c.Message = v1.ConditionTrue, pc.badReason, pc.badMessage+": "+detail
		}
		conds = append(conds, c)
	}
	conds = append(conds, ready)
	t := metav1.NewTime(now)
	for i := range conds {
		conds[i].LastTransitionTime = t
		for _, o := range old {
			if o.Type == conds[i].Type && o.Status == conds[i].Status {
				conds[i].LastTransitionTime = o.LastTransitionTime
			}
		}
	}
	return conds
}

// SyncStatus writes the node's status if it differs from what the API
// server has (nodelet's view changed, or another component, such as the
// node lifecycle controller marking the node Unknown, changed it), or if
// StatusReportFrequency passed.
func (r *Reporter) SyncStatus(ctx context.Context) {
	now := r.o.Clock.Now()
	r.mu.Lock()
	due := r.lastReported == nil || now.Sub(r.lastReportTime) >= r.o.StatusReportFrequency
	r.mu.Unlock()
	if due || r.differs(r.Node(), now) {
		r.write(ctx, now)
	}
}

// differs tells whether node's status is not what nodelet would write.
func (r *Reporter) differs(node *v1.Node, now time.Time) bool {
	want := r.desiredStatus(node.Status.Conditions, now)
	return !apiequality.Semantic.DeepEqual(withoutHeartbeats(node.Status), withoutHeartbeats(r.applyStatus(node, want).Status))
}

// resync compares the status with the node read afresh, rather than the
// watched copy: after an outage the watch may still be backing off while
// the node lifecycle controller has already marked the node Unknown.
func (r *Reporter) resync(ctx context.Context) {
	node, err := r.o.Client.CoreV1().Nodes().Get(ctx, r.o.Node.Name, metav1.GetOptions{})
	if err != nil {
		klog.ErrorS(err, "Unable to read the node", "node", r.o.Node.Name)
		return
	}
	if now := r.o.Clock.Now(); r.differs(node, now) {
		r.write(ctx, now)
	}
}

// write writes the status, retrying a conflict or a failure a few times.
func (r *Reporter) write(ctx context.Context, now time.Time) {
	var err error
	for range updateRetries {
		if err = r.writeStatus(ctx, now); err == nil {
			return
		}
	}
	klog.ErrorS(err, "Unable to update node status", "node", r.o.Node.Name)
}

func (r *Reporter) writeStatus(ctx context.Context, now time.Time) error {
	node, err := r.o.Client.CoreV1().Nodes().Get(ctx, r.o.Node.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("getting node: %w", err)
	}
	want := r.desiredStatus(node.Status.Conditions, now)
	node = r.applyStatus(node, want)
	for i := range node.Status.Conditions {
		if hasCondition(want.Conditions, node.Status.Conditions[i].Type) {
			node.Status.Conditions[i].LastHeartbeatTime = metav1.NewTime(now)
		}
	}
	if _, err := r.o.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating node status: %w", err)
	}
	ready := conditionTrue(want.Conditions, v1.NodeReady)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lastReady == nil || *r.lastReady != ready {
		if ready {
			r.o.Recorder.Eventf(r.nodeRef, v1.EventTypeNormal, "NodeReady", "Node %s status is now: NodeReady", r.o.Node.Name)
		} else {
			r.o.Recorder.Eventf(r.nodeRef, v1.EventTypeNormal, "NodeNotReady", "Node %s status is now: NodeNotReady", r.o.Node.Name)
		}
		klog.InfoS("Node status changed", "node", r.o.Node.Name, "ready", ready)
	}
	// Pressure events compare with what was written last, not with the
	// API's copy, so a restarted nodelet reports its first view.
	for _, pc := range pressureConditions {
		under := conditionTrue(want.Conditions, pc.typ)
		if r.lastReported != nil && conditionTrue(r.lastReported.Conditions, pc.typ) == under {
			continue
		}
		if r.lastReported == nil && !under {
			continue
		}
		event := pc.okEvent
		if under {
			event = pc.badEvent
		}
		r.o.Recorder.Eventf(r.nodeRef, v1.EventTypeNormal, event, "Node %s status is now: %s", r.o.Node.Name, event)
	}
	r.lastReady = &ready
	r.lastReported = &want
	r.lastReportTime = now
	return nil
}

// applyStatus returns a copy of node with nodelet's part of the status
// set to want. Conditions others own (NetworkUnavailable, for one) stay.
func (r *Reporter) applyStatus(node *v1.Node, want v1.NodeStatus) *v1.Node {
	node = node.DeepCopy()
	conds := want.DeepCopy().Conditions
	for _, c := range node.Status.Conditions {
		if hasCondition(conds, c.Type) {
			for i := range conds {
				if conds[i].Type == c.Type {
					conds[i].LastHeartbeatTime = c.LastHeartbeatTime
				}
			}
			continue
		}
		conds = append(conds, c)
	}
	node.Status.Conditions = conds
	node.Status.Capacity, node.Status.Allocatable = withOthersExtended(want.Capacity, want.Allocatable, node.Status.Capacity)
	node.Status.NodeInfo, node.Status.Addresses, node.Status.DaemonEndpoints = want.NodeInfo, want.Addresses, want.DaemonEndpoints
	node.Status.VolumesInUse = want.VolumesInUse
	return node
}

// withOthersExtended is nodelet's capacity and allocatable with the
// extended resources others advertise on the Node (an operator patching
// its status, say) that nodelet does not report: upstream keeps them, with
// allocatable equal to capacity, since nothing is reserved of them. A
// device plugin's resource is nodelet's even once its plugin is gone: the
// device manager reports it at zero. The maps returned are fresh.
func withOthersExtended(capacity, allocatable, api v1.ResourceList) (v1.ResourceList, v1.ResourceList) {
	capacity, allocatable = maps.Clone(capacity), maps.Clone(allocatable)
	if capacity == nil {
		capacity = v1.ResourceList{}
	}
	if allocatable == nil {
		allocatable = v1.ResourceList{}
	}
	for name, q := range api {
		if _, ours := capacity[name]; !ours && podutil.IsExtendedResourceName(name) {
			capacity[name], allocatable[name] = q.DeepCopy(), q.DeepCopy()
		}
	}
	return capacity, allocatable
}

// withoutHeartbeats orders the conditions by type and clears their
// heartbeat times, which alone are no reason to write.
func withoutHeartbeats(s v1.NodeStatus) v1.NodeStatus {
	s = *s.DeepCopy()
	sort.Slice(s.Conditions, func(i, j int) bool { return s.Conditions[i].Type < s.Conditions[j].Type })
	for i := range s.Conditions {
		s.Conditions[i].LastHeartbeatTime = metav1.Time{}
	}
	return s
}

func hasCondition(conds []v1.NodeCondition, t v1.NodeConditionType) bool {
	for _, c := range conds {
		if c.Type == t {
			return true
		}
	}
	return false
}

func conditionTrue(conds []v1.NodeCondition, t v1.NodeConditionType) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// runLease renews the lease every quarter of its duration, and retries
// failures with a back-off.
func (r *Reporter) runLease(ctx context.Context) {
	backOff := retryMin
	for {
		wait := r.o.LeaseDuration / 4
		if err := r.RenewLease(ctx); err != nil {
			klog.ErrorS(err, "Failed to renew the node lease", "node", r.o.Node.Name)
			wait, backOff = backOff, min(2*backOff, retryMax)
		} else {
			if backOff != retryMin {
				// The API server is back: put right at once whatever was
				// said about the node while nodelet could not answer.
				r.resync(ctx)
			}
			backOff = retryMin
		}
		select {
		case <-ctx.Done():
			return
		case <-r.o.Clock.After(wait):
		}
	}
}

// RenewLease creates or renews the node's lease, owned by the node so
// that it goes when the node does.
func (r *Reporter) RenewLease(ctx context.Context) error {
	leases := r.o.Client.CoordinationV1().Leases(LeaseNamespace)
	r.mu.Lock()
	lease := r.lease
	r.lease = nil
	r.mu.Unlock()
	// The lease last written is renewed without reading it again; after a
	// failure it is read afresh.
	exists := lease != nil
	if lease == nil {
		var err error
		lease, err = leases.Get(ctx, r.o.Node.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: r.o.Node.Name, Namespace: LeaseNamespace}}
		case err != nil:
			return fmt.Errorf("getting lease: %w", err)
		default:
			exists = true
		}
	}
	holder, seconds, now := r.o.Node.Name, int32(r.o.LeaseDuration/time.Second), metav1.NewMicroTime(r.o.Clock.Now())
	lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds, lease.Spec.RenewTime = &holder, &seconds, &now
	if len(lease.OwnerReferences) == 0 {
		if node := r.Node(); node.UID != "" {
			lease.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
		}
	}
	var out *coordinationv1.Lease
	var err error
	if !exists {
		out, err = leases.Create(ctx, lease, metav1.CreateOptions{})
	} else {
		out, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("renewing lease: %w", err)
	}
	r.mu.Lock()
	r.lease = out
	r.mu.Unlock()
	return nil
}
