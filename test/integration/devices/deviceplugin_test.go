//go:build integration

package devices

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

const sampleResource = "example.com/resource"

// TestDevicePlugin runs upstream's sample device plugin (two devices of
// example.com/resource) beside a node: its devices reach the Node's
// capacity and allocatable; a pod gets one (the plugin's mount and its
// CDI device); a pod asking for more than is free is rejected as
// upstream rejects it; a SIGKILL of nodelet keeps the pod's device and
// container, and the plugin registers again; a plugin that stops leaves
// its devices unhealthy until it comes back; deleted pods free them.
// The pod-resources API reports all of it to a gRPC client.
func TestDevicePlugin(t *testing.T) {
	ns := cl.Namespace(t)
	n := cl.StartNode(t, "devices", cd, "")
	plugin := testbed.StartSampleDevicePlugin(t, n)
	waitNodeDevices(t, n.NodeName, 2, 2)
	pr := podResources(t, n)
	waitAllocatable(t, pr, 2)

	create(t, ns, pod("a", n.NodeName, quantities(sampleResource, "1")))
	cl.WaitPod(t, time.Minute, ns, "a", testbed.PodRunning)
	devA := podDevice(t, n, pr, ns, "a")
	uidA := podUID(t, ns, "a")
	if got := checkpointed(t, n)[uidA]; got != devA {
		t.Fatalf("the checkpoint holds %q for pod a, want %s", got, devA)
	}

	// Two asked, one free: nodeName skips the scheduler, as a static or
	// a misscheduled pod would; admission refuses it.
	create(t, ns, pod("greedy", n.NodeName, quantities(sampleResource, "2")))
	greedy := cl.WaitPod(t, time.Minute, ns, "greedy", func(p *v1.Pod) (bool, string) {
		return p.Status.Phase == v1.PodFailed, fmt.Sprintf("phase %q", p.Status.Phase)
	})
	want := "Pod was rejected: Allocate failed due to requested number of devices unavailable for example.com/resource. Requested: 2, Available: 1, which is unexpected"
	if greedy.Status.Reason != "UnexpectedAdmissionError" || greedy.Status.Message != want {
		t.Errorf("greedy pod: reason %q message %q, want UnexpectedAdmissionError %q", greedy.Status.Reason, greedy.Status.Message, want)
	}

	// A crash: the device stays pod a's (the other one goes to the next
	// pod), and its container runs on, never restarted.
	before := containerStatus(t, ns, "a")
	n.Kill()
	n.Start()
	waitAllocatable(t, pr, 2) // the plugin saw the new socket and registered again
	after := containerStatus(t, ns, "a")
	if after.ContainerID != before.ContainerID || after.RestartCount != 0 {
		t.Errorf("pod a's container after the restart: %s restarts %d, before %s", after.ContainerID, after.RestartCount, before.ContainerID)
	}
	if got := podDevice(t, n, pr, ns, "a"); got != devA {
		t.Errorf("pod a holds %s after the restart, had %s", got, devA)
	}
	create(t, ns, pod("b", n.NodeName, quantities(sampleResource, "1")))
	cl.WaitPod(t, time.Minute, ns, "b", testbed.PodRunning)
	if devB := podDevice(t, n, pr, ns, "b"); devB == devA {
		t.Errorf("pod b got pod a's device %s", devA)
	}

	// The plugin stops: its devices are unhealthy (capacity stays, as
	// upstream keeps them for 5 minutes), the pods keep theirs; it comes
	// back and they are healthy again.
	if err := plugin.Stop(); err != nil {
		t.Fatal(err)
	}
	waitNodeDevices(t, n.NodeName, 2, 0)
	waitAllocatable(t, pr, 0)
	if err := plugin.Start(); err != nil {
		t.Fatal(err)
	}
	waitNodeDevices(t, n.NodeName, 2, 2)
	waitAllocatable(t, pr, 2)
	for _, name := range []string{"a", "b"} {
		if s := containerStatus(t, ns, name); s.RestartCount != 0 || s.State.Running == nil {
			t.Errorf("pod %s after the plugin's restart: %+v", name, s)
		}
	}

	// Deleted pods free their devices: both go to one pod.
	deletePod(t, ns, "a")
	deletePod(t, ns, "b")
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		held := checkpointed(t, n)
		return len(held) == 0, fmt.Sprintf("the checkpoint still holds pods' devices: %v", held)
	})
	create(t, ns, pod("both", n.NodeName, quantities(sampleResource, "2")))
	cl.WaitPod(t, time.Minute, ns, "both", testbed.PodRunning)
	if c := containerResources(t, pr, ns, "both"); len(c.GetDevices()) != 1 || len(c.Devices[0].DeviceIds) != 2 {
		t.Errorf("pod-resources List for the pod of two devices: %v", c)
	}
}

// checkpointed reads node n's device checkpoint (upstream's format): the
// devices each pod holds, by pod UID.
func checkpointed(t *testing.T, n *testbed.Nodelet) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.RootDir, "device-plugins", "kubelet_internal_checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	var cp struct {
		Data struct {
			PodDeviceEntries []struct {
				PodUID    string
				DeviceIDs map[string][]string
			}
		}
	}
	if err := json.Unmarshal(b, &cp); err != nil {
		t.Fatalf("the device checkpoint: %v\n%s", err, b)
	}
	held := map[string]string{}
	for _, e := range cp.Data.PodDeviceEntries {
		for _, ids := range e.DeviceIDs {
			held[e.PodUID] = strings.Join(append(strings.Fields(held[e.PodUID]), ids...), " ")
		}
	}
	return held
}

func podUID(t *testing.T, ns, name string) string {
	t.Helper()
	p, err := cl.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(p.UID)
}

// podDevice is the device pod ns/name holds: as the container sees it
// (the plugin's mount /tmp/Dev-N, its CDI device's env and device node)
// and as pod-resources List reports it, which must agree.
func podDevice(t *testing.T, n *testbed.Nodelet, pr podresourcesapi.PodResourcesListerClient, ns, name string) string {
	t.Helper()
	dev := execMain(t, n, ns, name, "sh", "-c", "cd /tmp && ls -d Dev-*")
	if dev != "Dev-1" && dev != "Dev-2" {
		t.Fatalf("pod %s has mounts %q, want one of Dev-1, Dev-2", name, dev)
	}
	cdi := execMain(t, n, ns, name, "sh", "-c", `echo "$CDI_DEVICE"; stat -c %F /tmp/CDI-`+dev)
	if want := "CDI-" + dev + "\nblock special file"; cdi != want {
		t.Errorf("pod %s's CDI device: %q, want %q", name, cdi, want)
	}
	c := containerResources(t, pr, ns, name)
	if len(c.GetDevices()) != 1 || c.Devices[0].ResourceName != sampleResource || strings.Join(c.Devices[0].DeviceIds, ",") != dev {
		t.Errorf("pod-resources List for %s: %v, want %s %s", name, c, sampleResource, dev)
	}
	return dev
}

// waitNodeDevices waits for the Node's capacity and allocatable of the
// sample resource.
func waitNodeDevices(t *testing.T, node string, capacity, allocatable int64) {
	t.Helper()
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		nd, err := cl.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c, a := nd.Status.Capacity[sampleResource], nd.Status.Allocatable[sampleResource]
		return c.Value() == capacity && a.Value() == allocatable,
			fmt.Sprintf("node %s: capacity %s allocatable %s of %s, want %d and %d", node, c.String(), a.String(), sampleResource, capacity, allocatable)
	})
}

// waitAllocatable waits until GetAllocatableResources lists n healthy
// devices of the sample resource.
func waitAllocatable(t *testing.T, pr podresourcesapi.PodResourcesListerClient, n int) {
	t.Helper()
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		resp, err := pr.GetAllocatableResources(context.Background(), &podresourcesapi.AllocatableResourcesRequest{})
		if err != nil {
			return false, err.Error()
		}
		got := 0
		for _, d := range resp.Devices {
			if d.ResourceName == sampleResource {
				got += len(d.DeviceIds)
			}
		}
		return got == n, fmt.Sprintf("GetAllocatableResources: %d devices of %s, want %d: %v", got, sampleResource, n, resp.Devices)
	})
}
