//go:build integration

package security

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/internal/testbed"
	v1 "k8s.io/api/core/v1"
)

// probePod runs script once as the container's command and reports what
// it printed as its termination message.
func probePod(name, podSecurity, containerSecurity, script string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
%s  containers:
  - name: main
    image: %s
    terminationMessagePolicy: FallbackToLogsOnError
%s    command: ["sh", "-c", %q]
`, name, podSecurity, testbed.BusyboxImage, containerSecurity, "("+script+") 2>&1 | tee /dev/termination-log")
}

// From inside an ordinary container, the kernel's and the host's
// sensitive files are masked or read-only, the host's processes are not
// visible, and a container's security context holds: no privilege
// escalation through setuid, no capability it dropped, no write to a
// read-only root.
func TestContainerConfinement(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	hostPID := n.PID()
	cases := []struct {
		name, attack, pod, container, script string
		want, never                          []string
	}{
		{"proc-sys-masks", "read /proc/interrupts, /sys/firmware; write /proc/sys", "", "",
			"echo interrupts=$(wc -c </proc/interrupts); echo firmware=$(ls /sys/firmware | wc -l); " +
				"echo x >/proc/sys/kernel/hostname && echo WROTE-SYSCTL; echo 1 >/proc/sys/vm/drop_caches && echo WROTE-VM; " +
				"cat /proc/1/root" + canary.secret,
			[]string{"interrupts=0", "firmware=0", "Read-only file system"}, []string{"WROTE-SYSCTL", "WROTE-VM"}},
		{"host-processes", fmt.Sprintf("signal and read nodelet (host pid %d)", hostPID), "", "",
			fmt.Sprintf("kill -0 %d && echo SAW-HOST-PROCESS; cat /proc/%d/cmdline && echo READ-HOST-PROCESS; echo procs=$(ls -d /proc/[0-9]* | wc -l)", hostPID, hostPID),
			[]string{"procs="}, []string{"SAW-HOST-PROCESS", "READ-HOST-PROCESS"}},
		{"setuid-escalation", "setuid-root binary under allowPrivilegeEscalation: false", "  securityContext: {runAsUser: 1000}\n",
			"    securityContext: {allowPrivilegeEscalation: false}\n", "echo euid=$(/usr/bin/euid); grep NoNewPrivs /proc/self/status",
			[]string{"euid=1000", "NoNewPrivs:\t1"}, []string{"euid=0"}},
		{"mount-without-cap", "mount proc and tmpfs with the default capabilities", "", "",
			"mkdir -p /tmp/m; mount -t tmpfs t /tmp/m && echo MOUNTED; mount -t proc p /tmp/m && echo MOUNTED-PROC",
			[]string{"denied"}, []string{"MOUNTED"}},
		{"dropped-capabilities", "chown and raw sockets after drop: [ALL]", "", "    securityContext: {capabilities: {drop: [ALL]}}\n",
			"grep CapEff /proc/self/status; touch /tmp/f; chown 1 /tmp/f && echo CHOWNED; ping -c1 -W1 127.0.0.1 >/dev/null 2>&1 && echo PINGED",
			[]string{"CapEff:\t0000000000000000"}, []string{"CHOWNED", "PINGED"}},
		{"read-only-root", "write /bin under readOnlyRootFilesystem", "", "    securityContext: {readOnlyRootFilesystem: true}\n",
			"touch /bin/planted && echo WROTE; echo rc=$?", []string{"Read-only file system"}, []string{"WROTE"}},
	}
	for _, c := range cases {
		n.WriteManifest(c.name+".yaml", probePod(c.name, c.pod, c.container, c.script))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &row{scenario: c.name, attack: c.attack}
			record(t, r)
			out := finished(t, n, c.name, "main")
			r.answer = out
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("output %q lacks %q", out, w)
				}
			}
			for _, w := range c.never {
				if strings.Contains(out, w) {
					t.Errorf("output %q holds %q: the attack worked", out, w)
				}
			}
			r.invariant = hostUntouched(t, n)
		})
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", hostPID)); err != nil {
		t.Errorf("nodelet (pid %d) is gone: %v", hostPID, err)
	}
}

// A pod asking for a user namespace runs in one where the runtime can
// give it (containerd 2.x): its root is an unprivileged host user, as
// seen from the host. Where the runtime cannot (containerd 1.6), the pod
// is refused, never run as the host's root.
func TestUserNamespace(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	r := &row{scenario: "user-namespace", attack: "hostUsers: false; root in the pod"}
	record(t, r)
	marker := fmt.Sprintf("%d", 40000+os.Getpid()%20000)
	n.WriteManifest("userns.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: userns
spec:
  hostUsers: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: %s
    command: ["sh", "-c", "cat /proc/self/uid_map; id -u; cat %s; exec sleep %s"]
`, testbed.BusyboxImage, canary.secret, marker))
	// containerd 2.x with runc and this kernel's idmapped mounts can; 1.6 cannot.
	if !strings.HasPrefix(strings.TrimPrefix(cd.Version, "v"), "2.") {
		p := n.WaitPod(t, "userns", podTimeout, func(p *v1.Pod) (bool, string) {
			return p.Status.Phase == v1.PodFailed, fmt.Sprintf("phase %s", p.Status.Phase)
		})
		r.answer = p.Status.Reason + ": " + p.Status.Message
		if p.Status.Reason != "UserNamespacesNotSupported" || !strings.Contains(p.Status.Message, "hostUsers: false") {
			t.Errorf("status %q %q, want UserNamespacesNotSupported naming hostUsers", p.Status.Reason, p.Status.Message)
		}
		if got := len(n.RuntimeContainers("userns")); got != 0 {
			t.Errorf("%d containers created for a refused pod", got)
		}
		r.invariant = hostUntouched(t, n)
		return
	}
	n.WaitPod(t, "userns", podTimeout, func(p *v1.Pod) (bool, string) {
		s := testbed.ContainerStatus(p, "main")
		return s.State.Running != nil, fmt.Sprintf("%+v", s.State)
	})
	pid, uid := hostProcess(t, "sleep\x00"+marker)
	if uid < 65536 {
		t.Errorf("the pod's root is host uid %d (pid %d), want one of the node's unprivileged range", uid, pid)
	}
	r.answer = fmt.Sprintf("runs as host uid %d", uid)
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		log := strings.Join(strings.Fields(podLog(t, n, "userns")), " ")
		return strings.Contains(log, fmt.Sprintf("0 %d 65536", uid)), "uid_map: " + log
	})
	r.invariant = hostUntouched(t, n)
}
