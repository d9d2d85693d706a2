package admission

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

	"github.com/nodelet/nodelet/pkg/pods/podfields"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// Pressure refuses pods the way upstream's eviction manager admits
// them: under memory pressure alone only BestEffort pods that do not
// tolerate it are refused; under disk or PID pressure every pod is. Static
// and critical pods are always admitted.
func Pressure(conditions func() map[v1.NodeConditionType]string) Handler {
	return HandlerFunc(func(a Attributes) Verdict { return checkPressure(a.Pod, conditions()) })
}

func checkPressure(pod *v1.Pod, pressure map[v1.NodeConditionType]string) Verdict {
	if len(pressure) == 0 || podutil.IsCritical(pod) {
		return Verdict{}
	}
	var conds []string
	for c := range pressure {
		conds = append(conds, string(c))
	}
	sort.Strings(conds)
	if _, memory := pressure[v1.NodeMemoryPressure]; memory && len(pressure) == 1 {
		taint := &v1.Taint{Key: v1.TaintNodeMemoryPressure, Effect: v1.TaintEffectNoSchedule}
		if podutil.QOSClass(pod) != v1.PodQOSBestEffort || tolerates(pod.Spec.Tolerations, taint) {
			return Verdict{}
		}
	}
	return Verdict{Reason: "Evicted", Message: fmt.Sprintf("The node had condition: [%s]. ", strings.Join(conds, ", "))}
}

func tolerates(tolerations []v1.Toleration, taint *v1.Taint) bool {
	for i := range tolerations {
		if tolerations[i].ToleratesTaint(klog.Background(), taint, false) {
			return true
		}
	}
	return false
}

// Fields refuses a pod that sets a field nodelet cannot honour
// (docs/pod-fields.md), naming it, rather than run the pod without it.
var Fields Handler = HandlerFunc(func(a Attributes) Verdict { return checkFields(a.Pod) })

func checkFields(pod *v1.Pod) Verdict {
	path, why := podfields.Unsupported(pod)
	if path == "" {
		return Verdict{}
	}
	return Verdict{"UnsupportedPodField", fmt.Sprintf("nodelet does not support pod field %s: %s", path, why)}
}

// OS refuses a pod for another operating system, by its os field or its
// kubernetes.io/os node selector.
var OS Handler = HandlerFunc(func(a Attributes) Verdict { return checkOS(a.Pod, a.Node) })

func checkOS(pod *v1.Pod, node *v1.Node) Verdict {
	if pod.Spec.OS != nil && string(pod.Spec.OS.Name) != goruntime.GOOS {
		return Verdict{"PodOSNotSupported", "Failed to admit pod as the OS field doesn't match node OS"}
	}
	if os, ok := pod.Spec.NodeSelector[v1.LabelOSStable]; ok && os != node.Labels[v1.LabelOSStable] {
		return Verdict{"PodOSSelectorNodeLabelDoesNotMatch", "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"}
	}
	return Verdict{}
}

// NodeName refuses a pod bound to another node.
var NodeName Handler = HandlerFunc(func(a Attributes) Verdict { return checkNodeName(a.Pod, a.Node) })

func checkNodeName(pod *v1.Pod, node *v1.Node) Verdict {
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != node.Name {
		return Verdict{"NodeName", fmt.Sprintf("Predicate NodeName failed: the pod is bound to node %q, not this node (%q)", pod.Spec.NodeName, node.Name)}
	}
	return Verdict{}
}

// Affinity refuses a pod whose node selector or required node affinity
// the node does not match.
var Affinity Handler = HandlerFunc(func(a Attributes) Verdict { return checkAffinity(a.Pod, a.Node) })

func checkAffinity(pod *v1.Pod, node *v1.Node) Verdict {
	ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
	if err != nil {
		return Verdict{"NodeAffinity", fmt.Sprintf("Predicate NodeAffinity failed: %v", err)}
	}
	if !ok {
		return Verdict{"NodeAffinity", "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"}
	}
	return Verdict{}
}

// Taints refuses a pod that does not tolerate one of the node's
// NoExecute taints (the others are the scheduler's), as upstream does;
// static pods are the node's own and always run.
var Taints Handler = HandlerFunc(func(a Attributes) Verdict { return checkTaints(a.Pod, a.Node) })

func checkTaints(pod *v1.Pod, node *v1.Node) Verdict {
	if podutil.IsStatic(pod) {
		return Verdict{}
	}
	taint, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations,
		func(t *v1.Taint) bool { return t.Effect == v1.TaintEffectNoExecute }, false)
	if !untolerated {
		return Verdict{}
	}
	klog.V(2).InfoS("Pod does not tolerate a NoExecute taint", "pod", klog.KObj(pod), "podUID", pod.UID, "taint", taint.ToString())
	return Verdict{"TaintToleration", "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"}
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

// HostPorts refuses a pod claiming a host port an active pod holds.
var HostPorts Handler = HandlerFunc(func(a Attributes) Verdict { return checkHostPorts(a.Active, a.Pod) })

func checkHostPorts(active []*v1.Pod, pod *v1.Pod) Verdict {
	want := hostPorts(pod)
	if len(want) == 0 {
		return Verdict{}
	}
	for _, other := range active {
		for _, used := range hostPorts(other) {
			for _, w := range want {
				if w.conflicts(used) {
					return Verdict{"NodePorts", fmt.Sprintf("Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports (%s %d is used by pod %s)", w.protocol, w.port, other.Name)}
				}
			}
		}
	}
	return Verdict{}
}

// Resources checks the pod count and the pod's requests against
// what the node can still allocate.
var Resources Handler = HandlerFunc(func(a Attributes) Verdict { return checkResources(a.Active, a.Pod, a.Node) })

func checkResources(active []*v1.Pod, pod *v1.Pod, node *v1.Node) Verdict {
	alloc := node.Status.Allocatable
	if maxPods, ok := alloc[v1.ResourcePods]; ok && int64(len(active))+1 > maxPods.Value() {
		return Verdict{"OutOfpods", fmt.Sprintf("Node didn't have enough resource: pods, requested: 1, used: %d, capacity: %d", len(active), maxPods.Value())}
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
		return Verdict{}
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
			return Verdict{"OutOf" + n, fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d",
				n, amount(name, want), amount(name, u), amount(name, capacity))}
		}
	}
	return Verdict{}
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

// Sysctls refuses a pod setting a sysctl that is neither safe nor in
// allowedUnsafe (names, or prefixes ending in *), or one that would change
// a namespace it shares with the host.
func Sysctls(allowedUnsafe []string) Handler {
	return HandlerFunc(func(a Attributes) Verdict { return checkSysctls(a.Pod, allowedUnsafe) })
}

func checkSysctls(pod *v1.Pod, allowedUnsafe []string) Verdict {
	if pod.Spec.SecurityContext == nil {
		return Verdict{}
	}
	for _, s := range pod.Spec.SecurityContext.Sysctls {
		name := strings.ReplaceAll(s.Name, "/", ".")
		if !safeSysctls[name] && !unsafeAllowed(allowedUnsafe, name) {
			return Verdict{"SysctlForbidden", fmt.Sprintf("forbidden sysctl: %q not allowlisted", s.Name)}
		}
		// A pod sharing the node's namespace must not change it.
		if pod.Spec.HostNetwork && strings.HasPrefix(name, "net.") {
			return Verdict{"SysctlForbidden", fmt.Sprintf("forbidden sysctl: %q cannot be set in a pod using the host network", s.Name)}
		}
		if pod.Spec.HostIPC && (strings.HasPrefix(name, "kernel.shm") || strings.HasPrefix(name, "kernel.msg") || strings.HasPrefix(name, "kernel.sem") || strings.HasPrefix(name, "fs.mqueue.")) {
			return Verdict{"SysctlForbidden", fmt.Sprintf("forbidden sysctl: %q cannot be set in a pod using the host IPC namespace", s.Name)}
		}
	}
	return Verdict{}
}

func unsafeAllowed(allowedUnsafe []string, name string) bool {
	for _, allowed := range allowedUnsafe {
		allowed = strings.ReplaceAll(allowed, "/", ".")
		if allowed == name || (strings.HasSuffix(allowed, "*") && strings.HasPrefix(name, strings.TrimSuffix(allowed, "*"))) {
			return true
		}
	}
	return false
}
