package podfields

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

var rewrite = flag.Bool("rewrite", false, "rewrite docs/pod-fields.md from the table")

// Every field of a v1 Pod in the k8s.io/api nodelet builds with has a
// row, and every row covers a field: a new API field fails this test
// until someone decides what nodelet does with it.
func TestEveryPodFieldIsClassified(t *testing.T) {
	paths := Paths(reflect.TypeOf(v1.Pod{}))
	if len(paths) < 900 {
		t.Fatalf("only %d pod fields found: the walk is broken", len(paths))
	}
	for _, p := range paths {
		if _, _, ok := Lookup(p); !ok {
			t.Errorf("pod field %s has no row in Fields", p)
		}
	}
	for key := range Fields {
		used := false
		for _, p := range paths {
			if p == key || strings.HasPrefix(p, key+".") || strings.HasPrefix(p, key+"[]") {
				used = true
				break
			}
		}
		if !used {
			t.Errorf("row %s covers no pod field", key)
		}
	}
}

// The fields of init and ephemeral containers are classified as those of
// app containers; a longer row wins over its parent's.
func TestLookup(t *testing.T) {
	for path, want := range map[string]string{
		"spec.initContainers[].volumeDevices[].name":                   "spec.containers[].volumeDevices",
		"spec.ephemeralContainers[].targetContainerName":               "spec.ephemeralContainers[].targetContainerName",
		"spec.ephemeralContainers[].securityContext.runAsNonRoot":      "spec.containers[].securityContext.runAsNonRoot",
		"spec.volumes[].projected.sources[].podCertificate.signerName": "spec.volumes[].projected.sources[].podCertificate",
		"spec.volumes[].projected.sources[].secret.name":               "spec.volumes[].projected",
		"spec.affinity.podAffinity":                                    "spec.affinity",
	} {
		if got, _, _ := Lookup(path); got != want {
			t.Errorf("%s: row %q, want %q", path, got, want)
		}
	}
}

// A pod is refused for a refused field it sets, and only for one it sets.
func TestUnsupported(t *testing.T) {
	base := func() *v1.Pod {
		return &v1.Pod{Spec: v1.PodSpec{
			Containers: []v1.Container{{Name: "a", Image: "busybox",
				VolumeMounts: []v1.VolumeMount{{Name: "v", MountPath: "/v"}}}},
			Volumes:   []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}},
			HostUsers: ptr.To(false),
			// A refused field left empty is no reason.
			ResourceClaims: []v1.PodResourceClaim{},
		}}
	}
	if path, why := Unsupported(base()); path != "" {
		t.Fatalf("a plain pod refused for %s: %s", path, why)
	}
	for want, mutate := range map[string]func(p *v1.Pod){
		"spec.volumes[].nfs": func(p *v1.Pod) {
			p.Spec.Volumes[0].VolumeSource = v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: "s", Path: "/"}}
		},
		"spec.initContainers[].volumeDevices[]": func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "i", VolumeDevices: []v1.VolumeDevice{{Name: "d", DevicePath: "/dev/x"}}}}
		},
		"spec.ephemeralContainers[].lifecycle.stopSignal": func(p *v1.Pod) {
			p.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{
				Name: "e", Lifecycle: &v1.Lifecycle{StopSignal: ptr.To(v1.SIGUSR1)}}}}
		},
	} {
		p := base()
		mutate(p)
		path, why := Unsupported(p)
		if !strings.HasPrefix(path, strings.TrimSuffix(want, "[]")) || why == "" {
			t.Errorf("refused for %q (%q), want %s", path, why, want)
		}
	}
}

// docs/pod-fields.md is the table (go test ./pkg/pods/podfields -rewrite
// after a change).
func TestPodFieldsDoc(t *testing.T) {
	want := doc()
	const path = "../../../docs/pod-fields.md"
	if *rewrite {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatal("docs/pod-fields.md is out of date: rerun with -rewrite")
	}
}

func doc() []byte {
	var b bytes.Buffer
	b.WriteString(docIntro)
	keys := make([]string, 0, len(Fields))
	for k := range Fields {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return order(keys[i]) < order(keys[j]) || (order(keys[i]) == order(keys[j]) && keys[i] < keys[j])
	})
	b.WriteString("| field | nodelet | what it does |\n|---|---|---|\n")
	for _, k := range keys {
		f := Fields[k]
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", k, f.Support, strings.ReplaceAll(f.Note, "|", "\\|"))
	}
	b.WriteString(docAdmission)
	return b.Bytes()
}

// order puts the rows in the order of a pod: metadata, spec, status.
func order(k string) int {
	switch {
	case strings.HasPrefix(k, "spec.containers[]"):
		return 2
	case strings.HasPrefix(k, "spec."):
		return 1
	case strings.HasPrefix(k, "status"):
		return 3
	}
	return 0
}

const docIntro = `# Pod fields

What nodelet does with every field of a v1 Pod (k8s.io/api v0.37). This
file is generated from the table in ` + "`pkg/pods/podfields`" + ` (` + "`go test ./pkg/pods/podfields -rewrite`" + `),
which a test keeps complete: a field added to the API fails the build
until it is classified. A row covers its field and everything under it,
unless a longer row says otherwise; container rows hold for init and
ephemeral containers alike.

- **honoured**: nodelet does what the field says;
- **refused**: a pod setting the field is refused at admission (Failed,
  reason UnsupportedPodField, the message naming the field) and never
  started, rather than run without it;
- **another component's**: the field is for the API server, the scheduler
  or a controller, and a node has nothing to do with it (nor has
  upstream's kubelet);
- **reported** / **not reported**: status fields nodelet writes, or does not.

No field is accepted and ignored. Static pods are defaulted and validated
by nodelet as the API server would (` + "`pkg/pods/podsources`" + `).

`

const docAdmission = `
Admission checks, in this order: admission hooks (a node shutting down;
runtime features: UserNamespacesNotSupported,
SupplementalGroupsPolicyNotSupported), unsupported fields
(UnsupportedPodField), node pressure (under MemoryPressure alone,
BestEffort pods that do not tolerate it are refused; under DiskPressure or
PIDPressure every pod is; static and system-critical pods always run:
Failed with reason Evicted), sysctls, OS, node name, node selector and
required node affinity, NoExecute taints (TaintToleration), host port
conflicts with admitted pods, and resource requests (pods, cpu, memory,
ephemeral-storage and extended resources, init containers, sidecars,
overhead and pod-level resources counted as upstream does) against the
node's allocatable. As upstream's, it leaves out an extended resource the
node does not offer at all (a cluster-level one, which another component
accounts for) and one the scheduler backs with a ResourceClaim
(status.extendedResourceClaimStatus, prepared by the DRA manager); an
extended resource an operator advertises on the Node's status counts. A
rejected pod is Failed with upstream's reason and a
message, and never started.

## Status

nodelet computes ` + "`phase`, `conditions`" + ` (with transition times that change
only when the condition does), the container statuses (state with the
upstream reasons: ContainerCreating, PodInitializing, CrashLoopBackOff,
ErrImagePull, ImagePullBackOff, CreateContainerConfigError, Completed,
Error, OOMKilled; ` + "`lastState`, `restartCount`, `image`, `imageID`,\n`containerID`, `started`, `ready`, `volumeMounts`" + `), ` + "`hostIP(s)`, `podIP(s)`,\n`startTime`, `qosClass`" + `, and ` + "`reason`/`message`" + ` for rejected pods. The
status is served on the read-only port's ` + "`/pods`" + ` and written to the API
server in cluster mode.
`
