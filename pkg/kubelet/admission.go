package kubelet

import (
	"fmt"
	goruntime "runtime"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/allocation"
	"github.com/nodelet/nodelet/pkg/nodestatus"
	"github.com/nodelet/nodelet/pkg/podfields"
	"github.com/nodelet/nodelet/pkg/podutil"
)

// admission decides whether a new pod may run on the node, with upstream's
// reasons: a rejected pod is Failed with the reason and never started.
type admission struct {
	node func() *v1.Node
	// allowedUnsafeSysctls are sysctls (or prefixes ending in *) allowed
	// besides the safe set.
	allowedUnsafeSysctls []string
	// pressure returns the node's pressure conditions; nil for none.
	pressure func() map[v1.NodeConditionType]string
	// hooks are asked first.
	hooks []AdmitFunc
	// alloc keeps what admitted pods were granted; nil for none.
	alloc *allocation.Store
	// decisions remember every decision across restarts.
	decisions Decisions
	// resizeChecks say why a resize can never be granted ("" if it can).
	resizeChecks []ResizeCheck
	// appArmor: the host enforces AppArmor profiles.
	appArmor bool
}

// checkPressure refuses pods the way upstream's eviction manager admits
// them: under memory pressure alone only BestEffort pods that do not
// tolerate it are refused; under disk or PID pressure every pod is. Static
// and critical pods are always admitted.
func (a *admission) checkPressure(pod *v1.Pod) *Rejection {
	if a.pressure == nil {
		return nil
	}
	pressure := a.pressure()
	if len(pressure) == 0 || podutil.IsCritical(pod) {
		return nil
	}
	var conds []string
	for c := range pressure {
		conds = append(conds, string(c))
	}
	sort.Strings(conds)
	if _, memory := pressure[v1.NodeMemoryPressure]; memory && len(pressure) == 1 {
		taint := &v1.Taint{Key: v1.TaintNodeMemoryPressure, Effect: v1.TaintEffectNoSchedule}
		if podutil.QOSClass(pod) != v1.PodQOSBestEffort || tolerates(pod.Spec.Tolerations, taint) {
			return nil
		}
	}
	return &Rejection{Reason: "Evicted", Message: fmt.Sprintf("The node had condition: [%s]. ", strings.Join(conds, ", "))}
}

func tolerates(tolerations []v1.Toleration, taint *v1.Taint) bool {
	for i := range tolerations {
		if tolerations[i].ToleratesTaint(klog.Background(), taint, false) {
			return true
		}
	}
	return false
}

// Rejection says why a pod may not run: its reason (upstream's, e.g. OutOfcpu)
// and a message.
type Rejection struct {
	Reason, Message string
}

// admit checks a pod against the node and the pods already admitted.
func (a *admission) admit(active []*v1.Pod, pod *v1.Pod) *Rejection {
	for _, hook := range a.hooks {
		if ok, reason, message := hook(pod); !ok {
			return &Rejection{Reason: reason, Message: message}
		}
	}
	node := a.node()
	for _, check := range []func() *Rejection{
		func() *Rejection { return checkFields(pod) },
		func() *Rejection { return a.checkPressure(pod) },
		func() *Rejection { return a.checkSysctls(pod) },
		func() *Rejection { return checkOS(pod, node) },
		func() *Rejection { return checkNodeName(pod, node) },
		func() *Rejection { return checkAffinity(pod, node) },
		func() *Rejection { return checkTaints(pod, node) },
		func() *Rejection { return checkHostPorts(active, pod) },
		func() *Rejection { return checkResources(active, pod, node) },
		func() *Rejection { return checkAppArmor(pod, a.appArmor) },
	} {
		if r := check(); r != nil {
			return r
		}
	}
	return nil
}

// checkFields refuses a pod that sets a field nodelet cannot honour
// (docs/pod-fields.md), naming it, rather than run the pod without it.
func checkFields(pod *v1.Pod) *Rejection {
	path, why := podfields.Unsupported(pod)
	if path == "" {
		return nil
	}
	return &Rejection{"UnsupportedPodField", fmt.Sprintf("nodelet does not support pod field %s: %s", path, why)}
}

func checkOS(pod *v1.Pod, node *v1.Node) *Rejection {
	if pod.Spec.OS != nil && string(pod.Spec.OS.Name) != goruntime.GOOS {
		return &Rejection{"PodOSNotSupported", "Failed to admit pod as the OS field doesn't match node OS"}
	}
	if os, ok := pod.Spec.NodeSelector[nodestatus.LabelOS]; ok && os != node.Labels[nodestatus.LabelOS] {
		return &Rejection{"PodOSSelectorNodeLabelDoesNotMatch", "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"}
	}
	return nil
}

func checkNodeName(pod *v1.Pod, node *v1.Node) *Rejection {
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != node.Name {
		return &Rejection{"NodeName", fmt.Sprintf("Predicate NodeName failed: the pod is bound to node %q, not this node (%q)", pod.Spec.NodeName, node.Name)}
	}
	return nil
}

func checkAffinity(pod *v1.Pod, node *v1.Node) *Rejection {
	ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
	if err != nil {
		return &Rejection{"NodeAffinity", fmt.Sprintf("Predicate NodeAffinity failed: %v", err)}
	}
	if !ok {
		return &Rejection{"NodeAffinity", "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"}
	}
	return nil
}

// checkTaints refuses a pod that does not tolerate one of the node's
// NoExecute taints (the others are the scheduler's), as upstream does;
// static pods are the node's own and always run.
func checkTaints(pod *v1.Pod, node *v1.Node) *Rejection {
	if podutil.IsStatic(pod) {
		return nil
	}
	taint, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations,
		func(t *v1.Taint) bool { return t.Effect == v1.TaintEffectNoExecute }, false)
	if !untolerated {
		return nil
	}
	klog.V(2).InfoS("Pod does not tolerate a NoExecute taint", "pod", klog.KObj(pod), "podUID", pod.UID, "taint", taint.ToString())
	return &Rejection{"TaintToleration", "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"}
}

// hostPort is one host port a pod claims.
type hostPort struct {
	protocol v1.Protocol
	ip       string
	port     int32
}

func (p hostPort) conflicts(o hostPort) bool {
	if p.protocol != o.protocol || p.port != o.port {
		return false
	}
	any := func(ip string) bool { return ip == "" || ip == "0.0.0.0" || ip == "::" }
	return p.ip == o.ip || any(p.ip) || any(o.ip)
}

func hostPorts(pod *v1.Pod) []hostPort {
	var out []hostPort
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			for _, p := range cs[i].Ports {
				if p.HostPort <= 0 {
					continue
				}
				proto := p.Protocol
				if proto == "" {
					proto = v1.ProtocolTCP
				}
				out = append(out, hostPort{protocol: proto, ip: p.HostIP, port: p.HostPort})
			}
		}
	}
	return out
}

func checkHostPorts(active []*v1.Pod, pod *v1.Pod) *Rejection {
	want := hostPorts(pod)
	if len(want) == 0 {
		return nil
	}
	for _, other := range active {
		for _, used := range hostPorts(other) {
			for _, w := range want {
				if w.conflicts(used) {
					return &Rejection{"NodePorts", fmt.Sprintf("Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports (%s %d is used by pod %s)", w.protocol, w.port, other.Name)}
				}
			}
		}
	}
	return nil
}

// checkResources checks the pod count and the pod's requests against
// what the node can still allocate.
func checkResources(active []*v1.Pod, pod *v1.Pod, node *v1.Node) *Rejection {
	alloc := node.Status.Allocatable
	if maxPods, ok := alloc[v1.ResourcePods]; ok && int64(len(active))+1 > maxPods.Value() {
		return &Rejection{"OutOfpods", fmt.Sprintf("Node didn't have enough resource: pods, requested: 1, used: %d, capacity: %d", len(active), maxPods.Value())}
	}
	req := resourcehelper.PodRequests(withoutUncountedRequests(pod, alloc), resourcehelper.PodResourcesOptions{})
	names := make([]string, 0, len(req))
	for name, q := range req {
		if !q.IsZero() {
			names = append(names, string(name))
		}
	}
	if len(names) == 0 {
		// Asks for nothing but a place: the other pods' requests do not
		// matter (summing them for every pod made a batch of n cost n²).
		return nil
	}
	used := v1.ResourceList{}
	for _, p := range active {
		for name, q := range resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}) {
			cur := used[name]
			cur.Add(q)
			used[name] = cur
		}
	}
	sort.Slice(names, func(i, j int) bool { return resourceOrder(names[i]) < resourceOrder(names[j]) })
	for _, n := range names {
		name := v1.ResourceName(n)
		want := req[name]
		if want.IsZero() {
			continue
		}
		capacity, ok := alloc[name]
		if !ok {
			capacity = resource.Quantity{}
		}
		u := used[name]
		total := u.DeepCopy()
		total.Add(want)
		if total.Cmp(capacity) > 0 {
			return &Rejection{"OutOf" + n, fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d",
				n, amount(name, want), amount(name, u), amount(name, capacity))}
		}
	}
	return nil
}

// withoutUncountedRequests is the pod without the requests the node does
// not count, as upstream's admission leaves them out: extended resources
// the node does not offer at all (cluster-level resources, which another
// component accounts for) and those the scheduler backs with a
// ResourceClaim (DRA extended resources, which the DRA manager prepares).
// The pod itself when it asks for none of these.
func withoutUncountedRequests(pod *v1.Pod, alloc v1.ResourceList) *v1.Pod {
	out := pod
	for _, init := range []bool{true, false} {
		for i, c := range containersOf(pod, init) {
			for name := range c.Resources.Requests {
				if !uncounted(pod, c.Name, name, alloc) {
					continue
				}
				if out == pod {
					out = pod.DeepCopy()
				}
				delete(containersOf(out, init)[i].Resources.Requests, name)
			}
		}
	}
	return out
}

// uncounted reports whether admission leaves container's request of name
// out (see withoutUncountedRequests).
func uncounted(pod *v1.Pod, container string, name v1.ResourceName, alloc v1.ResourceList) bool {
	if s := pod.Status.ExtendedResourceClaimStatus; s != nil {
		for _, m := range s.RequestMappings {
			if m.ContainerName == container && v1.ResourceName(m.ResourceName) == name {
				return true
			}
		}
	}
	_, offered := alloc[name]
	return !offered && podutil.IsExtendedResourceName(name)
}

func containersOf(pod *v1.Pod, init bool) []v1.Container {
	if init {
		return pod.Spec.InitContainers
	}
	return pod.Spec.Containers
}

// resourceOrder checks cpu, then memory, then storage, then the rest.
func resourceOrder(name string) string {
	switch v1.ResourceName(name) {
	case v1.ResourceCPU:
		return "0"
	case v1.ResourceMemory:
		return "1"
	case v1.ResourceEphemeralStorage:
		return "2"
	}
	return "3" + name
}

// amount is how upstream prints a quantity: millicores for cpu, units
// (bytes) for the rest.
func amount(name v1.ResourceName, q resource.Quantity) int64 {
	if name == v1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}

// safeSysctls are the sysctls every pod may set: namespaced and unable to
// affect other pods or the node.
var safeSysctls = map[string]bool{
	"kernel.shm_rmid_forced":              true,
	"net.ipv4.ip_local_port_range":        true,
	"net.ipv4.tcp_syncookies":             true,
	"net.ipv4.ping_group_range":           true,
	"net.ipv4.ip_unprivileged_port_start": true,
	"net.ipv4.ip_local_reserved_ports":    true,
	"net.ipv4.tcp_keepalive_time":         true,
	"net.ipv4.tcp_fin_timeout":            true,
	"net.ipv4.tcp_keepalive_intvl":        true,
	"net.ipv4.tcp_keepalive_probes":       true,
	"net.ipv4.tcp_rmem":                   true,
	"net.ipv4.tcp_wmem":                   true,
}

func (a *admission) checkSysctls(pod *v1.Pod) *Rejection {
	if pod.Spec.SecurityContext == nil {
		return nil
	}
	for _, s := range pod.Spec.SecurityContext.Sysctls {
		name := strings.ReplaceAll(s.Name, "/", ".")
		if !safeSysctls[name] && !a.unsafeAllowed(name) {
			return &Rejection{"SysctlForbidden", fmt.Sprintf("forbidden sysctl: %q not allowlisted", s.Name)}
		}
		// A pod sharing the node's namespace must not change it.
		if pod.Spec.HostNetwork && strings.HasPrefix(name, "net.") {
			return &Rejection{"SysctlForbidden", fmt.Sprintf("forbidden sysctl: %q cannot be set in a pod using the host network", s.Name)}
		}
		if pod.Spec.HostIPC && (strings.HasPrefix(name, "kernel.shm") || strings.HasPrefix(name, "kernel.msg") || strings.HasPrefix(name, "kernel.sem") || strings.HasPrefix(name, "fs.mqueue.")) {
			return &Rejection{"SysctlForbidden", fmt.Sprintf("forbidden sysctl: %q cannot be set in a pod using the host IPC namespace", s.Name)}
		}
	}
	return nil
}

func (a *admission) unsafeAllowed(name string) bool {
	for _, allowed := range a.allowedUnsafeSysctls {
		allowed = strings.ReplaceAll(allowed, "/", ".")
		if allowed == name || (strings.HasSuffix(allowed, "*") && strings.HasPrefix(name, strings.TrimSuffix(allowed, "*"))) {
			return true
		}
	}
	return false
}
