package kuberuntime

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/pkg/runtime/container"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestOOMScoreAdj(t *testing.T) {
	mem := func(req, lim string) v1.ResourceRequirements {
		r := v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}
		if req != "" {
			r.Requests[v1.ResourceMemory] = resource.MustParse(req)
		}
		if lim != "" {
			r.Limits[v1.ResourceMemory] = resource.MustParse(lim)
			r.Limits[v1.ResourceCPU] = resource.MustParse("1")
			r.Requests[v1.ResourceCPU] = resource.MustParse("1")
		}
		return r
	}
	capacity := int64(10 << 30)
	for _, tc := range []struct {
		res  v1.ResourceRequirements
		want int64
	}{
		{mem("1Gi", "1Gi"), -997}, // Guaranteed
		{v1.ResourceRequirements{}, 1000},
		{mem("5Gi", ""), 500},
		{mem("10Gi", ""), 3},
		{mem("1", ""), 999},
	} {
		p := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: tc.res}}}}
		if got := oomScoreAdj(p, &p.Spec.Containers[0], capacity); got != tc.want {
			t.Errorf("%+v: %d, want %d", tc.res, got, tc.want)
		}
	}
}

func TestRunAsNonRoot(t *testing.T) {
	yes := true
	zero, uid := int64(0), int64(1000)
	pod := &v1.Pod{Spec: v1.PodSpec{SecurityContext: &v1.PodSecurityContext{RunAsNonRoot: &yes}}}
	c := &v1.Container{Name: "c"}
	sc := func(u *int64) *runtimeapi.LinuxContainerSecurityContext {
		s := &runtimeapi.LinuxContainerSecurityContext{}
		if u != nil {
			s.RunAsUser = &runtimeapi.Int64Value{Value: *u}
		}
		return s
	}
	img := func(uid *int64, name string) *runtimeapi.Image {
		i := &runtimeapi.Image{Username: name}
		if uid != nil {
			i.Uid = &runtimeapi.Int64Value{Value: *uid}
		}
		return i
	}
	for _, tc := range []struct {
		sc   *runtimeapi.LinuxContainerSecurityContext
		img  *runtimeapi.Image
		want string
	}{
		{sc(&uid), img(&zero, ""), ""},
		{sc(&zero), img(&uid, ""), "runAsUser breaks non-root policy"},
		{sc(nil), img(&zero, ""), "image will run as root"},
		{sc(nil), img(nil, ""), "image will run as root"},
		{sc(nil), img(nil, "nobody"), "non-numeric user (nobody)"},
		{sc(nil), img(&uid, ""), ""},
	} {
		err := verifyRunAsNonRoot(pod, c, tc.sc, tc.img)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("runAsUser %v image %+v: %v, want %q", tc.sc.RunAsUser, tc.img, err, tc.want)
		}
	}
	// Without runAsNonRoot, root is fine.
	if err := verifyRunAsNonRoot(&v1.Pod{}, c, sc(&zero), img(&zero, "")); err != nil {
		t.Fatal(err)
	}
}

func TestLinuxResources(t *testing.T) {
	c := &v1.Container{Resources: v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("1500m"), v1.ResourceMemory: resource.MustParse("128Mi")},
	}}
	r := linuxResources(nil, c)
	if r.CpuShares != 256 || r.CpuQuota != 150000 || r.CpuPeriod != 100000 || r.MemoryLimitInBytes != 128<<20 {
		t.Fatalf("%+v", r)
	}
	if r := linuxResources(nil, &v1.Container{}); r.CpuShares != 2 || r.CpuQuota != 0 || r.MemoryLimitInBytes != 0 {
		t.Fatalf("best effort %+v", r)
	}
	limitOnly := &v1.Container{Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2")}}}
	if r := linuxResources(nil, limitOnly); r.CpuShares != 2048 {
		t.Fatalf("a limit without a request: shares %d", r.CpuShares)
	}
}

func TestSecurityContextTranslation(t *testing.T) {
	u, g, cu, fs := int64(1000), int64(2000), int64(3000), int64(4000)
	no, yes := false, true
	pod := &v1.Pod{Spec: v1.PodSpec{SecurityContext: &v1.PodSecurityContext{
		RunAsUser: &u, RunAsGroup: &g, SupplementalGroups: []int64{5000}, FSGroup: &fs,
	}}}
	c := &v1.Container{SecurityContext: &v1.SecurityContext{
		RunAsUser: &cu, AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
		Capabilities: &v1.Capabilities{Add: []v1.Capability{"net_admin", "CAP_SYS_TIME"}, Drop: []v1.Capability{"ALL"}},
	}}
	lc, err := linuxContainerConfig(pod, c, 0, Security{})
	if err != nil {
		t.Fatal(err)
	}
	sc := lc.SecurityContext
	if sc.RunAsUser.GetValue() != cu || sc.RunAsGroup.GetValue() != g {
		t.Errorf("user %v group %v: the container's user wins, the pod's group fills in", sc.RunAsUser, sc.RunAsGroup)
	}
	if fmt.Sprint(sc.SupplementalGroups) != "[5000 4000]" {
		t.Errorf("supplemental groups %v, want the pod's and fsGroup", sc.SupplementalGroups)
	}
	if !sc.NoNewPrivs || !sc.ReadonlyRootfs {
		t.Errorf("noNewPrivs %v readonlyRootfs %v", sc.NoNewPrivs, sc.ReadonlyRootfs)
	}
	// Runtimes add the CAP_ prefix themselves.
	if got := fmt.Sprint(sc.Capabilities.AddCapabilities, sc.Capabilities.DropCapabilities); got != "[NET_ADMIN SYS_TIME] [ALL]" {
		t.Errorf("capabilities %s", got)
	}
}

// Seccomp: the container's profile, else the pod's, else the node's
// default (seccompDefault: RuntimeDefault; otherwise Unconfined, said
// explicitly); Localhost profiles live under the node's seccomp root.
func TestSeccompProfiles(t *testing.T) {
	local := func(name string) *v1.SeccompProfile {
		return &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: &name}
	}
	rd := &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}
	un := &v1.SeccompProfile{Type: v1.SeccompProfileTypeUnconfined}
	for _, tc := range []struct {
		name           string
		def            bool
		pod, container *v1.SeccompProfile
		want           string
	}{
		{"none", false, nil, nil, "Unconfined "},
		{"seccompDefault", true, nil, nil, "RuntimeDefault "},
		{"pod's", true, un, nil, "Unconfined "},
		{"container's over pod's", false, un, rd, "RuntimeDefault "},
		{"localhost", true, nil, local("audit.json"), "Localhost /var/lib/kubelet/seccomp/audit.json"},
		{"localhost nested", false, local("profiles/a.json"), nil, "Localhost /var/lib/kubelet/seccomp/profiles/a.json"},
		{"localhost escaping", false, nil, local("../../etc/x"), "error"},
		{"localhost absolute", false, nil, local("/etc/x"), "error"},
		{"localhost empty", false, nil, local(""), "error"},
	} {
		pod := &v1.Pod{Spec: v1.PodSpec{SecurityContext: &v1.PodSecurityContext{SeccompProfile: tc.pod}}}
		c := &v1.Container{SecurityContext: &v1.SecurityContext{SeccompProfile: tc.container}}
		lc, err := linuxContainerConfig(pod, c, 0, Security{SeccompDefault: tc.def, SeccompRoot: "/var/lib/kubelet/seccomp"})
		got := "error"
		if err == nil {
			got = lc.SecurityContext.Seccomp.ProfileType.String() + " " + lc.SecurityContext.Seccomp.LocalhostRef
		}
		if got != tc.want {
			t.Errorf("%s: %q (%v), want %q", tc.name, got, err, tc.want)
		}
	}
}

// AppArmor, SELinux, supplementalGroupsPolicy and procMount reach the
// runtime as upstream passes them.
func TestSecurityFieldsPassedThrough(t *testing.T) {
	prof := "k8s-nginx"
	strict := v1.SupplementalGroupsPolicyStrict
	unmasked := v1.UnmaskedProcMount
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "annotated": "localhost/from-annotation",
		}},
		Spec: v1.PodSpec{SecurityContext: &v1.PodSecurityContext{
			AppArmorProfile:          &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeUnconfined},
			SELinuxOptions:           &v1.SELinuxOptions{User: "u", Role: "r", Type: "t", Level: "s0:c1,c2"},
			SupplementalGroupsPolicy: &strict,
		}},
	}
	for _, tc := range []struct {
		c                  *v1.Container
		apparmor, selinux  string
		masked, deprecated string
	}{
		{&v1.Container{Name: "plain"}, "Unconfined ", "t", "defaults", "unconfined"},
		{&v1.Container{Name: "annotated"}, "Localhost from-annotation", "t", "defaults", "localhost/from-annotation"},
		{&v1.Container{Name: "own", SecurityContext: &v1.SecurityContext{
			AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeLocalhost, LocalhostProfile: &prof},
			SELinuxOptions:  &v1.SELinuxOptions{Type: "own_t"},
			ProcMount:       &unmasked,
		}}, "Localhost k8s-nginx", "own_t", "[]", "localhost/k8s-nginx"},
	} {
		lc, err := linuxContainerConfig(pod, tc.c, 0, Security{})
		if err != nil {
			t.Fatal(err)
		}
		sc := lc.SecurityContext
		if got := sc.Apparmor.ProfileType.String() + " " + sc.Apparmor.LocalhostRef; got != tc.apparmor || sc.ApparmorProfile != tc.deprecated {
			t.Errorf("%s: AppArmor %q %q, want %q %q", tc.c.Name, got, sc.ApparmorProfile, tc.apparmor, tc.deprecated)
		}
		if sc.SelinuxOptions.GetType() != tc.selinux {
			t.Errorf("%s: SELinux %+v, want type %s", tc.c.Name, sc.SelinuxOptions, tc.selinux)
		}
		masked := fmt.Sprint(sc.MaskedPaths)
		if slices.Contains(sc.MaskedPaths, "/proc/kcore") && slices.Contains(sc.ReadonlyPaths, "/proc/sys") {
			masked = "defaults"
		}
		if masked != tc.masked {
			t.Errorf("%s: masked paths %s, want %s", tc.c.Name, masked, tc.masked)
		}
		if sc.SupplementalGroupsPolicy != runtimeapi.SupplementalGroupsPolicy_Strict {
			t.Errorf("%s: supplementalGroupsPolicy %v", tc.c.Name, sc.SupplementalGroupsPolicy)
		}
	}
	if lc, _ := linuxContainerConfig(&v1.Pod{}, &v1.Container{Name: "c"}, 0, Security{}); lc.SecurityContext.Apparmor != nil ||
		lc.SecurityContext.SelinuxOptions != nil || lc.SecurityContext.SupplementalGroupsPolicy != runtimeapi.SupplementalGroupsPolicy_Merge {
		t.Errorf("a pod without settings: %+v", lc.SecurityContext)
	}
}

// An ephemeral container with a targetContainerName joins its running
// target's PID namespace; a target not running keeps it from starting.
func TestTargetPIDNamespace(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{EphemeralContainers: []v1.EphemeralContainer{
		{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debug"}, TargetContainerName: "app"},
		{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "plain"}},
	}}}
	cfg := func() *runtimeapi.ContainerConfig {
		return &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: namespaceOptions(pod)}}}
	}
	running := &container.PodStatus{ContainerStatuses: []*container.Status{
		{Name: "app", State: container.StateRunning, ID: container.ContainerID{Type: "containerd", ID: "abc"}}}}
	c := cfg()
	if err := targetPIDNamespace(pod, "debug", running, c); err != nil {
		t.Fatal(err)
	}
	if ns := c.Linux.SecurityContext.NamespaceOptions; ns.Pid != runtimeapi.NamespaceMode_TARGET || ns.TargetId != "abc" {
		t.Errorf("namespaces %+v, want the target's PID namespace", ns)
	}
	c = cfg()
	if err := targetPIDNamespace(pod, "plain", running, c); err != nil || c.Linux.SecurityContext.NamespaceOptions.Pid != runtimeapi.NamespaceMode_CONTAINER {
		t.Errorf("without a target: %v %+v", err, c.Linux.SecurityContext.NamespaceOptions)
	}
	exited := &container.PodStatus{ContainerStatuses: []*container.Status{{Name: "app", State: container.StateExited}}}
	if err := targetPIDNamespace(pod, "debug", exited, cfg()); err == nil || !strings.Contains(err.Error(), `targetContainerName "app"`) {
		t.Errorf("an exited target: %v", err)
	}
}

// A container without a limit takes the pod-level one for its cgroup.
func TestPodLevelLimitsReachContainers(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{Resources: &v1.ResourceRequirements{Limits: v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("1Gi")}}}}
	own := &v1.Container{Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("256Mi")}}}
	if r := linuxResources(pod, own); r.MemoryLimitInBytes != 256<<20 || r.CpuQuota != 200000 {
		t.Errorf("own memory limit, pod's CPU: %+v", r)
	}
	if r := linuxResources(pod, &v1.Container{}); r.MemoryLimitInBytes != 1<<30 || r.CpuQuota != 200000 {
		t.Errorf("no limits: %+v, want the pod's", r)
	}
}
