//go:build integration

package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/nodelet/nodelet/internal/testbed"
	"github.com/nodelet/nodelet/pkg/volumes/csi"
)

// Persistent volume claims, bound by the real controller-manager's PV
// binder: a pod writes to its claim (a local PV pinned to the node), is
// deleted, and a new pod reads the data back through a readOnly mount and
// a subPath; a generic ephemeral volume gets the claim the ephemeral
// volume controller made; a local PV of another node is refused, and a
// claim that never binds keeps its pod waiting with a clear event, while
// another pod runs.
func TestPersistentVolumeClaims(t *testing.T) {
	ns := namespace(t)
	const node = "claims"
	startNode(t, node, cd, "")
	ctx := context.Background()
	class := "nodelet-" + ns
	createClass(t, class)
	data, scratch := hostDir(t), hostDir(t)
	createPV(t, class, "data-"+ns, v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: data}}, node, nil)
	createPV(t, class, "elsewhere-"+ns, v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: data}}, "no-such-node",
		&v1.ObjectReference{Namespace: ns, Name: "elsewhere"})
	createPV(t, class, "scratch-"+ns, v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: scratch}}, "", nil)
	createPVC(t, ns, "data", class, "data-"+ns)
	createPVC(t, ns, "elsewhere", class, "elsewhere-"+ns)
	createPVC(t, ns, "unbound", "no-such-class", "")
	pods := cl.Client.CoreV1().Pods(ns)

	writer := claimPod("writer", node, "data", false, "echo persisted > /data/hello && echo nested > /sub/f")
	writer.Spec.Containers[0].VolumeMounts = append(writer.Spec.Containers[0].VolumeMounts, v1.VolumeMount{Name: "vol", MountPath: "/sub", SubPath: "nested"})
	createPod(t, ns, writer)
	waitPod(t, 2*time.Minute, ns, "writer", inPhase(v1.PodSucceeded))
	if err := pods.Delete(ctx, "writer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, ns, claimPod("reader", node, "data", true, "cat /data/hello /data/nested/f; touch /data/x 2>/dev/null || echo read-only"))
	waitPod(t, time.Minute, ns, "reader", inPhase(v1.PodSucceeded))
	if out := podLog(t, ns, "reader"); out != "persisted\nnested\nread-only\n" {
		t.Errorf("the reader read %q", out)
	}

	eph := claimPod("ephemeral", node, "", false, "echo scratch > /data/f")
	eph.Spec.Volumes[0].VolumeSource = v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &class, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Mi")}}},
	}}}
	createPod(t, ns, eph)
	waitPod(t, 2*time.Minute, ns, "ephemeral", inPhase(v1.PodSucceeded))
	if b, err := os.ReadFile(scratch + "/f"); err != nil || string(b) != "scratch\n" {
		t.Errorf("the ephemeral volume holds %q (%v)", b, err)
	}

	createPod(t, ns, claimPod("wrong-node", node, "elsewhere", false, "sleep 3600"))
	createPod(t, ns, claimPod("waiting", node, "unbound", false, "sleep 3600"))
	createPod(t, ns, busyboxPod("bystander", node))
	waitPod(t, time.Minute, ns, "bystander", running)
	waitEventMessage(t, ns, "wrong-node", "FailedMount", "volume node affinity conflict")
	waitEventMessage(t, ns, "waiting", "FailedMount", `persistentvolumeclaim "unbound" is not bound to a volume yet`)
	for _, name := range []string{"wrong-node", "waiting"} {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != v1.PodPending || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Waiting == nil ||
			p.Status.ContainerStatuses[0].State.Waiting.Reason != "ContainerCreating" {
			t.Errorf("%s: %s %+v", name, p.Status.Phase, p.Status.ContainerStatuses)
		}
	}
}

// hostDir is a directory on the node for a persistent volume, which any
// container user may write.
func hostDir(t *testing.T) string {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

func createClass(t *testing.T, name string) {
	t.Helper()
	immediate := storagev1.VolumeBindingImmediate
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &immediate}
	if _, err := cl.Client.StorageV1().StorageClasses().Create(context.Background(), sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cl.Client.StorageV1().StorageClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// createPV makes a 1 Mi volume of the class, pinned to a node if one is
// named, and reserved for a claim if one is given.
func createPV(t *testing.T, class, name string, src v1.PersistentVolumeSource, node string, claim *v1.ObjectReference) {
	t.Helper()
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PersistentVolumeSpec{
		StorageClassName: class, PersistentVolumeSource: src, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		Capacity: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Mi")}, PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
	}}
	if node != "" {
		pv.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{node}}},
		}}}}
	}
	pv.Spec.ClaimRef = claim
	if _, err := cl.Client.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cl.Client.CoreV1().PersistentVolumes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// createPVC claims 1 Mi of the class, or the named volume.
func createPVC(t *testing.T, ns, name, class, volume string) {
	t.Helper()
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PersistentVolumeClaimSpec{
		StorageClassName: &class, VolumeName: volume, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Mi")}},
	}}
	if _, err := cl.Client.CoreV1().PersistentVolumeClaims(ns).Create(context.Background(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// claimPod runs sh -c script once, with the claim (if any) at /data.
func claimPod(name, node, claim string, readOnly bool, script string) *v1.Pod {
	p := busyboxPod(name, node, "sh", "-c", script)
	p.Spec.RestartPolicy = v1.RestartPolicyNever
	p.Spec.Volumes = []v1.Volume{{Name: "vol", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly}}}}
	p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "vol", MountPath: "/data"}}
	return p
}

func createPod(t *testing.T, ns string, p *v1.Pod) {
	t.Helper()
	if _, err := cl.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func inPhase(want v1.PodPhase) func(*v1.Pod) (bool, string) {
	return func(p *v1.Pod) (bool, string) {
		return p.Status.Phase == want, fmt.Sprintf("phase %s, %+v", p.Status.Phase, p.Status.ContainerStatuses)
	}
}

func podLog(t *testing.T, ns, name string) string {
	t.Helper()
	b, err := cl.Client.CoreV1().Pods(ns).GetLogs(name, &v1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitEventMessage waits for nodelet's event of that reason about a pod,
// with a message containing text.
func waitEventMessage(t *testing.T, ns, pod, reason, text string) {
	t.Helper()
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		list, err := cl.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", pod).String(),
		})
		if err != nil {
			return false, err.Error()
		}
		var all []string
		for _, e := range list.Items {
			if e.Source.Component == "kubelet" && e.Reason == reason && strings.Contains(e.Message, text) {
				return true, ""
			}
			all = append(all, e.Reason+": "+e.Message)
		}
		return false, fmt.Sprintf("no %s event with %q about %s; events: %v", reason, text, pod, all)
	})
}

// A claim bound to a CSI volume, through a real CSI driver process (the
// test's, speaking CSI over its socket): the driver registers (CSINode),
// two pods share the staged volume, which is unstaged only once both are
// gone; the data outlives the pods; nodelet killed between publish and
// unpublish leaves no mount behind; the driver's socket vanishing and
// returning deregisters and registers it again.
func TestCSIVolumes(t *testing.T) {
	ns := namespace(t)
	const node, driverName = "csi", "hostpath.nodelet.test"
	n := startNode(t, node, cd, "")
	ctx := context.Background()
	drv := testbed.StartNodeCSIDriver(t, n, driverName, true)
	csiNodeHas(t, node, driverName, true)
	if _, err := cl.Client.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driverName},
		Spec: storagev1.CSIDriverSpec{AttachRequired: new(false), PodInfoOnMount: new(true), VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{
			storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cl.Client.StorageV1().CSIDrivers().Delete(context.Background(), driverName, metav1.DeleteOptions{})
	})
	class := "nodelet-" + ns
	createClass(t, class)
	handle := "vol-" + ns
	createPV(t, class, "csi-"+ns, v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driverName, VolumeHandle: handle}}, "", nil)
	createPVC(t, ns, "data", class, "csi-"+ns)
	pods := cl.Client.CoreV1().Pods(ns)

	createPod(t, ns, claimPod("writer", node, "data", false, "echo persisted > /data/hello"))
	waitPod(t, 2*time.Minute, ns, "writer", inPhase(v1.PodSucceeded))
	for _, name := range []string{"one", "two"} {
		createPod(t, ns, claimPod(name, node, "data", false, "cat /data/hello; sleep 3600"))
	}
	waitPod(t, time.Minute, ns, "one", running)
	waitPod(t, time.Minute, ns, "two", running)
	// The finished writer's volume may have been unstaged before the two
	// started: only what comes after both publishes counts.
	shared := len(drv.Calls())
	if err := pods.Delete(ctx, "writer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, "one", metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, "one")
	waitGone(t, ns, "writer")
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		calls := strings.Join(drv.Calls()[shared:], ",")
		return strings.Contains(calls, "NodeUnpublishVolume"), "one's volume not unpublished: " + calls
	})
	if calls := strings.Join(drv.Calls()[shared:], ","); strings.Contains(calls, "NodeUnstageVolume") {
		t.Errorf("unstaged while a pod still uses it: %s", calls)
	}
	if out := podLog(t, ns, "two"); out != "persisted\n" {
		t.Errorf("the second pod read %q", out)
	}

	// Killed while "two" has the volume published; "two" is deleted while
	// nodelet is down; started again, it tears the volume down from disk.
	n.Kill()
	testbed.Eventually(t, 30*time.Second, func() (bool, string) { return n.Exited(), "nodelet still runs" })
	if err := pods.Delete(ctx, "two", metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	n.Start()
	testbed.Eventually(t, 2*time.Minute, func() (bool, string) {
		calls := drv.Calls()
		last := ""
		if len(calls) > 0 {
			last = calls[len(calls)-1]
		}
		return last == "NodeUnstageVolume "+handle, "driver calls: " + strings.Join(calls, ",")
	})
	if mounts := mountsUnder(t, n.RootDir); len(mounts) > 0 {
		t.Errorf("mounts left under the root directory: %v", mounts)
	}
	if b, err := os.ReadFile(filepath.Join(drv.Backing, handle, "hello")); err != nil || string(b) != "persisted\n" {
		t.Errorf("the volume's data: %q (%v)", b, err)
	}

	// The driver's process ends (its pod is deleted, say): it removes its
	// registration socket. Started again, it registers again.
	if err := drv.Stop(); err != nil {
		t.Fatal(err)
	}
	csiNodeHas(t, node, driverName, false)
	if err := drv.Start(); err != nil {
		t.Fatal(err)
	}
	csiNodeHas(t, node, driverName, true)

	// An inline volume, through the driver registered again: published
	// without staging, with the pod's identity, and unpublished when the
	// pod is deleted.
	before := len(drv.Calls())
	inline := busyboxPod("inline", node, "sh", "-c", "echo scratch > /scratch/f && cat /scratch/f")
	inline.Spec.RestartPolicy = v1.RestartPolicyNever
	inline.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{
		Driver: driverName, VolumeAttributes: map[string]string{"size": "1Mi"}}}}}
	inline.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	createPod(t, ns, inline)
	waitPod(t, 2*time.Minute, ns, "inline", inPhase(v1.PodSucceeded))
	if out := podLog(t, ns, "inline"); out != "scratch\n" {
		t.Errorf("the inline volume's pod read %q", out)
	}
	if err := pods.Delete(ctx, "inline", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, "inline")
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		calls := strings.Join(drv.Calls()[before:], ",")
		return strings.HasPrefix(calls, "NodePublishVolume csi-") && strings.Contains(calls, ",NodeUnpublishVolume csi-") &&
			!strings.Contains(calls, "Stage"), "inline volume calls: " + calls
	})
}

// csiNodeHas waits until the node's CSINode object lists the driver, or
// does not.
func csiNodeHas(t *testing.T, node, driver string, want bool) {
	t.Helper()
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		cn, err := cl.Client.StorageV1().CSINodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		has := false
		for _, d := range cn.Spec.Drivers {
			has = has || d.Name == driver && d.NodeID != ""
		}
		return has == want, fmt.Sprintf("CSINode drivers %+v, want %s listed: %v", cn.Spec.Drivers, driver, want)
	})
}

func waitGone(t *testing.T, ns, name string) {
	t.Helper()
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		_, err := cl.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("%s still in the API (%v)", name, err)
	})
}

// mountsUnder lists the mount points under dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	return out
}

// A driver that needs attaching: the node is marked for the
// attach/detach controller, which makes the VolumeAttachment; the test
// plays the driver's attacher and marks it attached; only then is the
// volume published. The node reports it in volumesInUse while the pod
// has it, and not after.
func TestCSIAttach(t *testing.T) {
	ns := namespace(t)
	const node, driverName = "csi-attach", "attach.nodelet.test"
	n := startNode(t, node, cd, "")
	ctx := context.Background()
	drv := testbed.StartNodeCSIDriver(t, n, driverName, false)
	csiNodeHas(t, node, driverName, true)
	if _, err := cl.Client.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driverName},
		Spec: storagev1.CSIDriverSpec{AttachRequired: new(true)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cl.Client.StorageV1().CSIDrivers().Delete(context.Background(), driverName, metav1.DeleteOptions{})
	})
	class := "nodelet-" + ns
	createClass(t, class)
	handle := "att-" + ns
	createPV(t, class, "att-"+ns, v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driverName, VolumeHandle: handle}}, "", nil)
	createPVC(t, ns, "data", class, "att-"+ns)
	createPod(t, ns, claimPod("user", node, "data", false, "sleep 3600"))

	name := csi.AttachmentName(handle, driverName, node)
	waitEventMessage(t, ns, "user", "FailedMount", "volume not attached to the node yet")
	cl.MarkAttached(t, name)
	waitPod(t, time.Minute, ns, "user", running)
	unique := v1.UniqueVolumeName("kubernetes.io/csi/" + driverName + "^" + handle)
	volumesInUse(t, node, unique, true)
	// sleep as PID 1 ignores SIGTERM: no grace period to wait out.
	if err := cl.Client.CoreV1().Pods(ns).Delete(ctx, "user", metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, "user")
	volumesInUse(t, node, unique, false)
	if calls := strings.Join(drv.Calls(), ","); calls != "NodePublishVolume "+handle+",NodeUnpublishVolume "+handle {
		t.Errorf("driver calls %s", calls)
	}
}

// volumesInUse waits until the node's status lists the volume, or not.
func volumesInUse(t *testing.T, node string, name v1.UniqueVolumeName, want bool) {
	t.Helper()
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		n, err := cl.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return slices.Contains(n.Status.VolumesInUse, name) == want, fmt.Sprintf("volumesInUse %v, want %s listed: %v", n.Status.VolumesInUse, name, want)
	})
}
