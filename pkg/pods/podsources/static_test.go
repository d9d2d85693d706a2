package podsources

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

func TestDecodePods(t *testing.T) {
	list := `{"apiVersion":"v1","kind":"PodList","items":[` +
		`{"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"i"}]}},` +
		`{"metadata":{"name":"b"},"spec":{"containers":[{"name":"c","image":"i"}]}}]}`
	for _, tc := range []struct {
		in, err string
		n       int
	}{
		{manifest("a", "img:1"), "", 1},
		{list, "", 2},
		{"", "empty", 0},
		{"   \n", "empty", 0},
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "ConfigMap", 0},
		{"kind: Pod\nmetadata: {name: x}\n", "no apiVersion", 0},
		{"apiVersion: v1\nmetadata: {name: x}\n", "no kind", 0},
		{"apiVersion: apps/v1\nkind: Pod\nmetadata: {name: x}\n", "apps/v1", 0},
		{"{{", "decode", 0},
	} {
		pods, err := decodePods([]byte(tc.in))
		if tc.err == "" && tc.n > 0 && (err != nil || len(pods) != tc.n) {
			t.Errorf("%q: got %d pods, %v", tc.in, len(pods), err)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q: err %v, want one mentioning %q", tc.in, err, tc.err)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: error spans lines: %q", tc.in, err)
		}
	}
}

func TestDefaults(t *testing.T) {
	p := &v1.Pod{Spec: v1.PodSpec{
		Containers: []v1.Container{
			{Name: "a", Image: "img", Ports: []v1.ContainerPort{{ContainerPort: 80}},
				ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{}}}},
			{Name: "b", Image: "img:1.0"},
			{Name: "c", Image: "img:latest"},
			{Name: "d", Image: "img@sha256:abc"},
		},
		Volumes: []v1.Volume{{Name: "v"}},
	}}
	setDefaults(p)
	s := p.Spec
	if s.RestartPolicy != v1.RestartPolicyAlways || s.DNSPolicy != v1.DNSClusterFirst || *s.TerminationGracePeriodSeconds != 30 ||
		s.SchedulerName != "default-scheduler" || !*s.EnableServiceLinks || s.SecurityContext == nil {
		t.Errorf("pod defaults: %+v", s)
	}
	for i, want := range []v1.PullPolicy{v1.PullAlways, v1.PullIfNotPresent, v1.PullAlways, v1.PullIfNotPresent} {
		if got := s.Containers[i].ImagePullPolicy; got != want {
			t.Errorf("container %s pull policy %s, want %s", s.Containers[i].Name, got, want)
		}
	}
	a := s.Containers[0]
	if a.TerminationMessagePath != "/dev/termination-log" || a.TerminationMessagePolicy != v1.TerminationMessageReadFile ||
		a.Ports[0].Protocol != v1.ProtocolTCP {
		t.Errorf("container defaults: %+v", a)
	}
	if r := a.ReadinessProbe; r.PeriodSeconds != 10 || r.TimeoutSeconds != 1 || r.FailureThreshold != 3 || r.SuccessThreshold != 1 ||
		r.HTTPGet.Path != "/" || r.HTTPGet.Scheme != v1.URISchemeHTTP {
		t.Errorf("probe defaults: %+v", r)
	}
	if s.Volumes[0].EmptyDir == nil {
		t.Error("a volume without a source is not an emptyDir")
	}
}

func TestValidation(t *testing.T) {
	valid := func() *v1.Pod {
		p := &v1.Pod{}
		p.Name = "ok"
		p.Spec.Containers = []v1.Container{{Name: "c", Image: "img"}}
		setDefaults(p)
		return p
	}
	if err := Validate(valid(), "node1").ToAggregate(); err != nil {
		t.Fatalf("valid pod: %v", err)
	}
	relaxed := valid()
	relaxed.Spec.Containers[0].Env = []v1.EnvVar{{Name: "1st-key.v2"}, {Name: "with space"}}
	relaxed.Spec.Containers[0].EnvFrom = []v1.EnvFromSource{{Prefix: "9-", ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}}}}
	if err := Validate(relaxed, "node1").ToAggregate(); err != nil {
		t.Fatalf("relaxed environment variable names: %v", err)
	}
	for _, tc := range []struct {
		want   string
		mutate func(p *v1.Pod)
	}{
		{"metadata.name", func(p *v1.Pod) { p.Name = "" }},
		{"metadata.name", func(p *v1.Pod) { p.Name = "UPPER" }},
		{"metadata.namespace", func(p *v1.Pod) { p.Namespace = "a.b" }},
		{"spec.containers: Required", func(p *v1.Pod) { p.Spec.Containers = nil }},
		{"spec.containers[0].name", func(p *v1.Pod) { p.Spec.Containers[0].Name = "Bad" }},
		{"Duplicate value", func(p *v1.Pod) { p.Spec.Containers = append(p.Spec.Containers, p.Spec.Containers[0]) }},
		{"Duplicate value", func(p *v1.Pod) { p.Spec.InitContainers = []v1.Container{p.Spec.Containers[0]} }},
		{"image", func(p *v1.Pod) { p.Spec.Containers[0].Image = " " }},
		{"restartPolicy", func(p *v1.Pod) { p.Spec.RestartPolicy = "Sometimes" }},
		{"spec.containers[0].env[0].name", func(p *v1.Pod) { p.Spec.Containers[0].Env = []v1.EnvVar{{Name: "A=B"}} }},
		{"spec.containers[0].env[0].name", func(p *v1.Pod) { p.Spec.Containers[0].Env = []v1.EnvVar{{Name: ""}} }},
		{"spec.containers[0].envFrom[0].prefix", func(p *v1.Pod) { p.Spec.Containers[0].EnvFrom = []v1.EnvFromSource{{Prefix: "é"}} }},
		{"containerPort", func(p *v1.Pod) {
			p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 70000, Protocol: "TCP"}}
		}},
		{"hostPort", func(p *v1.Pod) {
			p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 80, HostPort: -1, Protocol: "TCP"}}
		}},
		{"protocol", func(p *v1.Pod) {
			p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 80, Protocol: "ICMP"}}
		}},
		{"volumeMounts[0].name", func(p *v1.Pod) { p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "nope", MountPath: "/x"}} }},
		{"spec.volumes[0].hostPath.path: Invalid value: \"/a/../etc\": must not contain '..'", func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/a/../etc"}}}}
		}},
		{"spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1", func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: *qty("2")}
			p.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceCPU: *qty("1")}
		}},
		// The security checks: an unmasked /proc needs a user namespace.
		{"spec.containers[0].securityContext.procMount: Invalid value: \"Unmasked\": `hostUsers` must be false to use `Unmasked`", func(p *v1.Pod) {
			p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{ProcMount: new(v1.UnmaskedProcMount)}
		}},
		{"spec.containers[0].securityContext.procMount: Unsupported value", func(p *v1.Pod) {
			p.Spec.HostUsers = new(false)
			p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{ProcMount: new(v1.ProcMountType("Raw"))}
		}},
		{"spec.containers[0].securityContext.runAsUser: Invalid value: -1", func(p *v1.Pod) {
			p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{RunAsUser: new(int64(-1))}
		}},
		{"spec.securityContext.runAsGroup: Invalid value: 4294967296", func(p *v1.Pod) {
			p.Spec.SecurityContext.RunAsGroup = new(int64(1 << 32))
		}},
		{"spec.securityContext.supplementalGroups[1]", func(p *v1.Pod) { p.Spec.SecurityContext.SupplementalGroups = []int64{1, -5} }},
		{"spec.securityContext.fsGroup", func(p *v1.Pod) { p.Spec.SecurityContext.FSGroup = new(int64(-2)) }},
		{"spec.securityContext.sysctls[0].name: Invalid value: \"Kernel.X\": must have at most 253 characters", func(p *v1.Pod) {
			p.Spec.SecurityContext.Sysctls = []v1.Sysctl{{Name: "Kernel.X", Value: "1"}}
		}},
		{"spec.securityContext.sysctls[1].name: Duplicate value", func(p *v1.Pod) {
			p.Spec.SecurityContext.Sysctls = []v1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "1"}, {Name: "kernel.shm_rmid_forced", Value: "0"}}
		}},
		{"spec.securityContext.sysctls[0].name: Invalid value: \"net.ipv4.ip_forward\": may not be specified when 'hostNetwork' is true", func(p *v1.Pod) {
			p.Spec.HostNetwork = true
			p.Spec.SecurityContext.Sysctls = []v1.Sysctl{{Name: "net.ipv4.ip_forward", Value: "1"}}
		}},
		{"spec.hostNetwork: Forbidden: when `hostUsers` is false", func(p *v1.Pod) { p.Spec.HostUsers = new(false); p.Spec.HostNetwork = true }},
		{"spec.HostPID: Forbidden: when `hostUsers` is false", func(p *v1.Pod) { p.Spec.HostUsers = new(false); p.Spec.HostPID = true }},
		{"spec.HostIPC: Forbidden: when `hostUsers` is false", func(p *v1.Pod) { p.Spec.HostUsers = new(false); p.Spec.HostIPC = true }},
		{"spec.shareProcessNamespace: Invalid value: true: ShareProcessNamespace and HostPID cannot both be enabled", func(p *v1.Pod) {
			p.Spec.HostPID, p.Spec.ShareProcessNamespace = true, new(true)
		}},
		{"cannot set `allowPrivilegeEscalation` to false and `privileged` to true", func(p *v1.Pod) {
			p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{AllowPrivilegeEscalation: new(false), Privileged: new(true)}
		}},
		// The volumes nodelet writes into: every item stays beneath it.
		{"spec.volumes[0].downwardAPI.path: Invalid value: \"../../escape\": must not contain '..'", func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{
				Items: []v1.DownwardAPIVolumeFile{{Path: "../../escape", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}}}
		}},
		{"spec.volumes[0].configMap.items[0].path: Invalid value: \"/etc/passwd\": must be a relative path", func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
				LocalObjectReference: v1.LocalObjectReference{Name: "cm"}, Items: []v1.KeyToPath{{Key: "k", Path: "/etc/passwd"}}}}}}
		}},
		{"spec.volumes[0].secret.items[0].path: Invalid value: \"..data\": must not start with '..'", func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{
				SecretName: "s", Items: []v1.KeyToPath{{Key: "k", Path: "..data"}}}}}}
		}},
		{"spec.volumes[0].projected.sources[1].configMap.items[0].path: Invalid value: \"a/../../b\": must not contain '..'", func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
				{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}},
				{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}, Items: []v1.KeyToPath{{Key: "k", Path: "a/../../b"}}}},
			}}}}}
		}},
		{"spec.volumes[0].projected.path: Invalid value: \"/token\": must be a relative path", func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
				{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "/token", ExpirationSeconds: new(int64(3600))}},
			}}}}}
		}},
		{"spec.volumes[0].configMap.defaultMode: Invalid value: 512: must be a number between 0 and 0777", func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
				LocalObjectReference: v1.LocalObjectReference{Name: "cm"}, DefaultMode: new(int32(0o1000))}}}}
		}},
	} {
		p := valid()
		tc.mutate(p)
		err := Validate(p, "node1").ToAggregate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want an error mentioning %q, got %v", tc.want, err)
		}
	}
}

// FuzzDecodeManifest feeds arbitrary bytes through everything a manifest
// goes through: garbage must produce an error, never a panic or a hang.
func FuzzDecodeManifest(f *testing.F) {
	f.Add([]byte(manifest("a", "img:1")))
	f.Add([]byte(`{"apiVersion":"v1","kind":"PodList","items":[{"metadata":{"name":"a"}}]}`))
	f.Add([]byte("apiVersion: v1\nkind: Pod\nmetadata: {name: [x\n"))
	f.Add([]byte("apiVersion: v1\nkind: Pod\nspec:\n  containers: [{name: c, image: i, ports: [{containerPort: 99999999999}]}]\n"))
	f.Add([]byte("a: &a [*a, *a]\nb: *a\n"))
	f.Add([]byte{0xff, 0xfe, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		pods, err := decodePods(data)
		if err != nil {
			return
		}
		for _, p := range pods {
			if _, err := staticPod(p, "node", "/etc/manifests/x.yaml", true); err != nil {
				continue // refused with an error: what garbage should get
			}
		}
	})
}

func qty(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

// nodelet names a static pod as the upstream kubelet does: for every
// manifest in testdata/staticuid, the UID equals the one upstream's own
// file source gave it (golden.txt, written by hack/cluster/tools/staticuid
// from k8s.io/kubernetes v1.37), so a node moved between the two agents
// keeps its static pods. A pod that v1.35 or v1.36 started (golden-v1.NN.txt,
// by the same program in hack/cluster/kubelet-v1.NN) and that runs when
// nodelet starts keeps the UID that kubelet gave it.
func TestStaticPodUIDIsUpstreams(t *testing.T) {
	const dir = "/tmp/nodelet-staticuid/manifests" // the path the golden files were made with
	golden := func(file string) map[string]string {
		data, err := os.ReadFile(filepath.Join("testdata/staticuid", file))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if name, uid, ok := strings.Cut(l, " "); ok && !strings.HasPrefix(l, "#") {
				want[name] = uid
			}
		}
		return want
	}
	current := golden("golden.txt")
	older := map[string]map[string]string{"v1.35": golden("golden-v1.35.txt"), "v1.36": golden("golden-v1.36.txt")}
	files, err := filepath.Glob("testdata/staticuid/*.*")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".txt") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pods, err := decodePods(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		source := filepath.Join(dir, filepath.Base(f))
		name := func(running ...string) *v1.Pod {
			set := map[types.UID]bool{"unrelated": true}
			for _, uid := range running {
				set[types.UID(uid)] = true
			}
			p, err := Static{NodeName: "node-a", Running: set}.pod(pods[0], source, true)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			return p
		}
		check := func(p *v1.Pod, want, who string) {
			t.Helper()
			if string(p.UID) != want || p.Annotations[podutil.ConfigHashAnnotationKey] != want {
				t.Errorf("%s: UID %s (hash annotation %s), %s's is %q", f, p.UID, p.Annotations[podutil.ConfigHashAnnotationKey], who, want)
			}
		}
		p := name()
		check(p, current[p.Name], "the upstream kubelet v1.37")
		// A pod an earlier nodelet started (its MD5 naming) keeps its UID.
		defaulted := pods[0].DeepCopy()
		setDefaults(defaulted)
		if legacy := string(legacyStaticUID(defaulted, "node-a", source, true)); pods[0].UID == "" {
			check(name(legacy), legacy, "an earlier nodelet")
		}
		for version, uids := range older {
			check(name(uids[p.Name]), uids[p.Name], "the running pod of the upstream kubelet "+version)
			// The pod v1.37 named runs too: that one stays.
			check(name(uids[p.Name], current[p.Name]), current[p.Name], "the upstream kubelet v1.37")
			if len(uids) != len(current) {
				t.Errorf("golden files of v1.37 and %s list different manifests", version)
			}
		}
		checked++
	}
	if checked != len(current) || checked < 6 {
		t.Fatalf("checked %d manifests, golden.txt has %d", checked, len(current))
	}
}
