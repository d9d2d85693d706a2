//go:build integration

package standalone

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// reporter is a pod whose container runs script once and reports its
// output as the termination message.
func reporter(name, image, podSecurity, containerSecurity, script string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 2
%s  containers:
  - name: main
    image: %s
    terminationMessagePolicy: FallbackToLogsOnError
%s    command: ["sh", "-c", %q]
`, name, podSecurity, image, containerSecurity, "("+script+") >/dev/termination-log 2>&1")
}

// Security contexts reach the container: users and groups, a read-only
// root filesystem, no privilege escalation, dropped capabilities, and the
// runAsNonRoot check against the image's user.
func TestSecurityContexts(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	bb := testbed.BusyboxImage
	cases := []struct {
		name, image, pod, container, script string
		want                                []string // substrings of the output
	}{
		{"ids", bb, "  securityContext: {runAsUser: 1234, runAsGroup: 2345, supplementalGroups: [3456]}\n", "", "id",
			[]string{"uid=1234", "gid=2345", "3456"}},
		{"container-overrides-pod", bb, "  securityContext: {runAsUser: 1234}\n", "    securityContext: {runAsUser: 4321}\n", "id -u",
			[]string{"4321"}},
		{"read-only-root", bb, "", "    securityContext: {readOnlyRootFilesystem: true}\n", "touch /new; echo rc=$?",
			[]string{"Read-only file system", "rc=1"}},
		{"writable-root", bb, "", "", "touch /new; echo rc=$?", []string{"rc=0"}},
		{"setuid-escalates", bb, "  securityContext: {runAsUser: 1000}\n", "", "echo euid=$(/usr/bin/euid)", []string{"euid=0"}},
		{"no-escalation", bb, "  securityContext: {runAsUser: 1000}\n", "    securityContext: {allowPrivilegeEscalation: false}\n", "echo euid=$(/usr/bin/euid)",
			[]string{"euid=1000"}},
		{"drop-all", bb, "", "    securityContext: {capabilities: {drop: [ALL]}}\n", "grep CapEff /proc/self/status",
			[]string{"CapEff:\t0000000000000000"}},
		{"add-net-admin", bb, "", "    securityContext: {capabilities: {drop: [ALL], add: [NET_ADMIN]}}\n", "grep CapEff /proc/self/status",
			[]string{"CapEff:\t0000000000001000"}},
		{"non-root-image", testbed.NonRootImage, "  securityContext: {runAsNonRoot: true}\n", "", "id -u", []string{"65534"}},
	}
	for _, c := range cases {
		n.WriteManifest(c.name+".yaml", reporter(c.name, c.image, c.pod, c.container, c.script))
	}
	// runAsNonRoot with an image that runs as root: never started.
	n.WriteManifest("root-image.yaml", reporter("root-image", bb, "  securityContext: {runAsNonRoot: true}\n", "", "id -u"))

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := n.WaitPod(t, c.name, podTimeout, func(p *v1.Pod) (bool, string) {
				return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed, fmt.Sprintf("phase %s", p.Status.Phase)
			})
			term := mainStatus(p).State.Terminated
			if term == nil {
				t.Fatalf("not terminated: %+v", mainStatus(p))
			}
			for _, w := range c.want {
				if !strings.Contains(term.Message, w) {
					t.Errorf("output %q lacks %q", term.Message, w)
				}
			}
		})
	}
	t.Run("root-image", func(t *testing.T) {
		p := n.WaitPod(t, "root-image", podTimeout, func(p *v1.Pod) (bool, string) {
			return waitingReason(p) == "CreateContainerConfigError", "waiting reason " + waitingReason(p)
		})
		if msg := mainStatus(p).State.Waiting.Message; !strings.Contains(msg, "runAsNonRoot") {
			t.Errorf("message %q does not say why", msg)
		}
		if len(n.RuntimeContainers("root-image")) != 0 {
			t.Error("a container was created")
		}
	})
}

// A container over its memory limit is OOM-killed and reported so.
func TestOOMKilled(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	n.WriteManifest("hog.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: hog
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: %s
    command: ["tail", "/dev/zero"]
    resources:
      limits: {memory: 16Mi}
`, testbed.BusyboxImage))
	p := n.WaitPod(t, "hog", podTimeout, func(p *v1.Pod) (bool, string) {
		return p.Status.Phase == v1.PodFailed, fmt.Sprintf("phase %s", p.Status.Phase)
	})
	term := mainStatus(p).State.Terminated
	if term == nil || term.Reason != "OOMKilled" || term.ExitCode != 137 {
		t.Fatalf("termination %+v, want OOMKilled with exit code 137", term)
	}
}
