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
	if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	waitPod(t, 30*time.Second, ns, "via-pod", func(p *v1.Pod) (bool, string) {
		if cs := p.Status.ContainerStatuses; len(cs) == 1 && cs[0].State.Waiting != nil {
			seen[cs[0].State.Waiting.Reason] = true
		}
		return seen["ErrImagePull"] && seen["ImagePullBackOff"], fmt.Sprintf("waiting reasons seen: %v", seen)
	})
	waitEvents(t, ns, "via-pod", "Failed", "BackOff")

	fixed := dockerConfigSecret("creds", reg.Host, testbed.RegistryUser, testbed.RegistryPassword)
	if _, err := secrets.Update(ctx, fixed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The back-off after two failures is at most 20 s.
	waitPod(t, 40*time.Second, ns, "via-pod", running)
}
