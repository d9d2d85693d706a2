//go:build integration

package runtime

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/testbed"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/images"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
)

type helper struct{ dir string }

func (h helper) RunContainerOptions(ctx context.Context, pod *v1.Pod, c *v1.Container, podIPs []string) (*kuberuntime.RunContainerOptions, error) {
	return &kuberuntime.RunContainerOptions{}, nil
}
func (h helper) PodContainerDir(uid types.UID, name string) string {
	return h.dir + "/" + string(uid) + "/" + name
}
func (h helper) PodDNS(pod *v1.Pod) (*runtimeapi.DNSConfig, string, error) {
	return nil, pod.Name, nil
}

type allGone struct{}

func (allGone) IsPodTerminationRequested(types.UID) bool { return false }
func (allGone) ShouldPodContentBeRemoved(types.UID) bool { return true }

func newManager(t testing.TB) *kuberuntime.Manager {
	return kuberuntime.New(kuberuntime.Options{
		Runtime: cd.Runtime, Images: images.NewPuller(images.PullerOptions{Images: cd.Images}), Helper: helper{t.TempDir()},
		PodLogsDir: t.TempDir(), RequestTimeout: time.Minute,
	})
}

func TestSmokeStartKillCollect(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	pod := &v1.Pod{}
	pod.Name, pod.Namespace, pod.UID = "smoke", "default", types.UID(uuid.NewUUID())
	pod.Spec.RestartPolicy = v1.RestartPolicyAlways
	pod.Spec.Containers = []v1.Container{{Name: "c", Image: testbed.BusyboxImage, Command: []string{"sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"},
		TerminationMessagePath: "/dev/termination-log"}}

	status, err := m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	res := m.SyncPod(ctx, pod, status, nil, nil)
	if err := res.Error(); err != nil {
		t.Fatalf("SyncPod: %v", err)
	}
	status, err = m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("status: %v ips=%v", status, status.IPs)
	if s := status.FindContainerStatusByName("c"); s == nil || s.State != container.StateRunning {
		t.Fatalf("container not running: %v", status)
	}
	if len(status.IPs) == 0 {
		t.Fatalf("pod has no IP")
	}
	start := time.Now()
	if err := m.KillPod(ctx, pod, status.ToRunningPod(), nil); err != nil {
		t.Fatalf("KillPod: %v", err)
	}
	t.Logf("KillPod took %v", time.Since(start))
	if err := m.ContainerGC().GarbageCollect(ctx, kuberuntime.GCPolicy{MaxPerPodContainer: 1}, allGone{}); err != nil {
		t.Fatal(err)
	}
	sbs, _ := cd.Sandboxes(ctx)
	cs, _ := cd.Containers(ctx)
	if len(sbs)+len(cs) != 0 {
		t.Fatalf("left behind %d sandboxes and %d containers", len(sbs), len(cs))
	}
}
