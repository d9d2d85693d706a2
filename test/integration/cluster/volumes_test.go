//go:build integration

package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// `kubectl run` works: the pod gets the service account volume the API
// server adds (a bound token, the cluster CA and the namespace), and the
// token authenticates. ConfigMap, secret and downward API volumes carry
// their data into the container.
func TestServiceAccountTokenAndVolumes(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-volumes", cd, "")
	waitNodeReady(t, n.NodeName, 10*time.Second)

	if _, err := cl.Kubectl(ctx, "run", "hello", "-n", ns, "--image", testbed.BusyboxImage, "--image-pull-policy=IfNotPresent",
		"--overrides", `{"spec":{"terminationGracePeriodSeconds":1}}`, "--", "sleep", "3600"); err != nil {
		t.Fatal(err)
	}
	waitPod(t, 30*time.Second, ns, "hello", running)
	c := n.RunningPodContainer("hello", "hello")
	if c == nil {
		t.Fatal("no running container")
	}
	const dir = "/var/run/secrets/kubernetes.io/serviceaccount/"
	token, err := n.Exec(c.Id, "cat", dir+"token")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := n.Exec(c.Id, "cat", dir+"namespace"); err != nil || got != ns {
		t.Errorf("namespace file %q, %v", got, err)
	}
	if got, err := n.Exec(c.Id, "cat", dir+"ca.crt"); err != nil || !strings.Contains(got, "BEGIN CERTIFICATE") {
		t.Errorf("ca.crt %q, %v", got, err)
	}
	// The token authenticates (the service account may do nothing, so 403).
	req, _ := http.NewRequest("GET", cl.APIServer()+"/api/v1/namespaces/"+ns+"/pods", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 10 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("request with the pod's token: %s, want 403 Forbidden (authenticated, not authorised)", resp.Status)
	}
	// TokenReview: the token is the pod's service account's, bound to
	// this very pod.
	pod0, err := cl.Client.CoreV1().Pods(ns).Get(ctx, "hello", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	review, err := cl.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := review.Status
	if !st.Authenticated || st.User.Username != "system:serviceaccount:"+ns+":default" ||
		strings.Join(st.User.Extra["authentication.kubernetes.io/pod-name"], "") != "hello" ||
		strings.Join(st.User.Extra["authentication.kubernetes.io/pod-uid"], "") != string(pod0.UID) {
		t.Errorf("TokenReview of the projected token: %+v", st)
	}

	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"greeting": "hello", "other": "x"}}
	if _, err := cl.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secret := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pw"}, Data: map[string][]byte{"password": []byte("s3cret")}}
	if _, err := cl.Client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := busyboxPod("vols", n.NodeName)
	pod.Labels["tier"] = "web"
	pod.Spec.TerminationGracePeriodSeconds = new(int64(1))
	pod.Spec.Volumes = []v1.Volume{
		{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "settings"}, Items: []v1.KeyToPath{{Key: "greeting", Path: "sub/greeting.txt"}},
		}}},
		{Name: "secret", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "pw", DefaultMode: new(int32(0o400))}}},
		{Name: "missing", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "nope", Optional: new(true)}}},
		{Name: "info", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
			{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}},
			{Path: "tier", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels['tier']"}},
		}}}},
	}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{
		{Name: "cm", MountPath: "/etc/cm", ReadOnly: true}, {Name: "secret", MountPath: "/etc/secret", ReadOnly: true},
		{Name: "missing", MountPath: "/etc/missing", ReadOnly: true}, {Name: "info", MountPath: "/etc/info", ReadOnly: true},
	}
	if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, 30*time.Second, ns, "vols", running)
	c = n.RunningPodContainer("vols", "main")
	for file, want := range map[string]string{
		"/etc/cm/sub/greeting.txt": "hello", "/etc/secret/password": "s3cret", "/etc/info/name": "vols", "/etc/info/tier": "web",
	} {
		if got, err := n.Exec(c.Id, "cat", file); err != nil || got != want {
			t.Errorf("%s = %q (%v), want %q", file, got, err, want)
		}
	}
	if got, err := n.Exec(c.Id, "stat", "-L", "-c", "%a", "/etc/secret/password"); err != nil || strings.TrimSpace(got) != "400" {
		// The name is a symlink through ..data, as upstream's; its target
		// has the mode.
		t.Errorf("secret file mode %q (%v), want 400", got, err)
	}
	if _, err := n.Exec(c.Id, "cat", "/etc/cm/other"); err == nil {
		t.Error("a key not listed in items was projected")
	}
}

// A projected service account token is renewed once 80% of its life has
// passed (the API server's shortest life is 10 minutes, so this test
// waits 8): the file changes under the running container, and both
// tokens authenticate as the pod.
func TestProjectedTokenIsRenewed(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-token", cd, "syncFrequency: 10s\n")
	waitNodeReady(t, n.NodeName, 10*time.Second)
	life := int64(600)
	pod := busyboxPod("renew", n.NodeName)
	pod.Spec.TerminationGracePeriodSeconds = new(int64(1))
	pod.Spec.Volumes = []v1.Volume{{Name: "token", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		Sources: []v1.VolumeProjection{{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &life}}},
	}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "token", MountPath: "/var/run/token", ReadOnly: true}}
	created, err := cl.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitPod(t, 30*time.Second, ns, "renew", running)
	c := n.RunningPodContainer("renew", "main")
	first, err := n.Exec(c.Id, "cat", "/var/run/token/token")
	if err != nil {
		t.Fatal(err)
	}
	review := func(token string) {
		t.Helper()
		r, err := cl.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !r.Status.Authenticated || strings.Join(r.Status.User.Extra["authentication.kubernetes.io/pod-uid"], "") != string(created.UID) {
			t.Errorf("TokenReview: %+v", r.Status)
		}
	}
	review(first)

	// Polled on the host: cheaper than an exec every 50 ms for minutes.
	onHost := filepath.Join(n.RootDir, "pods", string(created.UID), "volumes", "kubernetes.io~projected", "token", "token")
	start := time.Now()
	testbed.Eventually(t, 9*time.Minute+30*time.Second, func() (bool, string) {
		b, err := os.ReadFile(onHost)
		return err == nil && string(b) != first, fmt.Sprintf("token unchanged after %v (%v)", time.Since(start).Round(time.Second), err)
	})
	if elapsed := time.Since(start); elapsed < 7*time.Minute {
		t.Errorf("renewed after %v, before 80%% of its 10-minute life", elapsed)
	}
	second, err := n.Exec(c.Id, "cat", "/var/run/token/token")
	if err != nil || second == first {
		t.Fatalf("the container still reads the first token (%v)", err)
	}
	review(second)
	if got := n.RunningPodContainer("renew", "main"); got == nil || got.Id != c.Id {
		t.Error("the container was restarted for the renewal")
	}
}
