//go:build integration

package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/testbed"
)

// The API sees init container statuses as the upstream kubelet reports
// them, and observedGeneration follows each spec update.
func TestInitStatusesAndObservedGeneration(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-fidelity", cd, "")
	waitNodeReady(t, n.NodeName, 10*time.Second)
	pod := busyboxPod("gen", n.NodeName)
	always := v1.ContainerRestartPolicyAlways
	pod.Spec.InitContainers = []v1.Container{
		{Name: "proxy", Image: testbed.BusyboxImage, Command: []string{"sleep", "3600"}, RestartPolicy: &always},
		{Name: "setup", Image: testbed.BusyboxImage, Command: []string{"true"}},
	}
	pods := cl.Client.CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitPod(t, 30*time.Second, ns, "gen", func(p *v1.Pod) (bool, string) {
		ok, msg := running(p)
		return ok && condition(p, v1.PodReady) == v1.ConditionTrue && p.Status.ObservedGeneration == p.Generation, msg
	})
	want := map[string][2]bool{"proxy": {true, true}, "setup": {false, true}} // started, ready
	for _, s := range got.Status.InitContainerStatuses {
		if s.Started == nil || *s.Started != want[s.Name][0] || s.Ready != want[s.Name][1] {
			t.Errorf("%s: started %v ready %v, want %v", s.Name, ptrBool(s.Started), s.Ready, want[s.Name])
		}
	}

	// A new image for the app: generation 2, observed once acted on.
	patch := fmt.Sprintf(`{"spec":{"containers":[{"name":"main","image":%q}]}}`, "docker.io/library/busybox:latest")
	updated, err := pods.Patch(ctx, "gen", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if updated.Generation < 2 {
		t.Fatalf("generation %d after a spec update", updated.Generation)
	}
	waitPod(t, 60*time.Second, ns, "gen", func(p *v1.Pod) (bool, string) {
		if p.Status.ObservedGeneration != updated.Generation {
			return false, fmt.Sprintf("observedGeneration %d, generation %d", p.Status.ObservedGeneration, updated.Generation)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodReady && c.ObservedGeneration != updated.Generation {
				return false, fmt.Sprintf("Ready condition observedGeneration %d", c.ObservedGeneration)
			}
		}
		return true, ""
	})
}

func ptrBool(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}

// Environment variable names follow the API's relaxed rule: keys with
// dashes and dots, or starting with a digit, reach the container.
func TestRelaxedEnvironmentVariableNames(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-envnames", cd, "")
	waitNodeReady(t, n.NodeName, 10*time.Second)
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "relaxed"}, Data: map[string]string{"1st-key.v2": "one", "dashed-key": "two"}}
	if _, err := cl.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The shell would not export names that are not identifiers: read
	// the environment the runtime gave the shell itself ($$ is the
	// escape of $ in a command). The shell must not exec tr as its last
	// command (tr would read its own, then empty, environ): it echoes
	// after it.
	pod := busyboxPod("envnames", n.NodeName, "sh", "-c", `echo start > /dev/termination-log; tr '\0' '\n' < /proc/$$$$/environ >> /dev/termination-log; echo "rc $? pid $$$$" >> /dev/termination-log`)
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	pod.Spec.EnableServiceLinks = new(false) // keep the message short
	pod.Spec.Containers[0].EnvFrom = []v1.EnvFromSource{
		{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "relaxed"}}},
		{Prefix: "9.", ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "relaxed"}}},
	}
	pod.Spec.Containers[0].Env = []v1.EnvVar{{Name: "my.dotted-var", Value: "three"}}
	if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	done := waitPod(t, 30*time.Second, ns, "envnames", func(p *v1.Pod) (bool, string) {
		return p.Status.Phase == v1.PodSucceeded, fmt.Sprintf("phase %s", p.Status.Phase)
	})
	env := done.Status.ContainerStatuses[0].State.Terminated.Message
	for _, kv := range []string{"1st-key.v2=one", "dashed-key=two", "9.1st-key.v2=one", "9.dashed-key=two", "my.dotted-var=three"} {
		if !strings.Contains(env, kv+"\n") {
			t.Errorf("%s not in the container's environment:\n%s", kv, env)
		}
	}
}
