package kuberuntime

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

func hookPod(postStart, preStop *v1.LifecycleHandler) *v1.Pod {
	p := newPod(v1.RestartPolicyAlways, "app").pod
	p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PostStart: postStart, PreStop: preStop}
	return p
}

func exec(cmd ...string) *v1.LifecycleHandler {
	return &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: cmd}}
}

func TestHookOrdering(t *testing.T) {
	f := newFixture(t)
	pod := hookPod(exec("post"), exec("pre"))
	f.sync(t, pod)
	if got := strings.Join(calls(f.rt, "CreateContainer", "StartContainer", "ExecSync"), ","); got != "CreateContainer app,StartContainer app,ExecSync post" {
		t.Fatalf("start: %s", got)
	}
	f.rt.ResetCalls()
	if err := f.m.KillPod(context.Background(), pod, f.status(t, pod).ToRunningPod(), nil); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(calls(f.rt, "ExecSync", "StopContainer", "StopPodSandbox"), ","); !strings.HasPrefix(got, "ExecSync pre,StopContainer app") ||
		!strings.Contains(got, "StopPodSandbox") {
		t.Fatalf("stop: %s", got)
	}
}

func TestFailingPostStartKillsTheContainer(t *testing.T) {
	f := newFixture(t)
	f.rt.ExecResult = func(id string, cmd []string) (*runtimeapi.ExecSyncResponse, error) {
		return &runtimeapi.ExecSyncResponse{ExitCode: 1, Stderr: []byte("nope")}, nil
	}
	pod := hookPod(exec("post"), nil)
	res := f.sync(t, pod)
	last := res.Results[len(res.Results)-1]
	if !errors.Is(last.Err, container.ErrPostStartHook) || !strings.Contains(last.Message, "nope") {
		t.Fatalf("result %v %q", last.Err, last.Message)
	}
	if got := calls(f.rt, "StopContainer"); len(got) != 1 {
		t.Fatalf("container not killed: %v", got)
	}
	if ev := drain(f.recorder); !strings.Contains(ev, "FailedPostStartHook") {
		t.Fatalf("events %s", ev)
	}
}

func TestHTTPHooks(t *testing.T) {
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.RequestURI()+" "+r.Header.Get("X-Hook"))
		if r.URL.Path == "/fail" {
			w.WriteHeader(500)
		}
	}))
	defer srv.Close()
	host, portStr, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	port, _ := strconv.Atoi(portStr)
	get := func(path string) *v1.LifecycleHandler {
		return &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Host: host, Port: intstr.FromString("web"), Path: path,
			HTTPHeaders: []v1.HTTPHeader{{Name: "X-Hook", Value: "yes"}}}}
	}
	f := newFixture(t)
	pod := hookPod(get("/start?x=1"), get("/stop"))
	pod.Spec.Containers[0].Ports = []v1.ContainerPort{{Name: "web", ContainerPort: int32(port)}}
	if err := f.sync(t, pod).Error(); err != nil {
		t.Fatal(err)
	}
	testutil.Must(t, f.m.KillPod(context.Background(), pod, f.status(t, pod).ToRunningPod(), nil))
	if got := strings.Join(paths, ","); got != "/start?x=1 yes,/stop yes" {
		t.Fatalf("requests %s", got)
	}

	f2 := newFixture(t)
	bad := hookPod(get("/fail"), nil)
	bad.Spec.Containers[0].Ports = pod.Spec.Containers[0].Ports
	if res := f2.sync(t, bad); !errors.Is(res.Results[len(res.Results)-1].Err, container.ErrPostStartHook) {
		t.Fatalf("HTTP 500 postStart: %v", res.Error())
	}
}
