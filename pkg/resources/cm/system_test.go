package cm

import (
	"bufio"
	"strings"
	"testing"
)

func TestCgroupOf(t *testing.T) {
	v1 := "12:pids:/user.slice\n11:memory:/kubelet\n10:cpu,cpuacct:/kubelet\n1:name=systemd:/init.scope\n0::/\n"
	if got, err := cgroupOf(bufio.NewScanner(strings.NewReader(v1)), false); err != nil || got != "/kubelet" {
		t.Errorf("cgroup v1: %q %v, want the memory controller's /kubelet", got, err)
	}
	v2 := "0::/system.slice/nodelet.service\n"
	if got, err := cgroupOf(bufio.NewScanner(strings.NewReader(v2)), true); err != nil || got != "/system.slice/nodelet.service" {
		t.Errorf("cgroup v2: %q %v", got, err)
	}
	if _, err := cgroupOf(bufio.NewScanner(strings.NewReader("garbage\n")), true); err == nil {
		t.Error("found a cgroup in garbage")
	}
}

// The system containers the summary reports are upstream's: "kubelet"
// (configured, or where nodelet runs), and "runtime" and "misc" only when
// named; the root cannot be the system cgroup, and names are absolute.
func TestSystemContainers(t *testing.T) {
	s, err := NewSystem(SystemOptions{Kubelet: "/kubelet", System: "/system", Runtime: "/docker-daemon"})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Containers(); len(got) != 3 || got["kubelet"] != "/kubelet" || got["runtime"] != "/docker-daemon" || got["misc"] != "/system" {
		t.Errorf("containers %v", got)
	}
	s, _ = NewSystem(SystemOptions{})
	s.self = func() (string, error) { return "/user.slice/session-1.scope", nil }
	if got := s.Containers(); len(got) != 1 || got["kubelet"] != "/user.slice/session-1.scope" {
		t.Errorf("containers without configuration %v, want only where nodelet runs", got)
	}
	for _, o := range []SystemOptions{{System: "/"}, {Kubelet: "kubelet"}, {Runtime: "docker"}} {
		if _, err := NewSystem(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
