//go:build integration

package devices

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

const testDriver = "test-driver.cdi.k8s.io"

// TestDRA runs upstream's DRA test driver as a node's kubelet plugin
// and a pod through the real API server, controller-manager and
// scheduler: the controller makes the pod's ResourceClaim from its
// template, the scheduler allocates one of the driver's devices, nodelet
// prepares it before the pod's sandbox and gives the container its CDI
// device (the driver's env); the claim stays prepared across a SIGKILL
// of nodelet, and is unprepared once the pod is deleted.
func TestDRA(t *testing.T) {
	ctx := context.Background()
	ns := cl.Namespace(t)
	n := cl.StartNode(t, "dra", cd, "")
	driver := testbed.StartDRATestDriver(t, n, cl.AdminKubeconfig)
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: ns},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", testDriver)},
		}}},
	}
	if _, err := cl.Client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cl.Client.ResourceV1().DeviceClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
	})
	template := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "accelerator", Namespace: ns},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class.Name}}},
		}}},
	}
	if _, err := cl.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, template, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := pod("trainer", "", nil)
	p.Spec.NodeSelector = map[string]string{v1.LabelHostname: n.NodeName}
	p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "accel", ResourceClaimTemplateName: &template.Name}}
	p.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "accel"}}
	create(t, ns, p)
	running := cl.WaitPod(t, 2*time.Minute, ns, "trainer", testbed.PodRunning)

	if len(running.Status.ResourceClaimStatuses) != 1 || running.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("resourceClaimStatuses: %+v", running.Status.ResourceClaimStatuses)
	}
	claimName := *running.Status.ResourceClaimStatuses[0].ResourceClaimName
	claim, err := cl.Client.ResourceV1().ResourceClaims(ns).Get(ctx, claimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The driver's CDI device sets claim_<claim>_<request>=true.
	env := "claim_" + regexp.MustCompile(`[^a-zA-Z0-9]`).ReplaceAllString(claimName+"_gpu", "_") + "=true"
	checkEnv := func(when string) {
		t.Helper()
		if out := execMain(t, n, ns, "trainer", "env"); !strings.Contains(out, env) {
			t.Errorf("%s: the container's env lacks %s:\n%s", when, env, out)
		}
	}
	checkEnv("at start")
	spec := filepath.Join(cd.CDIDir, fmt.Sprintf("%s-%s-gpu.json", testDriver, claim.UID))
	if _, err := os.Stat(spec); err != nil {
		t.Fatalf("the claim is not prepared: %v", err)
	}
	state := filepath.Join(n.RootDir, "dra_manager_state")
	if b, err := os.ReadFile(state); err != nil || !strings.Contains(string(b), string(claim.UID)) {
		t.Errorf("dra_manager_state does not hold the claim %s: %v\n%s", claim.UID, err, b)
	}

	before := containerStatus(t, ns, "trainer")
	n.Kill()
	n.Start()
	// The restarted nodelet syncs the pod (its status shows it) and
	// keeps the claim and the container.
	cl.WaitPod(t, time.Minute, ns, "trainer", func(p *v1.Pod) (bool, string) {
		return condition(p, v1.PodReady) == v1.ConditionTrue && p.Status.StartTime != nil, fmt.Sprintf("status %+v", p.Status)
	})
	if after := containerStatus(t, ns, "trainer"); after.ContainerID != before.ContainerID || after.RestartCount != 0 {
		t.Errorf("after the restart the container is %s (restarts %d), was %s", after.ContainerID, after.RestartCount, before.ContainerID)
	}
	checkEnv("after the restart")
	if _, err := os.Stat(spec); err != nil {
		t.Errorf("the claim is unprepared after the restart: %v", err)
	}

	deletePod(t, ns, "trainer")
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		_, err := os.Stat(spec)
		b, _ := os.ReadFile(state)
		return os.IsNotExist(err) && !strings.Contains(string(b), string(claim.UID)),
			fmt.Sprintf("the claim is still prepared (CDI spec: %v) or in dra_manager_state:\n%s", err, b)
	})
	if !strings.Contains(driver.Output(), "NodeUnprepareResources") {
		t.Errorf("the driver was never asked to unprepare:\n%s", driver.Output())
	}
}

func condition(p *v1.Pod, t v1.PodConditionType) v1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

// TestDRAExtendedResource: a DeviceClass names an extended resource, and a
// pod asks for it as it would for a device plugin's. The node offers no
// such resource; the scheduler backs the request with a ResourceClaim of
// its own (the pod's status.extendedResourceClaimStatus). nodelet admits
// the pod (as upstream's kubelet leaves such a request out of its count),
// prepares the claim and gives the container the driver's CDI device.
func TestDRAExtendedResource(t *testing.T) {
	ctx := context.Background()
	ns := cl.Namespace(t)
	n := cl.StartNode(t, "dra-extended", cd, "")
	testbed.StartDRATestDriver(t, n, cl.AdminKubeconfig)
	const resourceName = "example.com/accelerator"
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: ns},
		Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{
				CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", testDriver)},
			}},
			ExtendedResourceName: new(resourceName),
		},
	}
	if _, err := cl.Client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cl.Client.ResourceV1().DeviceClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
	})
	p := pod("extended", "", v1.ResourceList{resourceName: resource.MustParse("1")})
	p.Spec.NodeSelector = map[string]string{v1.LabelHostname: n.NodeName}
	create(t, ns, p)
	running := cl.WaitPod(t, 2*time.Minute, ns, "extended", testbed.PodRunning)

	s := running.Status.ExtendedResourceClaimStatus
	if s == nil || len(s.RequestMappings) != 1 || s.RequestMappings[0].ContainerName != "main" {
		t.Fatalf("extendedResourceClaimStatus: %+v", s)
	}
	env := "claim_" + regexp.MustCompile(`[^a-zA-Z0-9]`).ReplaceAllString(s.ResourceClaimName+"_"+s.RequestMappings[0].RequestName, "_") + "=true"
	if out := execMain(t, n, ns, "extended", "env"); !strings.Contains(out, env) {
		t.Errorf("the container's env lacks %s:\n%s", env, out)
	}
	deletePod(t, ns, "extended")
}
