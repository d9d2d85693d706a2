//go:build integration

package faults

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testbed"
	"github.com/nodelet/nodelet/pkg/volumes/csi"
)

// A pod's claim is a CSI volume whose driver needs attaching. nodelet is
// SIGKILLed and started again while the API server is down, and the
// pod's container exits and must start again: its volume is set up
// again from the journal (claim, volume, CSIDriver, VolumeAttachment and
// the node's attached volumes), with its data. (The names are short: the
// registration socket is under the test's root directory, and unix socket
// paths are limited to 108 bytes.)
func TestJournalCSIVolume(t *testing.T) {
	record(t, row{scenario: "nodelet SIGKILL, restart with API down, attached CSI volume", load: "1 pod with a claim",
		fault: "SIGKILL, API server down, restart, container exits", invariants: []string{invNoneLost, invTruth}})
	const driver, handle = "csi.journal", "journal-vol"
	n := clusterNode(t, "journal-csi")
	testbed.StartNodeCSIDriver(t, n, driver, true)
	attachedClaim(t, driver, handle)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "csi-user"}, Spec: v1.PodSpec{
		NodeName: n.NodeName, AutomountServiceAccountToken: new(false), TerminationGracePeriodSeconds: new(int64(2)),
		Volumes: []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "journal-csi"}}}},
		Containers: []v1.Container{{Name: "main", Image: testbed.BusyboxImage, ImagePullPolicy: v1.PullIfNotPresent,
			VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/data"}},
			Command:      []string{"sh", "-c", "trap 'exit 0' TERM; [ -f /data/f ] || echo kept > /data/f; while [ ! -f /tmp/exit ]; do sleep 0.2; done; exit 1"}}},
	}}
	pods := cl.Client.CoreV1().Pods("default")
	if _, err := pods.Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = pods.Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
	})
	cl.MarkAttached(t, csi.AttachmentName(handle, driver, n.NodeName))
	apiStates(t, map[string]string{"csi-user": "Running"})

	start := restartWithAPIDown(t, n, func() {})
	told := n.RunningPodContainer("csi-user", "main")
	if told == nil {
		t.Fatal("csi-user's container does not run after the restart")
	}
	if _, err := n.Exec(told.Id, "touch", "/tmp/exit"); err != nil {
		t.Fatal(err)
	}
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		c := n.RunningPodContainer("csi-user", "main")
		return c != nil && c.Id != told.Id, "csi-user's container did not start again; nodelet logged:\n" + logLines(n, "csi-user", 8)
	})
	again := n.RunningPodContainer("csi-user", "main")
	if out, err := n.Exec(again.Id, "cat", "/data/f"); err != nil || out != "kept\n" {
		t.Errorf("the new container reads %q (%v)", out, err)
	}
	startAPIServer(t)
	setRow(t, time.Since(start))
	if err := pods.Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	apiGone(t, n, []string{"csi-user"})
}

// attachedClaim makes the claim default/journal-csi, bound to a CSI
// volume of the driver, which needs attaching.
func attachedClaim(t *testing.T, driver, handle string) {
	t.Helper()
	ctx := context.Background()
	st := cl.Client.StorageV1()
	core := cl.Client.CoreV1()
	if _, err := st.CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: new(true)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	size := v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Mi")}
	rwo := []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}
	if _, err := core.PersistentVolumes().Create(ctx, &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "journal-csi"},
		Spec: v1.PersistentVolumeSpec{Capacity: size, AccessModes: rwo, StorageClassName: "",
			ClaimRef:               &v1.ObjectReference{Namespace: "default", Name: "journal-csi"},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.PersistentVolumeClaims("default").Create(ctx, &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "journal-csi"},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: new(""), VolumeName: "journal-csi", AccessModes: rwo,
			Resources: v1.VolumeResourceRequirements{Requests: size}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = core.PersistentVolumeClaims("default").Delete(ctx, "journal-csi", metav1.DeleteOptions{})
		_ = core.PersistentVolumes().Delete(ctx, "journal-csi", metav1.DeleteOptions{})
		_ = st.CSIDrivers().Delete(ctx, driver, metav1.DeleteOptions{})
	})
}

// logLines is the last count lines of nodelet's log that mention s.
func logLines(n *testbed.Nodelet, s string, count int) string {
	var out []string
	for _, l := range strings.Split(n.Log(), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out[max(0, len(out)-count):], "\n")
}
