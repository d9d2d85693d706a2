package admission

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/node/nodestatus"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

func admissionNode(maxPods int) *v1.Node {
	n := nodestatus.Node(nodestatus.Config{NodeName: "node1", MaxPods: maxPods, Labels: map[string]string{"zone": "a", "gpu": "yes"}},
		nodestatus.Machine{CPUs: 2, MemoryBytes: 4 << 30, EphemeralStorage: 10 << 30})
	n.Status.Allocatable["example.com/widget"] = resource.MustParse("2")
	return n
}

type podOpt func(*v1.Pod)

func mk(name string, opts ...podOpt) *v1.Pod {
	p := &v1.Pod{}
	p.UID, p.Name, p.Namespace = types.UID(name), name, "ns"
	p.Spec.Containers = []v1.Container{{Name: "c", Image: "img"}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func requests(kv ...string) podOpt {
	return func(p *v1.Pod) {
		r := v1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			r[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		p.Spec.Containers[0].Resources.Requests = r
	}
}

func draMapping(container, resourceName string) podOpt {
	return func(p *v1.Pod) {
		p.Status.ExtendedResourceClaimStatus = &v1.PodExtendedResourceClaimStatus{
			ResourceClaimName: p.Name + "-extended-resources",
			RequestMappings:   []v1.ContainerExtendedResourceRequest{{ContainerName: container, ResourceName: resourceName, RequestName: "container-0-request-0"}},
		}
	}
}

func hostPortOpt(port int32, ip string, proto v1.Protocol) podOpt {
	return func(p *v1.Pod) {
		p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, v1.ContainerPort{ContainerPort: 80, HostPort: port, HostIP: ip, Protocol: proto})
	}
}

// nodeChecks are the node's own checks, in the order the composition root
// lists them.
func nodeChecks(allowedUnsafeSysctls []string, pressure func() map[v1.NodeConditionType]string, appArmor bool) []Handler {
	return []Handler{Fields, Pressure(pressure), Sysctls(allowedUnsafeSysctls), OS, NodeName, Affinity, Taints, HostPorts, Resources, AppArmor(appArmor)}
}

func noPressure() map[v1.NodeConditionType]string { return nil }

func admitter(node *v1.Node, handlers ...Handler) *Admitter {
	return New(Options{Node: func() *v1.Node { return node }, Handlers: handlers})
}

func TestAdmission(t *testing.T) {
	a := admitter(admissionNode(3), nodeChecks([]string{"kernel.msg*", "net.core.somaxconn"}, noPressure, false)...)
	big := mk("big", requests("cpu", "1500m", "memory", "1Gi"))
	tests := []struct {
		name   string
		active []*v1.Pod
		pod    *v1.Pod
		reason string
		msg    string
	}{
		{"fits", nil, mk("p", requests("cpu", "1", "memory", "1Gi")), "", ""},
		{"best effort always fits resources", []*v1.Pod{big}, mk("p"), "", ""},
		{"too many pods", []*v1.Pod{mk("a"), mk("b"), mk("c")}, mk("p"), "OutOfpods", "pods, requested: 1, used: 3, capacity: 3"},
		{"cpu", []*v1.Pod{big}, mk("p", requests("cpu", "600m")), "OutOfcpu", "cpu, requested: 600, used: 1500, capacity: 2000"},
		{"memory", nil, mk("p", requests("memory", "5Gi")), "OutOfmemory", "memory, requested: 5368709120"},
		{"ephemeral storage", nil, mk("p", requests("ephemeral-storage", "20Gi")), "OutOfephemeral-storage", "ephemeral-storage"},
		{"extended resource", nil, mk("p", requests("example.com/widget", "3")), "OutOfexample.com/widget", "requested: 3"},
		// A resource the node does not offer at all is a cluster-level
		// one, which another component accounts for (upstream's
		// removeMissingExtendedResources).
		{"extended resource the node does not offer", nil, mk("p", requests("example.com/gizmo", "1")), "", ""},
		{"offered extended resource beside one not offered", nil, mk("p", requests("example.com/gizmo", "1", "example.com/widget", "3")), "OutOfexample.com/widget", "requested: 3"},
		{"init container's extended resource the node does not offer", nil, mk("p", func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "i", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{"example.com/gizmo": resource.MustParse("1")}}}}
		}), "", ""},
		{"a native resource is never left out", nil, mk("p", requests("hugepages-2Mi", "2Mi")), "OutOfhugepages-2Mi", "capacity: 0"},
		// The scheduler backs it with a ResourceClaim: the DRA manager
		// prepares it, the device plugin's count does not apply.
		{"extended resource backed by DRA", nil, mk("p", requests("example.com/widget", "3"), draMapping("c", "example.com/widget")), "", ""},
		{"DRA backs another container's request", nil, mk("p", requests("example.com/widget", "3"), draMapping("other", "example.com/widget")), "OutOfexample.com/widget", "requested: 3"},
		{"init container requests count", nil, mk("p", func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "i", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("3")}}}}
		}), "OutOfcpu", "requested: 3000"},
		{"host port free", []*v1.Pod{mk("a", hostPortOpt(8080, "", v1.ProtocolTCP))}, mk("p", hostPortOpt(8081, "", v1.ProtocolTCP)), "", ""},
		{"host port taken", []*v1.Pod{mk("a", hostPortOpt(8080, "", v1.ProtocolTCP))}, mk("p", hostPortOpt(8080, "", v1.ProtocolTCP)), "NodePorts", "TCP 8080 is used by pod a"},
		{"host port, other protocol", []*v1.Pod{mk("a", hostPortOpt(53, "", v1.ProtocolUDP))}, mk("p", hostPortOpt(53, "", v1.ProtocolTCP)), "", ""},
		{"host port, different IPs", []*v1.Pod{mk("a", hostPortOpt(80, "10.0.0.1", v1.ProtocolTCP))}, mk("p", hostPortOpt(80, "10.0.0.2", v1.ProtocolTCP)), "", ""},
		{"host port, wildcard IP", []*v1.Pod{mk("a", hostPortOpt(80, "10.0.0.1", v1.ProtocolTCP))}, mk("p", hostPortOpt(80, "0.0.0.0", v1.ProtocolTCP)), "NodePorts", ""},
		{"node name matches", nil, mk("p", func(p *v1.Pod) { p.Spec.NodeName = "node1" }), "", ""},
		{"bound to another node", nil, mk("p", func(p *v1.Pod) { p.Spec.NodeName = "node2" }), "NodeName", "node2"},
		{"node selector matches", nil, mk("p", func(p *v1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": "a"} }), "", ""},
		{"node selector does not match", nil, mk("p", func(p *v1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": "b"} }), "NodeAffinity", "didn't match"},
		{"required node affinity", nil, mk("p", func(p *v1.Pod) {
			p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
				NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{{Key: "gpu", Operator: v1.NodeSelectorOpDoesNotExist}}}},
			}}}
		}), "NodeAffinity", ""},
		{"pod OS", nil, mk("p", func(p *v1.Pod) { p.Spec.OS = &v1.PodOS{Name: v1.Windows} }), "PodOSNotSupported", "OS field"},
		{"OS label", nil, mk("p", func(p *v1.Pod) { p.Spec.NodeSelector = map[string]string{"kubernetes.io/os": "windows"} }), "PodOSSelectorNodeLabelDoesNotMatch", ""},
		{"safe sysctl", nil, mk("p", sysctl("net.ipv4.tcp_syncookies")), "", ""},
		{"unsafe sysctl", nil, mk("p", sysctl("kernel.panic")), "SysctlForbidden", "kernel.panic"},
		{"allowed unsafe sysctl", nil, mk("p", sysctl("net.core.somaxconn")), "", ""},
		{"allowed unsafe sysctl by prefix, slash form", nil, mk("p", sysctl("kernel/msgmax")), "", ""},
		{"net sysctl with host network", nil, mk("p", sysctl("net.ipv4.tcp_syncookies"), func(p *v1.Pod) { p.Spec.HostNetwork = true }), "SysctlForbidden", "host network"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := a.Admit(tc.active, tc.pod, false)
			switch {
			case tc.reason == "" && !r.Admitted():
				t.Fatalf("rejected: %s: %s", r.Reason, r.Message)
			case tc.reason != "" && r.Admitted():
				t.Fatalf("admitted, want %s", tc.reason)
			case !r.Admitted() && (r.Reason != tc.reason || !strings.Contains(r.Message, tc.msg)):
				t.Fatalf("got %s: %q, want %s: ...%q...", r.Reason, r.Message, tc.reason, tc.msg)
			}
		})
	}
}

func sysctl(name string) podOpt {
	return func(p *v1.Pod) {
		p.Spec.SecurityContext = &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: name, Value: "1"}}}
	}
}

// Under pressure, pods are refused as upstream's eviction manager admits
// them: memory pressure alone refuses only BestEffort pods that do not
// tolerate it; disk or PID pressure refuses all; static and critical
// pods always run.
func TestAdmissionUnderPressure(t *testing.T) {
	var pressure map[v1.NodeConditionType]string
	a := admitter(admissionNode(10), nodeChecks(nil, func() map[v1.NodeConditionType]string { return pressure }, false)...)
	bestEffort := mk("be")
	burstable := mk("burst", requests("memory", "10Mi"))
	tolerant := mk("tolerant")
	tolerant.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeMemoryPressure, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}}
	static := mk("static")
	static.Annotations = map[string]string{podutil.ConfigSourceAnnotationKey: podutil.FileSource}
	critical := mk("critical")
	critical.Spec.Priority = new(int32(podutil.SystemCriticalPriority))

	for _, tc := range []struct {
		pressure []v1.NodeConditionType
		refused  []*v1.Pod
		message  string
	}{
		{nil, nil, ""},
		{[]v1.NodeConditionType{v1.NodeMemoryPressure}, []*v1.Pod{bestEffort}, "The node had condition: [MemoryPressure]. "},
		{[]v1.NodeConditionType{v1.NodeDiskPressure}, []*v1.Pod{bestEffort, burstable, tolerant}, "The node had condition: [DiskPressure]. "},
		{[]v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodePIDPressure}, []*v1.Pod{bestEffort, burstable, tolerant}, "The node had condition: [MemoryPressure, PIDPressure]. "},
	} {
		pressure = map[v1.NodeConditionType]string{}
		for _, c := range tc.pressure {
			pressure[c] = "test"
		}
		for _, pod := range []*v1.Pod{bestEffort, burstable, tolerant, static, critical} {
			want := false
			for _, r := range tc.refused {
				want = want || r == pod
			}
			r := a.Admit(nil, pod, false)
			if got := !r.Admitted(); got != want {
				t.Errorf("%v: %s refused=%v, want %v (%+v)", tc.pressure, pod.Name, got, want, r)
				continue
			}
			if !r.Admitted() && (r.Reason != "Evicted" || r.Message != tc.message) {
				t.Errorf("%v: %s: %+v", tc.pressure, pod.Name, r)
			}
		}
	}
}

// Handlers are asked in order, and the first refusal is the pod's: one
// listed before the node's checks (the node shutting down) is asked first.
func TestHandlersAreAskedInOrder(t *testing.T) {
	var asked []string
	a := admitter(admissionNode(0), append([]Handler{
		HandlerFunc(func(a Attributes) Verdict { asked = append(asked, "first "+a.Pod.Name); return Verdict{} }),
		HandlerFunc(func(a Attributes) Verdict {
			asked = append(asked, "second "+a.Pod.Name)
			if a.Pod.Name != "refused" {
				return Verdict{}
			}
			return Reject("NodeShutdown", "Pod was rejected as the node is shutting down.")
		}),
	}, nodeChecks(nil, noPressure, false)...)...)
	if r := a.Admit(nil, mk("refused"), false); r.Admitted() || r.Reason != "NodeShutdown" || r.Message != "Pod was rejected as the node is shutting down." {
		t.Fatalf("rejection %+v", r)
	}
	// Passing every hook, the pod meets the node's checks: no room at all.
	if r := a.Admit(nil, mk("other"), false); r.Admitted() || r.Reason != "OutOfpods" {
		t.Fatalf("rejection %+v", r)
	}
	if got := strings.Join(asked, ";"); got != "first refused;second refused;first other;second other" {
		t.Fatalf("hooks asked %q", got)
	}
}

// A pod that does not tolerate one of the node's NoExecute taints is
// refused; NoSchedule taints are the scheduler's, and static pods are
// the node's own.
func TestTaintAdmission(t *testing.T) {
	node := admissionNode(110)
	node.Spec.Taints = []v1.Taint{
		{Key: "dedicated", Value: "db", Effect: v1.TaintEffectNoExecute},
		{Key: "spot", Effect: v1.TaintEffectNoSchedule},
	}
	a := admitter(node, nodeChecks(nil, noPressure, false)...)
	tolerating := mk("tolerating", func(p *v1.Pod) {
		p.Spec.Tolerations = []v1.Toleration{{Key: "dedicated", Operator: v1.TolerationOpEqual, Value: "db", Effect: v1.TaintEffectNoExecute}}
	})
	if r := a.Admit(nil, tolerating, false); !r.Admitted() {
		t.Errorf("a pod tolerating the NoExecute taint: %+v", r)
	}
	r := a.Admit(nil, mk("plain"), false)
	if r.Admitted() || r.Reason != "TaintToleration" || !strings.Contains(r.Message, "didn't tolerate") {
		t.Errorf("a pod not tolerating it: %+v, want TaintToleration", r)
	}
	static := mk("static", func(p *v1.Pod) { p.Annotations = map[string]string{"kubernetes.io/config.source": "file"} })
	if r := a.Admit(nil, static, false); !r.Admitted() {
		t.Errorf("a static pod: %+v", r)
	}
}

// A pod setting a field nodelet cannot honour is refused naming it.
func TestUnsupportedFieldAdmission(t *testing.T) {
	a := admitter(admissionNode(110), nodeChecks(nil, noPressure, false)...)
	p := mk("nfs", func(p *v1.Pod) {
		p.Spec.Volumes = []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: "s", Path: "/"}}}}
	})
	r := a.Admit(nil, p, false)
	if r.Admitted() || r.Reason != "UnsupportedPodField" || !strings.Contains(r.Message, "spec.volumes[].nfs") {
		t.Fatalf("rejection %+v, want UnsupportedPodField naming spec.volumes[].nfs", r)
	}
	if r := a.Admit(nil, mk("plain"), false); !r.Admitted() {
		t.Errorf("a plain pod: %+v", r)
	}
}

// A pod asking for a confined AppArmor profile on a host without AppArmor
// is refused at admission (Failed, reason AppArmor), as upstream's
// "AppArmor when running without AppArmor should reject a pod with an
// AppArmor profile" [NodeConformance] specs expect, whether the profile
// is in the annotation or the securityContext field; unconfined pods,
// hosts with AppArmor and pods already running are let through.
func TestAppArmorAdmission(t *testing.T) {
	a := admitter(admissionNode(3), nodeChecks(nil, noPressure, false)...)
	annotated := mk("annotated")
	annotated.Annotations = map[string]string{appArmorAnnotationPrefix + "test": "runtime/default"}
	field := mk("field")
	field.Spec.Containers[0].SecurityContext = &v1.SecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}}
	unconfined := mk("unconfined")
	unconfined.Annotations = map[string]string{appArmorAnnotationPrefix + "test": "unconfined"}
	for _, p := range []*v1.Pod{annotated, field} {
		r := a.Admit(nil, p, false)
		if r.Admitted() || r.Reason != "AppArmor" || r.Message != "Cannot enforce AppArmor: AppArmor is not enabled on the host" {
			t.Errorf("%s: %+v, want an AppArmor rejection", p.Name, r)
		}
	}
	if r := a.Admit(nil, unconfined, false); !r.Admitted() {
		t.Errorf("unconfined pod refused: %+v", r)
	}
	running := field.DeepCopy()
	running.Status.Phase = v1.PodRunning
	if r := a.Admit(nil, running, false); !r.Admitted() {
		t.Errorf("a running pod checked again: %+v", r)
	}
	a = admitter(admissionNode(3), nodeChecks(nil, noPressure, true)...)
	if r := a.Admit(nil, field, false); !r.Admitted() {
		t.Errorf("refused on a host with AppArmor: %+v", r)
	}
}
