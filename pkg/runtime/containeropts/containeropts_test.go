package containeropts

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testutil"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/volumetest"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/volumes/volume"
)

func clusterOptions(t *testing.T) (*Provider, *volumetest.Objects) {
	t.Helper()
	api := volumetest.New(testingclock.NewFakeClock(time.Unix(1000, 0)))
	o := New(Options{RootDir: t.TempDir(), NodeName: "n1", HostIPs: []string{"192.0.2.1"},
		Objects: api, DNS: DNS{ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local"},
		Allocatable: func() v1.ResourceList { return v1.ResourceList{v1.ResourceCPU: resource.MustParse("2")} },
		Recorder:    record.NewFakeRecorder(10)})
	return o, api
}

// events drains what o recorded.
func events(o *Provider) []string {
	var out []string
	r := o.recorder.(*record.FakeRecorder)
	for len(r.Events) > 0 {
		out = append(out, <-r.Events)
	}
	return out
}

func envMap(kvs []*runtimeapi.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		out[kv.Key] = string(kv.Value)
	}
	return out
}

func TestEnvironment(t *testing.T) {
	o, api := clusterOptions(t)
	api.SetConfigMap("cfg", map[string]string{"MODE": "fast", "LEVEL": "3", "bad-name=": "x", "1st-key.v2": "relaxed"})
	api.SetConfigMap("raw", map[string]string{"9lives": "cat", "with space": "ok", "tab\tkey": "no"})
	api.SetSecret("creds", map[string][]byte{"password": []byte("hunter2")})
	api.Svcs = []*v1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default"}, Spec: v1.ServiceSpec{ClusterIP: "10.96.0.1", Ports: []v1.ServicePort{{Name: "https", Port: 443, Protocol: v1.ProtocolTCP}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "redis-main", Namespace: "ns"}, Spec: v1.ServiceSpec{ClusterIP: "10.96.0.7", Ports: []v1.ServicePort{{Port: 6379}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "headless", Namespace: "ns"}, Spec: v1.ServiceSpec{ClusterIP: "None", Ports: []v1.ServicePort{{Port: 80}}}},
	}
	c := v1.Container{Name: "main",
		Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}},
		EnvFrom: []v1.EnvFromSource{
			{Prefix: "CFG_", ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}},
			{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "raw"}}},
		},
		Env: []v1.EnvVar{
			{Name: "PASSWORD", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "creds"}, Key: "password"}}},
			{Name: "MODE", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Key: "MODE"}}},
			{Name: "MAYBE", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "absent"}, Key: "x", Optional: new(true)}}},
			{Name: "POD_IP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			{Name: "CPU_LIMIT", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.cpu"}}},
			{Name: "MEM_REQUEST_MI", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "requests.memory", Divisor: resource.MustParse("1Mi")}}},
			{Name: "URL", Value: "redis://$(REDIS_MAIN_SERVICE_HOST):$(REDIS_MAIN_SERVICE_PORT)/$(CFG_LEVEL)"},
		},
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}, Spec: v1.PodSpec{Containers: []v1.Container{c}}}
	kvs, _, err := o.env(context.Background(), pod, &pod.Spec.Containers[0], []string{"10.1.0.5"})
	if err != nil {
		t.Fatal(err)
	}
	got := envMap(kvs)
	for k, want := range map[string]string{
		"CFG_MODE": "fast", "CFG_LEVEL": "3", "PASSWORD": "hunter2", "MODE": "fast", "POD_IP": "10.1.0.5",
		"CPU_LIMIT": "2", "MEM_REQUEST_MI": "64", "URL": "redis://10.96.0.7:6379/3",
		"CFG_1st-key.v2": "relaxed", "9lives": "cat", "with space": "ok",
		"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443", "KUBERNETES_SERVICE_PORT_HTTPS": "443",
		"KUBERNETES_PORT": "tcp://10.96.0.1:443", "KUBERNETES_PORT_443_TCP_ADDR": "10.96.0.1",
		"REDIS_MAIN_SERVICE_HOST": "10.96.0.7", "REDIS_MAIN_PORT_6379_TCP": "tcp://10.96.0.7:6379", "REDIS_MAIN_PORT_6379_TCP_PROTO": "tcp",
	} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
	}
	for _, k := range []string{"MAYBE", "CFG_bad-name=", "HEADLESS_SERVICE_HOST", "tab\tkey"} {
		if _, ok := got[k]; ok {
			t.Errorf("%s is set", k)
		}
	}
	ev := events(o)
	sort.Strings(ev)
	if len(ev) != 2 || !strings.Contains(ev[0], "Warning InvalidEnvironmentVariableNames Keys [CFG_bad-name=] from the EnvFrom configmap ns/cfg were skipped") ||
		!strings.Contains(ev[1], "Keys [tab\tkey] from the EnvFrom configmap ns/raw were skipped") {
		t.Errorf("events %q, want one InvalidEnvironmentVariableNames warning per configmap", ev)
	}

	// Without service links only the kubernetes service remains.
	pod.Spec.EnableServiceLinks = new(false)
	kvs, _, _ = o.env(context.Background(), pod, &pod.Spec.Containers[0], nil)
	if got := envMap(kvs); got["REDIS_MAIN_SERVICE_HOST"] != "" || got["KUBERNETES_SERVICE_HOST"] == "" {
		t.Errorf("enableServiceLinks=false: %v", got)
	}

	// A missing non-optional key is an error naming it.
	pod.Spec.Containers[0].Env = []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "creds"}, Key: "nope"}}}}
	if _, _, err := o.env(context.Background(), pod, &pod.Spec.Containers[0], nil); err == nil || !strings.Contains(err.Error(), "couldn't find key nope in secret ns/creds") {
		t.Errorf("error %v", err)
	}
	// Static pods may not use API objects at all.
	pod.Annotations = map[string]string{podutil.ConfigSourceAnnotationKey: podutil.FileSource}
	if _, _, err := o.env(context.Background(), pod, &pod.Spec.Containers[0], nil); !errors.Is(err, volume.ErrStaticPodAPIObject) {
		t.Errorf("static pod error %v", err)
	}
}

func TestPodDNS(t *testing.T) {
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	testutil.Must(t, os.WriteFile(resolv, []byte("# host\nnameserver 192.0.2.53\nsearch corp.example\noptions edns0\n"), 0o644))
	d := DNS{ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local", ResolvConf: resolv}
	pod := func(policy v1.DNSPolicy, hostNet bool, cfg *v1.PodDNSConfig) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: v1.PodSpec{DNSPolicy: policy, HostNetwork: hostNet, DNSConfig: cfg}}
	}
	two := "2"
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want *runtimeapi.DNSConfig
	}{
		{"ClusterFirst", pod(v1.DNSClusterFirst, false, nil), &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"},
			Searches: []string{"ns.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"}, Options: []string{"ndots:5"}}},
		{"ClusterFirst on the host network is Default", pod(v1.DNSClusterFirst, true, nil), &runtimeapi.DNSConfig{Servers: []string{"192.0.2.53"},
			Searches: []string{"corp.example"}, Options: []string{"edns0"}}},
		{"ClusterFirstWithHostNet", pod(v1.DNSClusterFirstWithHostNet, true, nil), &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"},
			Searches: []string{"ns.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"}, Options: []string{"ndots:5"}}},
		{"None with dnsConfig", pod(v1.DNSNone, false, &v1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: []string{"a.example"},
			Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: &two}}}), &runtimeapi.DNSConfig{Servers: []string{"1.1.1.1"}, Searches: []string{"a.example"}, Options: []string{"ndots:2"}}},
		{"dnsConfig options override", pod(v1.DNSClusterFirst, false, &v1.PodDNSConfig{Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: &two}, {Name: "rotate"}}}),
			&runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"ns.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"}, Options: []string{"ndots:2", "rotate"}}},
	} {
		got, err := d.PodDNS(tc.pod)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v (%v), want %v", tc.name, got, err, tc.want)
		}
	}
}

// More nameservers or search domains than the resolver reads are cut,
// with a warning event saying what was applied.
func TestPodDNSLimits(t *testing.T) {
	o, _ := clusterOptions(t)
	var searches []string
	for i := range 40 {
		searches = append(searches, fmt.Sprintf("d%d.example", i))
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}, Spec: v1.PodSpec{DNSPolicy: v1.DNSNone,
		DNSConfig: &v1.PodDNSConfig{Nameservers: []string{"1.1.1.1", "1.0.0.1", "8.8.8.8", "8.8.4.4"}, Searches: searches}}}
	cfg, _, err := o.PodDNS(pod)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Servers) != 3 || cfg.Servers[2] != "8.8.8.8" || len(cfg.Searches) != 32 || cfg.Searches[31] != "d31.example" {
		t.Errorf("servers %v, %d searches: not cut to 3 and 32", cfg.Servers, len(cfg.Searches))
	}
	ev := strings.Join(events(o), "\n")
	for _, want := range []string{"DNSConfigForming Nameserver limits were exceeded", "the applied nameserver line is: 1.1.1.1 1.0.0.1 8.8.8.8", "DNSConfigForming Search Line limits were exceeded"} {
		if !strings.Contains(ev, want) {
			t.Errorf("events %q lack %q", ev, want)
		}
	}
}

func TestHostsFileAndHostname(t *testing.T) {
	o, _ := clusterOptions(t)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "ns", UID: "u1"}, Spec: v1.PodSpec{
		Hostname: "web-0", Subdomain: "web", SetHostnameAsFQDN: new(true),
		HostAliases: []v1.HostAlias{{IP: "192.0.2.9", Hostnames: []string{"foo.local", "bar.local"}}},
	}}
	c := &v1.Container{Name: "main"}
	m, err := o.hostsMount(pod, c, []string{"10.1.0.5"})
	if err != nil || m == nil || m.ContainerPath != "/etc/hosts" {
		t.Fatalf("mount %v (%v)", m, err)
	}
	b, _ := os.ReadFile(m.HostPath)
	for _, want := range []string{"127.0.0.1\tlocalhost", "10.1.0.5\tweb-0.web.ns.svc.cluster.local\tweb-0", "192.0.2.9\tfoo.local\tbar.local"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("hosts file lacks %q:\n%s", want, b)
		}
	}
	if _, hostname, err := o.PodDNS(pod); err != nil || hostname != "web-0.web.ns.svc.cluster.local" {
		t.Errorf("hostname %q (%v)", hostname, err)
	}
	// A container mounting its own /etc/hosts keeps it.
	c.VolumeMounts = []v1.VolumeMount{{Name: "h", MountPath: "/etc/hosts"}}
	if m, _ := o.hostsMount(pod, c, []string{"10.1.0.5"}); m != nil {
		t.Errorf("mounted over the container's own /etc/hosts")
	}
}

// A subdomain makes an FQDN even without a cluster domain (the node e2e
// suite's kubelet settings have none), ending in "svc." as upstream's;
// setHostnameAsFQDN then makes it the hostname, and one longer than the
// kernel's 64 characters fails the sandbox with upstream's message
// (node e2e: "Hostname of Pod", pod_hostnamefqdn_test.go).
func TestFQDNWithoutAClusterDomain(t *testing.T) {
	o := New(Options{RootDir: t.TempDir(), NodeName: "n1", Recorder: record.NewFakeRecorder(10)})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hostfqdn-65977", Namespace: "hostfqdn-3184", UID: "u1"}, Spec: v1.PodSpec{
		Subdomain: "t", SetHostnameAsFQDN: new(true),
	}}
	if _, hostname, err := o.PodDNS(pod); err != nil || hostname != "hostfqdn-65977.t.hostfqdn-3184.svc." {
		t.Errorf("hostname %q (%v), want hostfqdn-65977.t.hostfqdn-3184.svc.", hostname, err)
	}
	m, err := o.hostsMount(pod, &v1.Container{Name: "test-container"}, []string{"10.1.0.5"})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(m.HostPath); !strings.Contains(string(b), "10.1.0.5	hostfqdn-65977.t.hostfqdn-3184.svc.	hostfqdn-65977\n") {
		t.Errorf("hosts file lacks the FQDN:\n%s", b)
	}
	pod.Name = "hostfqdnveryveryveryverylongforfqdntobemorethan64bytes-4242"
	_, _, err = o.PodDNS(pod)
	const want = "failed to construct FQDN from pod hostname and cluster domain, FQDN hostfqdnveryveryveryverylongforfqdntobemorethan64bytes-4242.t.hostfqdn-3184.svc. is too long (64 characters is the max, 80 characters requested)"
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
	pod.Name, pod.Spec.Subdomain = "p", "Not_A_Label"
	if _, _, err := o.PodDNS(pod); err == nil || !strings.Contains(err.Error(), "is not a valid DNS label") {
		t.Errorf("an invalid subdomain: %v", err)
	}
}

// hostnameOverride is the pod's whole hostname, dots included, with no
// domain; one that is no DNS subdomain is refused.
func TestHostnameOverride(t *testing.T) {
	o, _ := clusterOptions(t)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "ns", UID: "u1"}, Spec: v1.PodSpec{
		Hostname: "ignored", Subdomain: "web", HostnameOverride: new("db.example.internal"),
	}}
	if _, hostname, err := o.PodDNS(pod); err != nil || hostname != "db.example.internal" {
		t.Errorf("hostname %q (%v), want the override", hostname, err)
	}
	m, err := o.hostsMount(pod, &v1.Container{Name: "main"}, []string{"10.1.0.5"})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(m.HostPath); !strings.Contains(string(b), "10.1.0.5\tdb.example.internal\n") {
		t.Errorf("hosts file does not name the override alone:\n%s", b)
	}
	pod.Spec.HostnameOverride = new("Not_A_Name")
	if _, _, err := o.PodDNS(pod); err == nil || !strings.Contains(err.Error(), "hostnameOverride") {
		t.Errorf("an invalid override: %v", err)
	}
}

// TestImageVolumeMount: an image volume becomes a read-only CRI image
// mount (the runtime manager puts in the pulled reference), with its
// subPath as the image sub-path, beside ordinary host-path mounts.
func TestImageVolumeMount(t *testing.T) {
	o := New(Options{RootDir: t.TempDir(), NodeName: "n1"})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}}
	pod.Spec.Volumes = []v1.Volume{
		{Name: "data", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "data:1"}}},
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
	}
	c := v1.Container{Name: "main", VolumeMounts: []v1.VolumeMount{
		{Name: "data", MountPath: "/data", SubPath: "etc"}, {Name: "scratch", MountPath: "/scratch"},
	}}
	pod.Spec.Containers = []v1.Container{c}
	opts, err := o.RunContainerOptions(context.Background(), pod, &c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Mounts) != 2 {
		t.Fatalf("mounts %+v", opts.Mounts)
	}
	img, dir := opts.Mounts[0], opts.Mounts[1]
	if img.GetImage().GetImage() != "data:1" || img.ImageSubPath != "etc" || !img.Readonly || img.HostPath != "" || img.ContainerPath != "/data" {
		t.Errorf("image mount %+v", img)
	}
	if dir.GetImage() != nil || dir.HostPath == "" {
		t.Errorf("emptyDir mount %+v", dir)
	}
}

// A readOnly claim is read-only in every container, whatever the mount
// says; a container asking for a raw block device is not created.
func TestClaimMountsAndVolumeDevices(t *testing.T) {
	dir := t.TempDir()
	vm := volume.NewManager(volume.Options{RootDir: t.TempDir(), Claims: boundClaim{dir}})
	o := New(Options{RootDir: t.TempDir(), NodeName: "n1", Volumes: vm})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}}
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c", ReadOnly: true}}}}
	c := v1.Container{Name: "main", VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/data"}}}
	pod.Spec.Containers = []v1.Container{c}
	opts, err := o.RunContainerOptions(context.Background(), pod, &c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Mounts) != 1 || !opts.Mounts[0].Readonly || opts.Mounts[0].HostPath != dir {
		t.Errorf("claim mount %+v", opts.Mounts)
	}
	c.VolumeDevices = []v1.VolumeDevice{{Name: "data", DevicePath: "/dev/xvda"}}
	if _, err := o.RunContainerOptions(context.Background(), pod, &c, nil); err == nil || !strings.Contains(err.Error(), "volumeDevices") {
		t.Errorf("volumeDevices: %v", err)
	}
}

// boundClaim is one claim, bound to a hostPath volume at dir.
type boundClaim struct{ dir string }

func (b boundClaim) GetPersistentVolumeClaim(_ context.Context, ns, name string) (*v1.PersistentVolumeClaim, error) {
	return &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: "c1"},
		Spec: v1.PersistentVolumeClaimSpec{VolumeName: "pv"}, Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound}}, nil
}

func (b boundClaim) GetPersistentVolume(_ context.Context, name string) (*v1.PersistentVolume, error) {
	return &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: b.dir}},
		ClaimRef:               &v1.ObjectReference{UID: "c1"}}}, nil
}

// The volumes nodelet writes the API's data into are read-only in every
// container, whatever the mount says (upstream's fix of
// CVE-2017-1002102); an emptyDir stays writable.
func TestAPIDataVolumesMountReadOnly(t *testing.T) {
	vm := volume.NewManager(volume.Options{RootDir: t.TempDir()})
	o := New(Options{RootDir: t.TempDir(), NodeName: "n1", Volumes: vm})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", Labels: map[string]string{"a": "b"}}}
	labels := &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}
	pod.Spec.Volumes = []v1.Volume{
		{Name: "downward", VolumeSource: v1.VolumeSource{DownwardAPI: labels}},
		{Name: "projected", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{{DownwardAPI: &v1.DownwardAPIProjection{Items: labels.Items}}}}}},
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
	}
	c := v1.Container{Name: "main", VolumeMounts: []v1.VolumeMount{
		{Name: "downward", MountPath: "/downward"}, {Name: "projected", MountPath: "/projected"}, {Name: "scratch", MountPath: "/scratch"}}}
	pod.Spec.Containers = []v1.Container{c}
	// As root, the projected volume is a tmpfs.
	t.Cleanup(func() { testutil.Must(t, vm.TearDown(pod.UID)) })
	opts, err := o.RunContainerOptions(context.Background(), pod, &c, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, m := range opts.Mounts {
		got[m.ContainerPath] = m.Readonly
	}
	if want := map[string]bool{"/downward": true, "/projected": true, "/scratch": false}; !maps.Equal(got, want) {
		t.Errorf("read-only mounts %v, want %v", got, want)
	}
}
