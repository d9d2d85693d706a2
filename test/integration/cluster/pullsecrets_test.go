//go:build integration

package cluster

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

func dockerConfigSecret(name, host, user, password string) *v1.Secret {
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	return &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Type:       v1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{v1.DockerConfigJsonKey: fmt.Appendf(nil, `{"auths":{%q:{"auth":%q}}}`, host, auth)},
	}
}

// Pull secrets come from the API: a pod's imagePullSecrets and its
// service account's. A wrong secret leaves the pod in ErrImagePull and
// then ImagePullBackOff; fixing the secret lets it start.
func TestPullSecretsFromTheAPI(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-pull", cd, "")
	waitNodeReady(t, n.NodeName, 10*time.Second)
	reg := testbed.StartRegistry(t, cd)
	image := reg.Push(t, "private/app:1")
	secrets := cl.Client.CoreV1().Secrets(ns)

	if _, err := secrets.Create(ctx, dockerConfigSecret("good", reg.Host, testbed.RegistryUser, testbed.RegistryPassword), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "puller"}, ImagePullSecrets: []v1.LocalObjectReference{{Name: "good"}}}
	if _, err := cl.Client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	viaSA := busyboxPod("via-sa", n.NodeName)
	viaSA.Spec.ServiceAccountName = "puller"
	viaSA.Spec.Containers[0].Image = image
	if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, viaSA, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, 30*time.Second, ns, "via-sa", running)

	if _, err := secrets.Create(ctx, dockerConfigSecret("creds", reg.Host, testbed.RegistryUser, "wrong"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := busyboxPod("via-pod", n.NodeName)
	pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "creds"}}
	pod.Spec.Containers[0].Image = image
	pod.Spec.Containers[0].ImagePullPolicy = v1.PullAlways
	// Every status the pod had, through a watch: ErrImagePull may last
	// only until the next sync (a poll missed it).
	list, err := cl.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	seen := waitingReasons(t, ns, "via-pod", list.ResourceVersion, 30*time.Second, "ErrImagePull", "ImagePullBackOff")
	t.Logf("waiting reasons seen: %v", seen)
	waitEvents(t, ns, "via-pod", "Failed", "BackOff")

	fixed := dockerConfigSecret("creds", reg.Host, testbed.RegistryUser, testbed.RegistryPassword)
	if _, err := secrets.Update(ctx, fixed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The back-off after two failures is at most 20 s.
	waitPod(t, 40*time.Second, ns, "via-pod", running)
}

// waitingReasons watches the pod from resourceVersion on until its
// container has waited for every one of want, and returns every waiting
// reason seen. The test client's requests end after 5 s, so the watch is
// taken again from the last version seen.
func waitingReasons(t *testing.T, ns, name, resourceVersion string, timeout time.Duration, want ...string) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	seen := map[string]bool{}
	all := func() bool {
		for _, r := range want {
			if !seen[r] {
				return false
			}
		}
		return true
	}
	for !all() {
		w, err := cl.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: resourceVersion})
		if err != nil {
			t.Fatalf("watching %s (waiting reasons seen: %v): %v", name, seen, err)
		}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*v1.Pod)
			if !ok {
				continue
			}
			resourceVersion = p.ResourceVersion
			if cs := p.Status.ContainerStatuses; len(cs) == 1 && cs[0].State.Waiting != nil {
				seen[cs[0].State.Waiting.Reason] = true
			}
			if all() {
				break
			}
		}
		w.Stop()
	}
	return seen
}
