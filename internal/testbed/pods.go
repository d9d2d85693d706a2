package testbed

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// WaitPod polls the node's /pods until cond holds for the pod named name
// (a static pod's name without the node suffix), and returns it; the
// test fails after timeout with cond's last word.
func (n *Nodelet) WaitPod(t testing.TB, name string, timeout time.Duration, cond func(p *v1.Pod) (bool, string)) *v1.Pod {
	t.Helper()
	var pod *v1.Pod
	Eventually(t, timeout, func() (bool, string) {
		p, err := n.Pod(name)
		if err != nil || p == nil {
			return false, fmt.Sprintf("pod %s not reported: %v", name, err)
		}
		pod = p
		return cond(p)
	})
	return pod
}

// PodEvents lists the log lines of a static pod's events with reason (a
// node without an API server logs its events).
func (n *Nodelet) PodEvents(name, reason string) []string {
	var out []string
	for _, l := range strings.Split(n.Log(), "\n") {
		if strings.Contains(l, fmt.Sprintf(`reason=%q`, reason)) && strings.Contains(l, fmt.Sprintf(`object="default/%s-%s"`, name, n.NodeName)) {
			out = append(out, l)
		}
	}
	return out
}

// ContainerStatus is the status of the pod's container (init or regular)
// named name; the zero status if it has none.
func ContainerStatus(p *v1.Pod, name string) v1.ContainerStatus {
	for _, c := range append(append([]v1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if c.Name == name {
			return c
		}
	}
	return v1.ContainerStatus{}
}
