//go:build integration

package standalone

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/testbed"
	"github.com/nodelet/nodelet/pkg/volumes/volume"
)

// The volumes a static pod may have (emptyDir on disk and in memory,
// hostPath of each kind, downwardAPI) reach its container; an emptyDir
// outlives a container restart and goes with the pod; a hostPath whose
// type check fails keeps the pod waiting, visibly, until the path is
// right; resolv.conf and /etc/hosts follow dnsPolicy, dnsConfig,
// hostNetwork and hostAliases.
func TestStaticPodVolumesAndDNS(t *testing.T) {
	tmp := t.TempDir()
	resolv := filepath.Join(tmp, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 192.0.2.53\nsearch corp.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{
		ExtraConfig: fmt.Sprintf("clusterDNS: [10.0.0.10]\nclusterDomain: cluster.local\nresolvConf: %s\n", resolv),
	})
	shared := filepath.Join(tmp, "shared")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	created := filepath.Join(tmp, "created", "dir")
	confFile := filepath.Join(tmp, "app.conf")
	socket := filepath.Join(tmp, "agent.sock")

	// The container fails once after leaving a mark in its emptyDir; the
	// restarted one finds it.
	n.WriteManifest("vols.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: vols
  labels: {app: vols}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {name: data, emptyDir: {}}
  - {name: mem, emptyDir: {medium: Memory, sizeLimit: 8Mi}}
  - {name: shared, hostPath: {path: %s, type: Directory}}
  - {name: created, hostPath: {path: %s, type: DirectoryOrCreate}}
  - {name: conf, hostPath: {path: %s, type: FileOrCreate}}
  - {name: devnull, hostPath: {path: /dev/null, type: CharDevice}}
  - name: info
    downwardAPI:
      items:
      - {path: labels, fieldRef: {fieldPath: metadata.labels}}
      - {path: cpu_limit, resourceFieldRef: {containerName: main, resource: limits.cpu, divisor: 1m}}
  containers:
  - name: main
    image: %s
    command: ["sh", "-c", "if [ -f /data/mark ]; then exec sleep 3600; fi; touch /data/mark; exit 1"]
    resources: {limits: {cpu: 250m}}
    volumeMounts:
    - {name: data, mountPath: /data}
    - {name: mem, mountPath: /mem}
    - {name: shared, mountPath: /shared}
    - {name: created, mountPath: /created}
    - {name: conf, mountPath: /etc/app.conf}
    - {name: devnull, mountPath: /mnt/null}
    - {name: info, mountPath: /info}
`, shared, created, confFile, testbed.BusyboxImage))
	n.WriteManifest("badhost.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: badhost
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {name: sock, hostPath: {path: %s, type: Socket}}
  containers:
  - name: main
    image: %s
    command: ["sleep", "3600"]
    volumeMounts: [{name: sock, mountPath: /run/agent.sock}]
`, socket, testbed.BusyboxImage))
	// A non-root pod reads a 0400 downwardAPI file through its fsGroup
	// and what it writes to its emptyDir is the group's.
	n.WriteManifest("fsgroup.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: fsgroup
  labels: {app: fsgroup}
spec:
  terminationGracePeriodSeconds: 1
  securityContext: {runAsUser: 1000, runAsGroup: 1000, fsGroup: 2000}
  volumes:
  - {name: scratch, emptyDir: {}}
  - name: info
    downwardAPI:
      defaultMode: 0400
      items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}]
  containers:
  - name: main
    image: %s
    command: ["sleep", "3600"]
    volumeMounts: [{name: scratch, mountPath: /scratch}, {name: info, mountPath: /info}]
`, testbed.BusyboxImage))
	dnsPod := func(name, spec string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 1
%s
  containers:
  - name: main
    image: %s
    command: ["sleep", "3600"]
`, name, spec, testbed.BusyboxImage)
	}
	n.WriteManifest("dns-default.yaml", dnsPod("dns-default", "  dnsPolicy: Default"))
	n.WriteManifest("dns-none.yaml", dnsPod("dns-none", `  dnsPolicy: None
  dnsConfig:
    nameservers: [1.1.1.1]
    searches: [a.example]
    options: [{name: ndots, value: "2"}]`))
	n.WriteManifest("hostnet.yaml", dnsPod("hostnet", `  hostNetwork: true
  dnsPolicy: ClusterFirstWithHostNet
  hostAliases: [{ip: 192.0.2.9, hostnames: [db.internal]}]`))

	exec := func(pod string, cmd ...string) string {
		t.Helper()
		c := n.RunningPodContainer(n.PodName(pod), "main")
		if c == nil {
			t.Fatalf("%s: no running container", pod)
		}
		out, err := n.Exec(c.Id, cmd...)
		if err != nil {
			t.Fatalf("%s: %v: %v", pod, cmd, err)
		}
		return strings.TrimSpace(out)
	}
	running := func(p *v1.Pod) (bool, string) {
		return mainStatus(p).State.Running != nil, fmt.Sprintf("container %+v", mainStatus(p).State)
	}

	t.Run("volumes", func(t *testing.T) {
		p := n.WaitPod(t, "vols", podTimeout, func(p *v1.Pod) (bool, string) {
			cs := mainStatus(p)
			return cs.RestartCount >= 1 && cs.State.Running != nil, fmt.Sprintf("container %+v", cs)
		})
		if got := exec("vols", "ls", "/data"); got != "mark" {
			t.Errorf("emptyDir after a restart holds %q, want the first container's mark", got)
		}
		mounts := exec("vols", "cat", "/proc/mounts")
		if !strings.Contains(mounts, "tmpfs /mem tmpfs") || !strings.Contains(mounts, "size=8192k") {
			t.Errorf("the Memory emptyDir is not an 8Mi tmpfs:\n%s", mounts)
		}
		exec("vols", "sh", "-c", "echo from-pod > /shared/out && echo made > /created/out && echo conf > /etc/app.conf && echo x > /mnt/null")
		for path, want := range map[string]string{filepath.Join(shared, "out"): "from-pod", filepath.Join(created, "out"): "made", confFile: "conf"} {
			if b, err := os.ReadFile(path); err != nil || strings.TrimSpace(string(b)) != want {
				t.Errorf("%s on the host: %q (%v), want %q", path, b, err, want)
			}
		}
		if got := exec("vols", "cat", "/info/labels"); got != `app="vols"` {
			t.Errorf("/info/labels = %q", got)
		}
		if got := exec("vols", "cat", "/info/cpu_limit"); got != "250" {
			t.Errorf("/info/cpu_limit = %q, want 250", got)
		}
		if got := exec("vols", "ls", "-a", "/info"); !strings.Contains(got, "..data") {
			t.Errorf("the downwardAPI volume has no ..data link: %q", got)
		}

		// Removed with the pod: the emptyDirs, the tmpfs and the pod's
		// directory; the host's paths stay.
		volumes := filepath.Join(n.RootDir, "pods", string(p.UID), "volumes")
		if _, err := os.Stat(filepath.Join(volumes, "kubernetes.io~empty-dir", "data", "mark")); err != nil {
			t.Fatalf("the emptyDir is not where upstream keeps it: %v", err)
		}
		n.RemoveManifest("vols.yaml")
		testbed.Eventually(t, 20*time.Second, func() (bool, string) {
			if mounted, _ := volume.MountPointsUnder(volumes); len(mounted) > 0 {
				return false, fmt.Sprintf("still mounted: %v", mounted)
			}
			_, err := os.Stat(volumes)
			return os.IsNotExist(err), fmt.Sprintf("%s: %v", volumes, err)
		})
		if _, err := os.Stat(filepath.Join(shared, "out")); err != nil {
			t.Errorf("a hostPath's content went with the pod: %v", err)
		}
	})

	t.Run("fsGroup", func(t *testing.T) {
		n.WaitPod(t, "fsgroup", podTimeout, running)
		if got := exec("fsgroup", "cat", "/info/labels"); got != `app="fsgroup"` {
			t.Errorf("user 1000 reads /info/labels as %q", got)
		}
		if got := exec("fsgroup", "stat", "-L", "-c", "%a %g", "/info/labels"); got != "440 2000" {
			t.Errorf("/info/labels mode and group %q, want 440 2000", got)
		}
		if got := exec("fsgroup", "sh", "-c", "id -u; echo x > /scratch/f && stat -c %g /scratch/f"); got != "1000\n2000" {
			t.Errorf("a file written to the emptyDir: uid and group %q, want 1000 and 2000", got)
		}
	})

	t.Run("hostPath type check", func(t *testing.T) {
		testbed.Eventually(t, podTimeout, func() (bool, string) {
			return len(n.PodEvents("badhost", "FailedMount")) > 0, "no FailedMount event"
		})
		if !strings.Contains(n.Log(), "hostPath type check failed: "+socket+" does not exist") {
			t.Errorf("the log does not say why the volume failed")
		}
		p := n.WaitPod(t, "badhost", 5*time.Second, func(p *v1.Pod) (bool, string) {
			return waitingReason(p) == "ContainerCreating", fmt.Sprintf("container %+v", mainStatus(p).State)
		})
		if p.Status.Phase != v1.PodPending {
			t.Errorf("phase %s, want Pending", p.Status.Phase)
		}
		l, err := net.Listen("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		n.WaitPod(t, "badhost", podTimeout, running)
	})

	t.Run("DNS", func(t *testing.T) {
		clusterFirst := []string{"nameserver 10.0.0.10", "search default.svc.cluster.local svc.cluster.local cluster.local corp.example", "options ndots:5"}
		for pod, want := range map[string][]string{
			"badhost":     clusterFirst, // the default policy
			"dns-default": {"nameserver 192.0.2.53", "search corp.example"},
			"dns-none":    {"nameserver 1.1.1.1", "search a.example", "options ndots:2"},
			"hostnet":     clusterFirst,
		} {
			n.WaitPod(t, pod, podTimeout, running)
			got := exec(pod, "cat", "/etc/resolv.conf")
			for _, line := range want {
				if !strings.Contains(got, line) {
					t.Errorf("%s: resolv.conf lacks %q:\n%s", pod, line, got)
				}
			}
			if pod == "dns-none" && strings.Contains(got, "10.0.0.10") {
				t.Errorf("dnsPolicy None got the cluster's nameserver:\n%s", got)
			}
		}
		host, err := os.ReadFile("/etc/hosts")
		if err != nil {
			t.Fatal(err)
		}
		hosts := exec("hostnet", "cat", "/etc/hosts")
		for _, want := range []string{strings.TrimSpace(string(host)), "192.0.2.9\tdb.internal"} {
			if !strings.Contains(hosts, want) {
				t.Errorf("host-network /etc/hosts lacks %q:\n%s", want, hosts)
			}
		}
		if got, want := exec("hostnet", "hostname"), mustHostname(t); got != want {
			t.Errorf("host-network hostname %q, want the node's %q", got, want)
		}
		p := n.WaitPod(t, "dns-default", podTimeout, running)
		hosts = exec("dns-default", "cat", "/etc/hosts")
		if want := p.Status.PodIP + "\t" + n.PodName("dns-default"); !strings.Contains(hosts, want) || !strings.Contains(hosts, "127.0.0.1\tlocalhost") {
			t.Errorf("pod /etc/hosts lacks %q or localhost:\n%s", want, hosts)
		}
	})
}

func mustHostname(t *testing.T) string {
	t.Helper()
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// A privileged container's mount in a Bidirectional volume reaches the
// pod's next containers (upstream's "Mount recursive read-only ... should
// accept non-recursive read-only mounts" [NodeConformance] pod, whose
// init containers mount a tmpfs, write to it through read-only mounts
// that are not recursive, and unmount it). The
// runtime allows Bidirectional propagation only on a shared mount:
// nodelet makes its root directory one, as upstream's kubelet does (this
// test bed's root directory is on a private mount).
func TestBidirectionalMountPropagation(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	n.WriteManifest("propagation.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: propagation
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  volumes: [{name: mnt, emptyDir: {}}]
  initContainers:
  - name: mount
    image: %[1]s
    command: ["sh", "-euxc", "mkdir -p /mnt/tmpfs && mount -t tmpfs none /mnt/tmpfs"]
    securityContext: {privileged: true}
    volumeMounts: [{name: mnt, mountPath: /mnt, mountPropagation: Bidirectional}]
  - name: test
    image: %[1]s
    command: ["sh", "-euxc", "for f in rro-disabled ro rw; do touch /mnt-$f/tmpfs/foo; done; ! touch /mnt-ro/bar"]
    volumeMounts:
    - {name: mnt, mountPath: /mnt-rro-disabled, readOnly: true, recursiveReadOnly: Disabled}
    - {name: mnt, mountPath: /mnt-ro, readOnly: true}
    - {name: mnt, mountPath: /mnt-rw}
  - name: unmount
    image: %[1]s
    command: ["umount", "/mnt/tmpfs"]
    securityContext: {privileged: true}
    volumeMounts: [{name: mnt, mountPath: /mnt, mountPropagation: Bidirectional}]
  containers:
  - {name: completion, image: %[1]s, command: ["echo", "OK"]}
`, testbed.BusyboxImage))
	n.WaitPod(t, "propagation", podTimeout, func(p *v1.Pod) (bool, string) {
		if p.Status.Phase == v1.PodFailed {
			t.Fatalf("pod failed: %+v", p.Status.InitContainerStatuses)
		}
		return p.Status.Phase == v1.PodSucceeded, fmt.Sprintf("phase %s, init containers %+v", p.Status.Phase, p.Status.InitContainerStatuses)
	})
}
