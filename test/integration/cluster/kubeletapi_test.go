//go:build integration

package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// kubectl runs kubectl as the admin with stdin, returning its output and
// exit code.
func kubectl(ctx context.Context, stdin string, args ...string) (string, int) {
	cmd := exec.CommandContext(ctx, filepath.Join(cl.BinDir, "kubectl"), append([]string{"--kubeconfig", cl.AdminKubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		return string(out) + err.Error(), -1
	}
	return string(out), 0
}

// kubectl logs, exec, attach and port-forward reach the containers
// through the API server and nodelet's kubelet API.
func TestKubectlLogsExecAttachPortForward(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-api", cd, "")
	waitNodeReady(t, n.NodeName, 10*time.Second)
	pods := cl.Client.CoreV1().Pods(ns)

	// Run 1 prints and fails; run 2 prints and stays.
	pod := busyboxPod("talk", n.NodeName, "sh", "-c",
		`n=$(cat /d/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /d/n; for i in 1 2 3 4 5; do echo "run $n line $i"; done; [ $n -ge 2 ] && exec cat; exit 1`)
	pod.Spec.TerminationGracePeriodSeconds = new(int64(1))
	pod.Spec.Containers[0].Stdin = true
	pod.Spec.Volumes = []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "d", MountPath: "/d"}}
	web := busyboxPod("web", n.NodeName, "sh", "-c", "mkdir -p /www && echo hello-pf > /www/index.html && exec httpd -f -p 8080 -h /www")
	web.Spec.TerminationGracePeriodSeconds = new(int64(1))
	for _, p := range []*v1.Pod{pod, web} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitPod(t, 60*time.Second, ns, "talk", func(p *v1.Pod) (bool, string) {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].RestartCount == 1 && cs[0].State.Running != nil, fmt.Sprintf("status %+v", cs)
	})

	logs := func(args ...string) string {
		t.Helper()
		out, code := kubectl(ctx, "", append([]string{"logs", "-n", ns, "talk"}, args...)...)
		if code != 0 {
			t.Fatalf("kubectl logs %v: exit %d: %s", args, code, out)
		}
		return out
	}
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		out, _ := kubectl(ctx, "", "logs", "-n", ns, "talk")
		return strings.Count(out, "run 2 line") == 5, out
	})
	if got := logs("--previous"); got != "run 1 line 1\nrun 1 line 2\nrun 1 line 3\nrun 1 line 4\nrun 1 line 5\n" {
		t.Errorf("logs --previous = %q", got)
	}
	if got := logs("--tail", "2"); got != "run 2 line 4\nrun 2 line 5\n" {
		t.Errorf("logs --tail 2 = %q", got)
	}
	if got := logs("--timestamps", "--tail", "1"); !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\S+ run 2 line 5\n$`).MatchString(got) {
		t.Errorf("logs --timestamps = %q", got)
	}
	if got := logs("--since", "1h"); strings.Count(got, "\n") != 5 {
		t.Errorf("logs --since 1h = %q", got)
	}
	if got := logs("--limit-bytes", "6"); got != "run 2 " {
		t.Errorf("logs --limit-bytes 6 = %q", got)
	}

	// exec with stdin and the command's exit code.
	out, code := kubectl(ctx, "from stdin", "exec", "-i", "-n", ns, "talk", "--", "sh", "-c", "cat; echo; exit 3")
	if code != 3 || !strings.Contains(out, "from stdin") {
		t.Errorf("kubectl exec: exit %d, output %q; want exit 3 and the input echoed", code, out)
	}

	// exec with a tty. kubectl only asks for one when its own stdin is a
	// terminal, which script(1) gives it; the shell then runs on a
	// pseudo-terminal in the container (an interactive shell, whose
	// tty says /dev/pts/N).
	tctx, cancelTTY := context.WithTimeout(ctx, 30*time.Second)
	defer cancelTTY()
	line := fmt.Sprintf("%s --kubeconfig %s exec -it -n %s talk -- sh", filepath.Join(cl.BinDir, "kubectl"), cl.AdminKubeconfig, ns)
	tty := exec.CommandContext(tctx, "script", "-qec", line, "/dev/null")
	tty.Stdin = strings.NewReader("tty; exit 4\n")
	// Killing script on timeout leaves kubectl holding the output pipe.
	tty.WaitDelay = 5 * time.Second
	var ttyOut bytes.Buffer
	tty.Stdout, tty.Stderr = &ttyOut, &ttyOut
	if err := tty.Start(); err != nil {
		t.Fatal(err)
	}
	err := tty.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 4 || !strings.Contains(ttyOut.String(), "/dev/pts/") {
		t.Errorf("kubectl exec -it: %v, output %q; want exit 4 and a /dev/pts terminal", err, ttyOut.String())
	}

	// attach: the container runs cat on its stdin, so what is sent comes
	// back; logs -f sees it too.
	follow, cancelFollow := context.WithCancel(ctx)
	defer cancelFollow()
	fcmd := exec.CommandContext(follow, filepath.Join(cl.BinDir, "kubectl"), "--kubeconfig", cl.AdminKubeconfig, "logs", "-f", "-n", ns, "talk")
	fout, err := fcmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := fcmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancelFollow()
		_ = fcmd.Wait() // killed: its exit status says nothing
	}()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(fout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	actx, cancelAttach := context.WithTimeout(ctx, 5*time.Second)
	defer cancelAttach()
	acmd := exec.CommandContext(actx, filepath.Join(cl.BinDir, "kubectl"), "--kubeconfig", cl.AdminKubeconfig, "attach", "-i", "-n", ns, "talk")
	stdin, err := acmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var attachOut strings.Builder
	acmd.Stdout = &attachOut
	if err := acmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintln(stdin, "ping-through-attach"); err != nil {
		t.Fatal(err)
	}
	sawFollow := false
	deadline := time.After(20 * time.Second)
	for !sawFollow {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("kubectl logs -f ended")
			}
			sawFollow = l == "ping-through-attach"
		case <-deadline:
			t.Fatal("kubectl logs -f did not show what was sent through kubectl attach")
		}
	}
	cancelAttach()
	_ = acmd.Wait() // killed: its exit status says nothing

	// port-forward to the web server.
	waitPod(t, 30*time.Second, ns, "web", running)
	pctx, cancelPF := context.WithCancel(ctx)
	pf := exec.CommandContext(pctx, filepath.Join(cl.BinDir, "kubectl"), "--kubeconfig", cl.AdminKubeconfig, "port-forward", "-n", ns, "pod/web", ":8080")
	pfOut, err := pf.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancelPF()
		_ = pf.Wait() // killed: its exit status says nothing
	}()
	local := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pfOut)
		for sc.Scan() {
			if m := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+)`).FindStringSubmatch(sc.Text()); m != nil {
				local <- m[1]
			}
		}
	}()
	var port string
	select {
	case port = <-local:
	case <-time.After(20 * time.Second):
		t.Fatal("kubectl port-forward did not start")
	}
	resp, err := http.Get("http://127.0.0.1:" + port + "/index.html")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.TrimSpace(string(body)) != "hello-pf" {
		t.Errorf("through port-forward: %s %q", resp.Status, body)
	}
}

// The kubelet API refuses requests without credentials (401) and those
// the API server does not authorize (403).
func TestKubeletAPIAuth(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-auth", cd, "")
	waitNodeReady(t, n.NodeName, 10*time.Second)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 10 * time.Second}
	url := fmt.Sprintf("https://127.0.0.1:%d/pods", n.APIPort)

	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without credentials: %s, want 401", resp.Status)
	}

	// A service account's token authenticates but grants nothing.
	tr, err := cl.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+tr.Status.Token)
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "subresource(s)=[pods proxy]") {
		t.Errorf("unauthorized token: %s %q, want 403 naming nodes/pods and nodes/proxy", resp.Status, body)
	}
	// The API server itself, through its proxy, is allowed.
	raw, err := cl.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", n.NodeName, "proxy", "pods").DoRaw(ctx)
	if err != nil || !strings.Contains(string(raw), `"kind":"PodList"`) {
		t.Errorf("through the API server's node proxy: %v %.200s", err, raw)
	}
}

// /metrics, read through the API server's node proxy, parses as
// Prometheus text and its pod start histogram moves when a pod starts.
func TestMetricsEndpoint(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-metrics", cd, "")
	waitNodeReady(t, n.NodeName, 10*time.Second)
	scrape := func() map[string]*dto.MetricFamily {
		t.Helper()
		raw, err := cl.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", n.NodeName, "proxy", "metrics").DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		f, err := parser.TextToMetricFamilies(strings.NewReader(string(raw)))
		if err != nil {
			t.Fatalf("metrics do not parse: %v", err)
		}
		return f
	}
	count := func(f map[string]*dto.MetricFamily, name string) uint64 {
		if fam := f[name]; fam != nil && len(fam.Metric) > 0 {
			return fam.Metric[0].GetHistogram().GetSampleCount()
		}
		return 0
	}
	starts := func(f map[string]*dto.MetricFamily) uint64 { return count(f, "kubelet_pod_start_duration_seconds") }
	first := scrape()
	before, beforeSLI := starts(first), count(first, "kubelet_pod_start_sli_duration_seconds")
	if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, busyboxPod("measured", n.NodeName), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, 30*time.Second, ns, "measured", running)
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		return starts(scrape()) == before+1, fmt.Sprintf("pod starts %d, before %d", starts(scrape()), before)
	})
	f := scrape()
	if got := count(f, "kubelet_pod_start_sli_duration_seconds"); got != beforeSLI+1 {
		t.Errorf("pod start SLI count %d, before %d", got, beforeSLI)
	}
	for _, name := range []string{"kubelet_running_pods", "kubelet_running_containers", "kubelet_runtime_operations_total",
		"kubelet_pleg_relist_duration_seconds", "kubelet_pod_worker_duration_seconds"} {
		if f[name] == nil {
			t.Errorf("no %s", name)
		}
	}
}
