package podutil

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestFullName(t *testing.T) {
	p := &v1.Pod{}
	p.Name, p.Namespace = "web-node1", "kube-system"
	full := FullName(p)
	name, ns, err := ParseFullName(full)
	if err != nil || name != p.Name || ns != p.Namespace {
		t.Fatalf("round trip of %q: %q %q %v", full, name, ns, err)
	}
	for _, bad := range []string{"", "noseparator", "_ns", "name_", "a_b_c"} {
		if _, _, err := ParseFullName(bad); err == nil {
			t.Errorf("ParseFullName(%q) succeeded", bad)
		}
	}
}

func TestSourceKinds(t *testing.T) {
	p := &v1.Pod{}
	if IsStatic(p) || IsMirror(p) {
		t.Fatal("a pod without annotations is neither static nor a mirror")
	}
	p.Annotations = map[string]string{ConfigSourceAnnotationKey: FileSource}
	if !IsStatic(p) {
		t.Fatal("file pod not static")
	}
	p.Annotations[ConfigSourceAnnotationKey] = APISource
	if IsStatic(p) {
		t.Fatal("API pod static")
	}
	p.Annotations[ConfigMirrorAnnotationKey] = "hash"
	if !IsMirror(p) {
		t.Fatal("mirror not recognised")
	}
}

func TestDefaultPullPolicy(t *testing.T) {
	for image, want := range map[string]v1.PullPolicy{
		"busybox":                         v1.PullAlways,
		"busybox:latest":                  v1.PullAlways,
		"busybox:1.36":                    v1.PullIfNotPresent,
		"localhost:5000/busybox":          v1.PullAlways,
		"localhost:5000/busybox:1":        v1.PullIfNotPresent,
		"busybox@sha256:0123456789abcdef": v1.PullIfNotPresent,
		"busybox:latest@sha256:" + strings.Repeat("a", 64): v1.PullAlways,
		"busybox@sha256:" + strings.Repeat("a", 64):        v1.PullIfNotPresent,
		"Busybox": v1.PullIfNotPresent, // not a reference: no tag
	} {
		if got := DefaultPullPolicy(image); got != want {
			t.Errorf("%s: %s, want %s", image, got, want)
		}
	}
}

func TestGracePeriodSeconds(t *testing.T) {
	p := &v1.Pod{}
	if GracePeriodSeconds(p) != 30 {
		t.Fatal("default is not 30")
	}
	spec, del := int64(10), int64(3)
	p.Spec.TerminationGracePeriodSeconds = &spec
	if GracePeriodSeconds(p) != 10 {
		t.Fatal("spec ignored")
	}
	p.DeletionGracePeriodSeconds = &del
	if GracePeriodSeconds(p) != 3 {
		t.Fatal("deletion grace period ignored")
	}
}

// A container's restart rules decide first (the first whose exit codes
// match), then its own restartPolicy, then the pod's.
func TestContainerShouldRestart(t *testing.T) {
	pol := func(p v1.ContainerRestartPolicy) *v1.ContainerRestartPolicy { return &p }
	rule := func(op v1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) v1.ContainerRestartRule {
		return v1.ContainerRestartRule{Action: v1.ContainerRestartRuleActionRestart,
			ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes}}
	}
	retryable := &v1.Container{RestartPolicy: pol(v1.ContainerRestartPolicyNever),
		RestartPolicyRules: []v1.ContainerRestartRule{rule(v1.ContainerRestartRuleOnExitCodesOpIn, 42, 43)}}
	notIn := &v1.Container{RestartPolicy: pol(v1.ContainerRestartPolicyNever),
		RestartPolicyRules: []v1.ContainerRestartRule{rule(v1.ContainerRestartRuleOnExitCodesOpNotIn, 0, 1)}}
	always := &v1.Container{RestartPolicy: pol(v1.ContainerRestartPolicyAlways)}
	onFailure := &v1.Container{RestartPolicy: pol(v1.ContainerRestartPolicyOnFailure)}
	plain := &v1.Container{}
	for _, tc := range []struct {
		name   string
		c      *v1.Container
		pod    v1.RestartPolicy
		code   int32
		expect bool
	}{
		{"rule In matches", retryable, v1.RestartPolicyAlways, 42, true},
		{"rule In misses: the container's Never", retryable, v1.RestartPolicyAlways, 1, false},
		{"rule NotIn matches", notIn, v1.RestartPolicyNever, 7, true},
		{"rule NotIn misses", notIn, v1.RestartPolicyNever, 1, false},
		{"container Always in a Never pod", always, v1.RestartPolicyNever, 0, true},
		{"container OnFailure, success", onFailure, v1.RestartPolicyAlways, 0, false},
		{"container OnFailure, failure", onFailure, v1.RestartPolicyNever, 3, true},
		{"pod Never", plain, v1.RestartPolicyNever, 3, false},
		{"pod OnFailure, success", plain, v1.RestartPolicyOnFailure, 0, false},
		{"pod Always", plain, v1.RestartPolicyAlways, 0, true},
	} {
		if got := ContainerShouldRestart(tc.c, &v1.PodSpec{RestartPolicy: tc.pod}, tc.code); got != tc.expect {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.expect)
		}
	}
}

// Pod-level resources decide the QoS class alone, as upstream computes it.
func TestPodLevelQOSClass(t *testing.T) {
	rl := func(kv ...string) v1.ResourceList {
		out := v1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			out[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return out
	}
	// The containers alone would be BestEffort.
	pod := func(req, lim v1.ResourceList) *v1.Pod {
		return &v1.Pod{Spec: v1.PodSpec{Resources: &v1.ResourceRequirements{Requests: req, Limits: lim},
			Containers: []v1.Container{{Name: "a"}}}}
	}
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want v1.PodQOSClass
	}{
		{"limits equal requests", pod(rl("cpu", "1", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi")), v1.PodQOSGuaranteed},
		{"limits only", pod(nil, rl("cpu", "1", "memory", "1Gi")), v1.PodQOSGuaranteed},
		{"cpu limit only", pod(nil, rl("cpu", "1")), v1.PodQOSBurstable},
		{"requests below limits", pod(rl("cpu", "500m", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi")), v1.PodQOSBurstable},
		{"requests only", pod(rl("memory", "1Gi"), nil), v1.PodQOSBurstable},
		{"empty", pod(nil, nil), v1.PodQOSBestEffort},
	} {
		if got := QOSClass(tc.pod); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestIsExtendedResourceName(t *testing.T) {
	for name, want := range map[v1.ResourceName]bool{
		"example.com/widget":                       true,
		"nvidia.com/gpu":                           true,
		"cpu":                                      false, // native, no domain
		"hugepages-2Mi":                            false,
		"kubernetes.io/widget":                     false, // the native domain
		"sub.kubernetes.io/widget":                 false,
		"deviceclass.resource.kubernetes.io/gpu":   false,
		"requests.example.com/widget":              false, // a quota's name
		"example.com/bad name":                     false,
		"example.com/" + v1.ResourceName(longName): false,
	} {
		if got := IsExtendedResourceName(name); got != want {
			t.Errorf("IsExtendedResourceName(%q) = %v, want %v", name, got, want)
		}
	}
}

var longName = strings.Repeat("x", 64)
