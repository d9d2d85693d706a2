package kuberuntime

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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
	r := linuxResources(c)
	if r.CpuShares != 256 || r.CpuQuota != 150000 || r.CpuPeriod != 100000 || r.MemoryLimitInBytes != 128<<20 {
		t.Fatalf("%+v", r)
	}
	if r := linuxResources(&v1.Container{}); r.CpuShares != 2 || r.CpuQuota != 0 || r.MemoryLimitInBytes != 0 {
		t.Fatalf("best effort %+v", r)
	}
	limitOnly := &v1.Container{Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2")}}}
	if r := linuxResources(limitOnly); r.CpuShares != 2048 {
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
	lc, err := linuxContainerConfig(pod, c, 0)
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
