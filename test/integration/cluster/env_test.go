//go:build integration

package cluster

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testbed"
	"github.com/nodelet/nodelet/pkg/volumes/volume"
)

// A pod that refers to a configMap and a secret that do not exist yet
// waits in ContainerCreating with FailedMount events naming them, starts
// as soon as they are created, sees their data in its volumes and
// environment along with the service variables, its own /etc/hosts and a
// cluster resolv.conf; its configMap volume follows an update; and when it
// is deleted its volumes are unmounted and removed from the node.
func TestConfigMapsSecretsEnvAndDNS(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-env", cd, "clusterDNS: [10.0.0.10]\nclusterDomain: cluster.local\n")
	waitNodeReady(t, n.NodeName, 10*time.Second)

	size := resource.MustParse("16Mi")
	pod := busyboxPod("env", n.NodeName)
	pod.Spec.TerminationGracePeriodSeconds = new(int64(1))
	pod.Spec.Hostname, pod.Spec.Subdomain = "env-0", "envs"
	pod.Spec.HostAliases = []v1.HostAlias{{IP: "192.0.2.9", Hostnames: []string{"db.internal"}}}
	pod.Spec.Volumes = []v1.Volume{
		{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "app-config"}}}},
		{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "app-creds"}}},
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: &size}}},
	}
	main := &pod.Spec.Containers[0]
	main.VolumeMounts = []v1.VolumeMount{
		{Name: "config", MountPath: "/etc/config"}, {Name: "creds", MountPath: "/etc/creds", ReadOnly: true},
		{Name: "scratch", MountPath: "/scratch"}, {Name: "scratch", MountPath: "/mine", SubPathExpr: "$(POD_NAME)"},
	}
	main.EnvFrom = []v1.EnvFromSource{{Prefix: "CFG_", ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "app-config"}}}}
	main.Env = []v1.EnvVar{
		{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "PASSWORD", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "app-creds"}, Key: "password"}}},
		{Name: "GREETING", Value: "$(CFG_greeting) from $(POD_NAME)"},
		{Name: "MODE", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "app-config"}, Key: "mode"}}},
		{Name: "MEM_LIMIT_MI", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
		{Name: "NODE", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
	}
	main.EnvFrom = append(main.EnvFrom, v1.EnvFromSource{SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "app-creds"}}})
	main.Resources.Limits = v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}
	created, err := cl.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Waiting for the objects, visibly.
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		evs, err := cl.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=env,reason=FailedMount"})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, `"app-config" not found`) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("FailedMount events %d", len(evs.Items))
	})
	waitPod(t, 5*time.Second, ns, "env", func(p *v1.Pod) (bool, string) {
		cs := p.Status.ContainerStatuses
		ok := p.Status.Phase == v1.PodPending && len(cs) == 1 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == "ContainerCreating"
		return ok, fmt.Sprintf("status %+v", p.Status)
	})

	if _, err := cl.Client.CoreV1().ConfigMaps(ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config"},
		Data: map[string]string{"greeting": "hello", "mode": "fast"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Client.CoreV1().Secrets(ns).Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-creds"},
		Data: map[string][]byte{"password": []byte("hunter2")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The watch on the objects syncs the pod at once, not at its next
	// back-off retry: within 10 s nodelet saw both change and asked for
	// the pod's sync. Running takes the runtime's time on top (a sandbox
	// took 6.9 s and a start 5 s on a loaded CI node), so that wait is
	// longer.
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		log := n.Log()
		for _, object := range []string{"configmap " + ns + "/app-config", "secret " + ns + "/app-creds"} {
			if !strings.Contains(log, fmt.Sprintf(`"An object pods refer to changed" object=%q pods=1`, object)) {
				return false, object + ": no change seen"
			}
		}
		return true, ""
	})
	p := waitPod(t, time.Minute, ns, "env", running)
	c := n.RunningPodContainer("env", "main")
	if c == nil {
		t.Fatal("no running container")
	}
	exec := func(cmd ...string) string {
		t.Helper()
		out, err := n.Exec(c.Id, cmd...)
		if err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
		return strings.TrimSpace(out)
	}
	env := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(exec("env")))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	kube, err := cl.Client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"CFG_greeting": "hello", "CFG_mode": "fast", "PASSWORD": "hunter2", "GREETING": "hello from env",
		"KUBERNETES_SERVICE_HOST": kube.Spec.ClusterIP, "KUBERNETES_SERVICE_PORT": "443",
		"HOSTNAME": "env-0", "MODE": "fast", "MEM_LIMIT_MI": "64", "NODE": n.NodeName, "password": "hunter2",
	} {
		if env[k] != want {
			t.Errorf("env %s = %q, want %q", k, env[k], want)
		}
	}
	if got := exec("cat", "/etc/config/greeting"); got != "hello" {
		t.Errorf("/etc/config/greeting = %q", got)
	}
	if got := exec("cat", "/etc/creds/password"); got != "hunter2" {
		t.Errorf("/etc/creds/password = %q", got)
	}
	mounts := exec("cat", "/proc/mounts")
	for _, dir := range []string{"/etc/creds", "/scratch"} {
		if !strings.Contains(mounts, "tmpfs "+dir+" ") {
			t.Errorf("%s is not a tmpfs:\n%s", dir, mounts)
		}
	}
	exec("sh", "-c", "echo mine > /mine/file")
	if got := exec("cat", "/scratch/env/file"); got != "mine" {
		t.Errorf("subPathExpr: /scratch/env/file = %q", got)
	}
	hosts := exec("cat", "/etc/hosts")
	for _, want := range []string{p.Status.PodIP + "\tenv-0.envs." + ns + ".svc.cluster.local\tenv-0", "192.0.2.9\tdb.internal"} {
		if !strings.Contains(hosts, want) {
			t.Errorf("/etc/hosts lacks %q:\n%s", want, hosts)
		}
	}
	resolv := exec("cat", "/etc/resolv.conf")
	for _, want := range []string{"nameserver 10.0.0.10", "search " + ns + ".svc.cluster.local svc.cluster.local cluster.local", "options ndots:5"} {
		if !strings.Contains(resolv, want) {
			t.Errorf("/etc/resolv.conf lacks %q:\n%s", want, resolv)
		}
	}

	// An update reaches the running pod's volume.
	cm, _ := cl.Client.CoreV1().ConfigMaps(ns).Get(ctx, "app-config", metav1.GetOptions{})
	cm.Data["greeting"] = "bonjour"
	if _, err := cl.Client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		got, _ := n.Exec(c.Id, "cat", "/etc/config/greeting")
		return got == "bonjour", fmt.Sprintf("greeting %q", got)
	})

	// Deleted: the volumes leave the node.
	volumes := filepath.Join(n.RootDir, "pods", string(created.UID), "volumes")
	if err := cl.Client.CoreV1().Pods(ns).Delete(ctx, "env", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testbed.Eventually(t, 20*time.Second, func() (bool, string) {
		_, err := os.Stat(volumes)
		if mounted, _ := volume.MountPointsUnder(volumes); len(mounted) > 0 {
			return false, fmt.Sprintf("still mounted: %v", mounted)
		}
		return os.IsNotExist(err), fmt.Sprintf("%s: %v", volumes, err)
	})
}

// A container whose environment needs a secret key that is missing waits
// with CreateContainerConfigError naming it, and starts once the key is
// added.
func TestCreateContainerConfigErrorUntilTheKeyExists(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-envkey", cd, "")
	waitNodeReady(t, n.NodeName, 10*time.Second)
	secret := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Data: map[string][]byte{"other": []byte("x")}}
	if _, err := cl.Client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := busyboxPod("needs-key", n.NodeName)
	pod.Spec.TerminationGracePeriodSeconds = new(int64(1))
	pod.Spec.Containers[0].Env = []v1.EnvVar{{Name: "TOKEN", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: "s"}, Key: "token"}}}}
	if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, 30*time.Second, ns, "needs-key", func(p *v1.Pod) (bool, string) {
		cs := p.Status.ContainerStatuses
		ok := len(cs) == 1 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == "CreateContainerConfigError" &&
			strings.Contains(cs[0].State.Waiting.Message, "couldn't find key token in secret")
		return ok, fmt.Sprintf("statuses %+v", cs)
	})
	secret.Data["token"] = []byte("t0k3n")
	if _, err := cl.Client.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, 15*time.Second, ns, "needs-key", running)
	c := n.RunningPodContainer("needs-key", "main")
	if got, err := n.Exec(c.Id, "sh", "-c", "echo $TOKEN"); err != nil || strings.TrimSpace(got) != "t0k3n" {
		t.Errorf("TOKEN = %q (%v)", got, err)
	}
}
