package container

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestContainerID(t *testing.T) {
	id := ParseContainerID("containerd://abc")
	if id.Type != "containerd" || id.ID != "abc" || id.String() != "containerd://abc" {
		t.Fatalf("%+v", id)
	}
	if bare := ParseContainerID("abc"); bare.ID != "abc" || bare.Type != "" {
		t.Fatalf("%+v", bare)
	}
}

func TestPodStatusQueries(t *testing.T) {
	t0 := time.Unix(100, 0)
	s := &PodStatus{ContainerStatuses: []*Status{
		{Name: "a", State: StateExited, CreatedAt: t0},
		{Name: "a", State: StateRunning, CreatedAt: t0.Add(time.Second)},
		{Name: "b", State: StateExited, CreatedAt: t0},
	}, SandboxStatuses: []*SandboxStatus{{ID: "sb", Ready: true}}}
	if c := s.FindContainerStatusByName("a"); c.State != StateRunning {
		t.Fatalf("newest a is %s", c.State)
	}
	if h := s.StatusesByName("a"); len(h) != 2 || h[0].State != StateRunning {
		t.Fatalf("history %v", h)
	}
	if len(s.RunningContainers()) != 1 || s.IsTerminal() {
		t.Fatal("running pod reported terminal")
	}
	rp := s.ToRunningPod()
	if len(rp.Containers) != 3 || len(rp.Sandboxes) != 1 {
		t.Fatalf("running pod %+v", rp)
	}
	s.ContainerStatuses[1].State = StateExited
	s.SandboxStatuses[0].Ready = false
	if !s.IsTerminal() {
		t.Fatal("stopped pod not terminal")
	}
	var nilStatus *PodStatus
	if nilStatus.FindContainerStatusByName("a") != nil || !nilStatus.IsTerminal() {
		t.Fatal("nil status")
	}
}

func TestPodSyncResult(t *testing.T) {
	var r PodSyncResult
	r.Add(StartContainer, "ok")
	if r.Error() != nil || !r.OnlyBackOff() {
		t.Fatal("successful result reports an error")
	}
	r.Add(StartContainer, "crashing").Fail(ErrCrashLoopBackOff, "back-off 10s")
	if r.Error() == nil || !r.OnlyBackOff() || !errors.Is(r.Error(), ErrCrashLoopBackOff) {
		t.Fatalf("back-off result: %v", r.Error())
	}
	r.Add(CreatePodSandbox, "pod").Fail(ErrCreatePodSandbox, "cni")
	if r.OnlyBackOff() || !errors.Is(r.Error(), ErrCreatePodSandbox) {
		t.Fatalf("real failure: %v", r.Error())
	}
	var other PodSyncResult
	other.Fail(fmt.Errorf("status unreadable"))
	if other.OnlyBackOff() || other.Error() == nil {
		t.Fatal("sync error not reported")
	}
}
