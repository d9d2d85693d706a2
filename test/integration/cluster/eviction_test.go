//go:build integration

package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// hogBytes is what the memory hog writes into its memory-backed emptyDir;
// evictionMargin is how far below the memory available at start the
// threshold is set. The hog crosses it by 2 GiB; once the hog is gone the
// node is 2 GiB clear of it, so other suites running beside this one do
// not make it evict a second pod.
const (
	hogBytes       = 4 << 30
	evictionMargin = 2 << 30
)

// memoryAvailable is memory.available as nodelet (and upstream) measure
// it: free memory plus the inactive file cache.
func memoryAvailable(t *testing.T) uint64 {
	t.Helper()
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		t.Fatal(err)
	}
	mi, err := fs.Meminfo()
	if err != nil {
		t.Fatal(err)
	}
	return *mi.MemFreeBytes + *mi.InactiveFileBytes
}

// Under a hard memory.available threshold, a BestEffort pod filling a
// memory-backed emptyDir is evicted: Failed with reason Evicted, upstream's
// message and an Evicted event in the API. The Guaranteed pod beside it
// keeps running its container, unrestarted, while the eviction manager
// measures the node again after the hog is gone.
func TestMemoryPressureEvictsTheHog(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	threshold := memoryAvailable(t) - evictionMargin
	n := startNode(t, "node-evict", cd, fmt.Sprintf("evictionHard: {memory.available: %q}\n", fmt.Sprint(threshold)))
	waitNodeReady(t, n.NodeName, 30*time.Second)
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range strings.Split(n.Log(), "\n") {
				if strings.Contains(l, "Eviction manager") || strings.Contains(l, "hog") && strings.Contains(l, "volume") {
					t.Log(l)
				}
			}
		}
	})

	guaranteed := busyboxPod("guaranteed", n.NodeName)
	res := v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")}
	guaranteed.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: res, Limits: res}
	hog := busyboxPod("hog", n.NodeName, "sh", "-c",
		fmt.Sprintf("sleep 2; dd if=/dev/zero of=/scratch/fill bs=1M count=%d; sleep 3600", hogBytes>>20))
	hog.Spec.TerminationGracePeriodSeconds = new(int64(1))
	hog.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{
		EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: resource.NewQuantity(hogBytes+(256<<20), resource.BinarySI)}}}}
	hog.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	for _, p := range []*v1.Pod{guaranteed, hog} {
		if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitPod(t, 60*time.Second, ns, "guaranteed", running)
	first := n.RunningPodContainer("guaranteed", "main")

	evicted := waitPod(t, 90*time.Second, ns, "hog", func(p *v1.Pod) (bool, string) {
		return p.Status.Phase == v1.PodFailed, fmt.Sprintf("phase %s", p.Status.Phase)
	})
	if evicted.Status.Reason != "Evicted" || !strings.HasPrefix(evicted.Status.Message, "The node was low on resource: memory. Threshold quantity: ") ||
		!strings.Contains(evicted.Status.Message, "Container main was using ") || condition(evicted, v1.DisruptionTarget) != v1.ConditionTrue {
		t.Fatalf("hog's status: %s %q %+v", evicted.Status.Reason, evicted.Status.Message, evicted.Status.Conditions)
	}
	waitEvents(t, ns, "hog", "Evicted")

	// The manager measured the node again after the hog's memory came
	// back, with nothing due: the Guaranteed pod was spared by choice.
	offset := len(n.Log())
	testbed.Eventually(t, 60*time.Second, func() (bool, string) {
		return strings.Contains(n.Log()[offset:], `"Eviction manager: measured the node"`) &&
			strings.Contains(n.Log()[offset:], `thresholdsDue=0`), "no measure without pressure since the eviction"
	})
	p, err := cl.Client.CoreV1().Pods(ns).Get(ctx, "guaranteed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := n.RunningPodContainer("guaranteed", "main")
	if p.Status.Phase != v1.PodRunning || c == nil || c.Id != first.Id || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Fatalf("guaranteed pod: phase %s, container %v (was %s)", p.Status.Phase, c, first.Id)
	}
	if strings.Contains(n.Log(), `"Eviction manager: evicting pod" pod="`+ns+`/guaranteed"`) {
		t.Fatal("the Guaranteed pod was chosen for eviction")
	}
}

// Pods over their own local storage limits are evicted on real
// containerd, whatever the node's signals: one whose emptyDir outgrew its
// sizeLimit, one whose container wrote past its ephemeral-storage limit in
// its writable layer. A pod within its limits keeps running while the
// eviction manager measures again after the evictions. (Static pods are
// never evicted, as upstream: this needs API pods.)
func TestLocalStorageLimitsEvict(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-storage", cd, "")
	waitNodeReady(t, n.NodeName, 30*time.Second)
	filler := func(name, path string, mib int, sizeLimit, ephemeralLimit string) *v1.Pod {
		p := busyboxPod(name, n.NodeName, "sh", "-c", fmt.Sprintf("mkdir -p $(dirname %s); dd if=/dev/zero of=%s bs=1M count=%d; sleep 3600", path, path, mib))
		p.Spec.TerminationGracePeriodSeconds = new(int64(1))
		if sizeLimit != "" {
			sl := resource.MustParse(sizeLimit)
			p.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: &sl}}}}
			p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
		}
		if ephemeralLimit != "" {
			p.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse(ephemeralLimit)}
		}
		return p
	}
	// layerfill's second container asks for much: the pod as a whole
	// stays within its containers' sum, its writer alone does not.
	layerfill := filler("layerfill", "/var/fill/f", 24, "", "8Mi")
	roomy := layerfill.Spec.Containers[0]
	roomy.Name, roomy.Command = "roomy", []string{"sleep", "3600"}
	roomy.Resources.Limits = v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("1Gi")}
	layerfill.Spec.Containers = append(layerfill.Spec.Containers, roomy)
	for _, p := range []*v1.Pod{
		filler("dirfill", "/scratch/fill", 24, "8Mi", ""),
		layerfill,
		filler("calm", "/scratch/fill", 1, "100Mi", "100Mi"),
	} {
		if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{
		"dirfill":   `Usage of EmptyDir volume "scratch" exceeds the limit "8Mi". `,
		"layerfill": `Container main exceeded its local ephemeral storage limit "8Mi". `,
	} {
		p := waitPod(t, 90*time.Second, ns, name, func(p *v1.Pod) (bool, string) {
			return p.Status.Phase == v1.PodFailed, fmt.Sprintf("%s: phase %s", name, p.Status.Phase)
		})
		if p.Status.Reason != "Evicted" || p.Status.Message != want {
			t.Errorf("%s: %s %q, want Evicted %q", name, p.Status.Reason, p.Status.Message, want)
		}
		waitEvents(t, ns, name, "Evicted")
	}
	// The eviction freed the space it was for: the evicted pod's sandbox,
	// containers (their writable layers) and logs are gone, while its
	// API object, Failed, stays (seed 003: an evicted pod's content may
	// be removed at once).
	evicted, err := cl.Client.CoreV1().Pods(ns).Get(ctx, "layerfill", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	logs := filepath.Join(n.LogsDir, fmt.Sprintf("%s_%s_%s", ns, "layerfill", evicted.UID))
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		var left []string
		for _, c := range runtimeContainersOf(t, cd, evicted.UID) {
			left = append(left, "container "+c)
		}
		sbs, err := cd.Sandboxes(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, sb := range sbs {
			if sb.Metadata.Uid == string(evicted.UID) {
				left = append(left, "sandbox "+sb.Id)
			}
		}
		if _, err := os.Stat(logs); err == nil {
			left = append(left, "logs "+logs)
		}
		return len(left) == 0, fmt.Sprintf("left of the evicted pod: %v", left)
	})
	if _, err := cl.Client.CoreV1().Pods(ns).Get(ctx, "layerfill", metav1.GetOptions{}); err != nil {
		t.Fatalf("the evicted pod's API object: %v", err)
	}
	offset := len(n.Log())
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		return strings.Contains(n.Log()[offset:], `"Eviction manager: measured the node"`), "no measure since the evictions"
	})
	p, err := cl.Client.CoreV1().Pods(ns).Get(ctx, "calm", metav1.GetOptions{})
	if err != nil || p.Status.Phase != v1.PodRunning || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Fatalf("calm pod: %v %+v", err, p.Status)
	}
	if strings.Contains(n.Log(), `local storage limit" pod="`+ns+`/calm"`) {
		t.Fatal("the calm pod was evicted")
	}
}

// Disk pressure reclaims node-level resources first: with nodefs.available
// set 512 MiB below what the disk has free, a pod writing 1 GiB into its
// emptyDir brings the node under pressure; nodelet removes the unused
// images first, and, that not being enough, evicts the writer. It runs on
// a containerd of its own, whose images it may lose.
func TestDiskPressureReclaimsImagesFirst(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	own, err := testbed.StartContainerdWith(ctx, 7, testbed.ContainerdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := own.Stop(); err != nil {
			t.Errorf("stopping the test's containerd: %v", err)
		}
	})
	ns := namespace(t)
	var st syscall.Statfs_t
	if err := syscall.Statfs(os.TempDir(), &st); err != nil {
		t.Fatal(err)
	}
	threshold := st.Bavail*uint64(st.Bsize) - 512<<20
	n := startNode(t, "node-disk", own, fmt.Sprintf("imageMinimumGCAge: 1s\nevictionHard: {nodefs.available: %q}\n", fmt.Sprint(threshold)))
	waitNodeReady(t, n.NodeName, 30*time.Second)
	hasImage := func(name string) bool {
		resp, err := own.Images.ListImages(context.Background(), &runtimeapi.ListImagesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, img := range resp.Images {
			if slices.Contains(img.RepoTags, name) {
				return true
			}
		}
		return false
	}
	if !hasImage(testbed.GRPCHealthImage) {
		t.Fatal("the unused image is not there to begin with")
	}
	writer := busyboxPod("writer", n.NodeName, "sh", "-c", "sleep 2; dd if=/dev/zero of=/scratch/fill bs=1M count=1024; sleep 3600")
	writer.Spec.TerminationGracePeriodSeconds = new(int64(1))
	writer.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	writer.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, writer, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, 120*time.Second, ns, "writer", func(p *v1.Pod) (bool, string) {
		return p.Status.Phase == v1.PodFailed, fmt.Sprintf("phase %s", p.Status.Phase)
	})
	if p.Status.Reason != "Evicted" || !strings.HasPrefix(p.Status.Message, "The node was low on resource: ephemeral-storage.") {
		t.Fatalf("writer: %s %q", p.Status.Reason, p.Status.Message)
	}
	log := n.Log()
	reclaimed, evicted := strings.Index(log, "Removed unused images under disk pressure"), strings.Index(log, `"Eviction manager: evicting pod"`)
	if reclaimed < 0 || evicted < 0 || reclaimed > evicted {
		t.Fatalf("images reclaimed at %d, pod evicted at %d in the log: want the images first", reclaimed, evicted)
	}
	if hasImage(testbed.GRPCHealthImage) {
		t.Fatal("the unused image is still there")
	}
}

// runtimeContainersOf lists the IDs of the runtime's containers of a pod.
func runtimeContainersOf(t *testing.T, c *testbed.Containerd, uid types.UID) []string {
	t.Helper()
	cs, err := c.Containers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ctr := range cs {
		if ctr.Labels["io.kubernetes.pod.uid"] == string(uid) {
			out = append(out, ctr.Id)
		}
	}
	return out
}
