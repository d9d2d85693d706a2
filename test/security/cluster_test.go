//go:build integration

package security

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// clusterNode runs a nodelet registered as name, with upstream's default
// kubelet API security: webhook authentication and authorization, no
// anonymous requests, no read-only port but the test bed's own.
func clusterNode(t *testing.T, name string) *testbed.Nodelet {
	t.Helper()
	kubeconfig, err := cl.NodeKubeconfig(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := cl.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting node %s: %v", name, err)
		}
	})
	return testbed.StartNodelet(t, cd, testbed.NodeletOptions{
		NodeName: name, Kubeconfig: kubeconfig, CgroupRoot: testbed.CgroupRoot() + "/" + name,
		ExtraConfig: fmt.Sprintf("authentication:\n  x509:\n    clientCAFile: %s\n", cl.CAFile()),
	})
}

// namespace makes a namespace for the test, with its default service
// account.
func namespace(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	if _, err := cl.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	testbed.Eventually(t, 2*time.Minute, func() (bool, string) {
		_, err := cl.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprintf("no default service account: %v", err)
	})
}

// tokenGranted is the token of a new service account allowed only the
// given node subresources (none: authenticated, allowed nothing).
func tokenGranted(t *testing.T, ns, name string, subresources ...string) string {
	t.Helper()
	ctx := context.Background()
	sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := cl.Client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(subresources) > 0 {
		var resources []string
		for _, s := range subresources {
			resources = append(resources, "nodes/"+s)
		}
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: resources, Verbs: []string{"get", "create"}}}}
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: name}}}
		if _, err := cl.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cl.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
			_ = cl.Client.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
		})
	}
	tr, err := cl.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// endpoint is one door of the kubelet API and the node subresource that
// opens it besides nodes/proxy.
type endpoint struct {
	method, path, fine string
}

var endpoints = []endpoint{
	{"GET", "/pods", "pods"}, {"GET", "/runningpods/", "pods"}, {"GET", "/healthz", "healthz"},
	{"GET", "/configz", "configz"}, {"GET", "/metrics", "metrics"}, {"GET", "/metrics/cadvisor", "metrics"},
	{"GET", "/metrics/resource", "metrics"}, {"GET", "/metrics/probes", "metrics"}, {"GET", "/stats/summary", "stats"},
	{"GET", "/containerLogs/sec-api/victim/main", ""}, {"POST", "/exec/sec-api/victim/main?command=cat&command=/etc/hostname&output=1", ""},
	{"POST", "/run/sec-api/victim/main?cmd=id", ""}, {"POST", "/attach/sec-api/victim/main?output=1", ""},
	{"POST", "/portForward/sec-api/victim", ""}, {"GET", "/spec/", ""}, {"GET", "/debug/pprof/", ""},
	{"GET", "/logs/", "log"}, {"POST", "/checkpoint/sec-api/victim/main", "checkpoint"},
}

// Every endpoint of the kubelet API refuses a request without
// credentials (401), and one whose identity the API server does not
// authorize for it (403); an identity granted only nodes/pods,
// nodes/healthz or nodes/metrics reaches those endpoints and no other, as
// upstream's fine-grained authorization has it.
func TestKubeletAPIDoors(t *testing.T) {
	const ns = "sec-api"
	namespace(t, ns)
	n := clusterNode(t, "sec-api-node")
	victim := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "victim"}, Spec: v1.PodSpec{NodeName: n.NodeName, AutomountServiceAccountToken: new(false),
		Containers: []v1.Container{{Name: "main", Image: testbed.BusyboxImage, Command: []string{"sleep", "3600"}, ImagePullPolicy: v1.PullIfNotPresent,
			Env: []v1.EnvVar{{Name: "SECRET", Value: canary.token}}}}}}
	if _, err := cl.Client.CoreV1().Pods(ns).Create(context.Background(), victim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		p, err := cl.Client.CoreV1().Pods(ns).Get(context.Background(), "victim", metav1.GetOptions{})
		return err == nil && p.Status.Phase == v1.PodRunning, fmt.Sprintf("victim: %v %v", err, p.Status.Phase)
	})
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 10 * time.Second}
	call := func(e endpoint, token string) (int, string) {
		req, _ := http.NewRequest(e.method, fmt.Sprintf("https://127.0.0.1:%d%s", n.APIPort, e.path), nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", e.method, e.path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(body)
	}
	identities := []struct {
		name   string
		grants []string
	}{{"nobody", nil}, {"pods-reader", []string{"pods"}}, {"health-checker", []string{"healthz"}}, {"scraper", []string{"metrics"}}}
	tokens := map[string]string{"anonymous": ""}
	for _, id := range identities {
		tokens[id.name] = tokenGranted(t, ns, id.name, id.grants...)
	}
	// The API server answers authorization from its informers: wait for
	// the grants to take.
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		code, _ := call(endpoints[0], tokens["pods-reader"])
		return code == http.StatusOK, fmt.Sprintf("pods-reader on /pods: %d", code)
	})
	for _, e := range endpoints {
		t.Run(strings.TrimPrefix(strings.SplitN(e.path, "?", 2)[0], "/"), func(t *testing.T) {
			r := &row{scenario: "kubelet-api " + e.method + " " + strings.SplitN(e.path, "?", 2)[0], attack: "no credentials; each identity"}
			record(t, r)
			var answers []string
			for _, who := range []string{"anonymous", "nobody", "pods-reader", "health-checker", "scraper"} {
				code, body := call(e, tokens[who])
				want := http.StatusForbidden
				switch {
				case who == "anonymous":
					want = http.StatusUnauthorized
				case e.fine != "" && grantsOf(identities, who) == e.fine:
					want = 0 // allowed: any answer but 401 and 403
				}
				if (want == 0 && (code == http.StatusUnauthorized || code == http.StatusForbidden)) || (want != 0 && code != want) {
					t.Errorf("%s: %d %.100q, want %s", who, code, body, map[int]string{0: "allowed", 401: "401", 403: "403"}[want])
				}
				if want != 0 && strings.Contains(body, canary.token) {
					t.Errorf("%s: a refused request returned the victim's secret", who)
				}
				answers = append(answers, fmt.Sprintf("%s %d", who, code))
			}
			r.answer = strings.Join(answers, ", ")
			r.invariant = "no pod data without authorization"
		})
	}
}

func grantsOf(ids []struct {
	name   string
	grants []string
}, who string) string {
	for _, id := range ids {
		if id.name == who && len(id.grants) > 0 {
			return id.grants[0]
		}
	}
	return ""
}

// A private image pulled for a pod with the pull secret is not handed to
// a pod without it: that pod pulls again with what it has, and fails;
// under pull policy Never it never starts.
func TestPrivateImageNotShared(t *testing.T) {
	const ns = "sec-images"
	ctx := context.Background()
	namespace(t, ns)
	n := clusterNode(t, "sec-images-node")
	reg := testbed.StartRegistry(t, cd)
	image := reg.Push(t, "private/secret-app:1")
	auth := base64.StdEncoding.EncodeToString([]byte(testbed.RegistryUser + ":" + testbed.RegistryPassword))
	secret := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"}, Type: v1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{v1.DockerConfigJsonKey: fmt.Appendf(nil, `{"auths":{%q:{"auth":%q}}}`, reg.Host, auth)}}
	if _, err := cl.Client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name string, secret bool, policy v1.PullPolicy) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PodSpec{NodeName: n.NodeName, AutomountServiceAccountToken: new(false),
			Containers: []v1.Container{{Name: "main", Image: image, Command: []string{"sleep", "3600"}, ImagePullPolicy: policy}}}}
		if secret {
			p.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "creds"}}
		}
		return p
	}
	get := func(name string) *v1.Pod {
		p, err := cl.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	waiting := func(name, reason string) string {
		var msg string
		testbed.Eventually(t, podTimeout, func() (bool, string) {
			cs := get(name).Status.ContainerStatuses
			if len(cs) == 1 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == reason {
				msg = cs[0].State.Waiting.Message
				return true, ""
			}
			return false, fmt.Sprintf("%s: %+v", name, cs)
		})
		return reason + ": " + msg
	}
	if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, pod("owner", true, v1.PullIfNotPresent), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		return get("owner").Status.Phase == v1.PodRunning, "owner not running"
	})
	for _, tc := range []struct {
		name, attack string
		policy       v1.PullPolicy
		reason       string
	}{
		{"thief", "same image, no pull secret, IfNotPresent", v1.PullIfNotPresent, "ErrImagePull"},
		{"thief-never", "same image, no pull secret, Never", v1.PullNever, "ErrImageNeverPull"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &row{scenario: "image-credentials " + tc.name, attack: tc.attack}
			record(t, r)
			before, refusedBefore := reg.ManifestRequests("private/secret-app"), reg.RefusedRequests("private/secret-app")
			if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, pod(tc.name, false, tc.policy), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			r.answer = waiting(tc.name, tc.reason)
			asked := reg.ManifestRequests("private/secret-app") - before
			refused := reg.RefusedRequests("private/secret-app") - refusedBefore
			if tc.policy == v1.PullIfNotPresent && refused == 0 {
				t.Error("the pod without the secret was not made to pull the image itself")
			}
			if asked != 0 {
				t.Errorf("the registry served %d manifests to a pod without the secret", asked)
			}
			if tc.policy == v1.PullNever && refused != 0 {
				t.Errorf("pull policy Never asked the registry %d times", refused)
			}
			if got := len(n.PodContainers(tc.name)); got != 0 {
				t.Errorf("%d containers created from the private image for a pod without its secret", got)
			}
			r.invariant = "the private image never ran for it"
		})
	}
}

// A hardened node's configuration (seccompDefault, protectKernelDefaults,
// no read-only port, Webhook authentication and authorization, the
// defaults) runs the example pods: their containers get the runtime's
// seccomp filter, and no port serves anyone unauthenticated.
func TestHardenedNode(t *testing.T) {
	r := &row{scenario: "hardened-node", attack: "seccompDefault, protectKernelDefaults, readOnlyPort 0, Webhook"}
	record(t, r)
	kubeconfig, err := cl.NodeKubeconfig("sec-hardened")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cl.Client.CoreV1().Nodes().Delete(context.Background(), "sec-hardened", metav1.DeleteOptions{})
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	healthz := l.Addr().(*net.TCPAddr).Port
	l.Close()
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{
		NodeName: "sec-hardened", Kubeconfig: kubeconfig, CgroupRoot: testbed.CgroupRoot() + "/sec-hardened",
		ExtraConfig: fmt.Sprintf("seccompDefault: true\nauthentication:\n  x509:\n    clientCAFile: %s\n", cl.CAFile()),
		Args:        []string{"--read-only-port=0", "--protect-kernel-defaults", fmt.Sprintf("--healthz-port=%d", healthz)},
		HealthzURL:  fmt.Sprintf("http://127.0.0.1:%d/healthz", healthz),
	})
	examples, err := filepath.Glob(filepath.Join(testbed.RepoRoot(), "examples", "*.yaml"))
	if err != nil || len(examples) == 0 {
		t.Fatalf("no example pods: %v", err)
	}
	var names []string
	for _, f := range examples {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n.WriteManifest(filepath.Base(f), string(data))
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".yaml")+"-"+n.NodeName)
	}
	for _, name := range names {
		testbed.Eventually(t, podTimeout, func() (bool, string) {
			p, err := cl.Client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
			return err == nil && p.Status.Phase == v1.PodRunning, fmt.Sprintf("mirror pod %s: %v", name, err)
		})
		for _, c := range n.PodContainers(name) {
			if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
				continue
			}
			out, err := n.Exec(c.Id, "grep", "Seccomp:", "/proc/1/status")
			if err != nil || !strings.Contains(out, "Seccomp:\t2") {
				t.Errorf("%s/%s: %q %v, want the runtime's seccomp filter (mode 2)", name, c.Metadata.Name, out, err)
			}
		}
	}
	if conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", n.Port), time.Second); err == nil {
		conn.Close()
		t.Errorf("the read-only port %d still listens", n.Port)
	}
	r.answer = fmt.Sprintf("%d example pods Running, seccomp filter on, no read-only port", len(names))
	r.invariant = hostUntouched(t, n)
}
