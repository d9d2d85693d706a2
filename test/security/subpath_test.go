//go:build integration

package security

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// subPathPod is a pod whose init container plants links in a volume and
// whose main container mounts a subPath of it and tries to read the
// host's secret through it.
func subPathPod(name, volume, plant, mount, env string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  volumes:
  - name: vol
%s
  initContainers:
  - name: plant
    image: %s
    command: ["sh", "-c", %q]
    volumeMounts: [{name: vol, mountPath: /vol}]
  containers:
  - name: main
    image: %s
%s    command: ["sh", "-c", "cat /escape%s /escape/secret /escape/*/secret"]
    volumeMounts: [%s]
`, name, volume, testbed.BusyboxImage, plant, testbed.BusyboxImage, env, canary.secret, mount)
}

// A link planted in a volume never takes a subPath out of it: to the
// host's root, up through "..", in a middle component, through
// subPathExpr, or in a hostPath directory. The container is never
// created; its status and an event name the mount.
func TestSubPathSymlinks(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	emptyDir := "    emptyDir: {}"
	hostDir := fmt.Sprintf("    hostPath: {path: %s/shared-%s, type: DirectoryOrCreate}", canary.dir, n.NodeName)
	cases := []struct {
		name, attack, volume, plant, mount, env string
	}{
		{"subpath-to-root", "ln -s / vol/escape; subPath: escape", emptyDir,
			"ln -s / /vol/escape", "{name: vol, mountPath: /escape, subPath: escape}", ""},
		{"subpath-up", "ln -s ../../../.. vol/up; subPath: up", emptyDir,
			"ln -s ../../../../../../../../.. /vol/up", "{name: vol, mountPath: /escape, subPath: up}", ""},
		{"subpath-middle", "ln -s / vol/a; subPath: a" + canary.dir, emptyDir,
			"ln -s / /vol/a", fmt.Sprintf("{name: vol, mountPath: /escape, subPath: a%s}", canary.dir), ""},
		{"subpath-missing-below-link", "ln -s /var/lib vol/l; subPath: l/new (mkdir)", emptyDir,
			"ln -s /var/lib /vol/l", "{name: vol, mountPath: /escape, subPath: l/new}", ""},
		{"subpathexpr", "ln -s / vol/escape; subPathExpr: $(DIR)", emptyDir,
			"ln -s / /vol/escape", "{name: vol, mountPath: /escape, subPathExpr: $(DIR)}",
			"    env: [{name: DIR, value: escape}]\n"},
		{"hostpath-subpath", "ln -s / in a hostPath dir; subPath through it", hostDir,
			"ln -s / /vol/escape", "{name: vol, mountPath: /escape, subPath: escape}", ""},
	}
	for _, c := range cases {
		n.WriteManifest(c.name+".yaml", subPathPod(c.name, c.volume, c.plant, c.mount, c.env))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &row{scenario: c.name, attack: c.attack}
			record(t, r)
			r.answer = refused(t, n, c.name, "main", "CreateContainerConfigError")
			if !strings.Contains(r.answer, `volume mount "vol"`) || !strings.Contains(r.answer, "escapes its volume") {
				t.Errorf("the answer %q does not name the mount and the escape", r.answer)
			}
			if len(n.PodEvents(c.name, "Failed")) == 0 {
				t.Error("no Failed event for the pod")
			}
			if got := len(n.PodContainers(n.PodName(c.name))); got != 1 {
				t.Errorf("%d containers created, want only the init container", got)
			}
			r.invariant = hostUntouched(t, n)
		})
	}
	// The new directory below the link was not made on the host.
	if _, err := os.Lstat("/var/lib/new"); err == nil {
		t.Error("a subPath below a link made /var/lib/new on the host")
	}
}

// A link planted after the container first started is caught at its next
// start: the subPath is resolved again every time.
func TestSubPathLinkPlantedAfterStart(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	r := &row{scenario: "subpath-planted-after-start", attack: "rm -rf vol/dir; ln -s / vol/dir; exit 1; restart"}
	record(t, r)
	n.WriteManifest("late.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: late
spec:
  restartPolicy: OnFailure
  terminationGracePeriodSeconds: 1
  volumes: [{name: vol, emptyDir: {}}]
  containers:
  - name: main
    image: %s
    command: ["sh", "-c", "cat /sub%s; rm -rf /vol/dir && ln -s / /vol/dir && exit 1"]
    volumeMounts: [{name: vol, mountPath: /vol}, {name: vol, mountPath: /sub, subPath: dir}]
`, testbed.BusyboxImage, canary.secret))
	p := n.WaitPod(t, "late", podTimeout, func(p *v1.Pod) (bool, string) {
		s := testbed.ContainerStatus(p, "main")
		return s.State.Waiting != nil && s.State.Waiting.Reason == "CreateContainerConfigError" && s.LastTerminationState.Terminated != nil,
			fmt.Sprintf("%+v, last %+v", s.State, s.LastTerminationState)
	})
	r.answer = "CreateContainerConfigError: " + testbed.ContainerStatus(p, "main").State.Waiting.Message
	if !strings.Contains(r.answer, "escapes its volume") {
		t.Errorf("the answer %q does not name the escape", r.answer)
	}
	if got := len(n.PodContainers(n.PodName("late"))); got != 1 {
		t.Errorf("%d containers created, want only the first", got)
	}
	r.invariant = hostUntouched(t, n)
}

// What stays inside the volume mounts as asked, a directory and a file,
// also through a link inside it; the bind mounts go with the pod.
func TestSubPathInsideTheVolume(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	r := &row{scenario: "subpath-inside (control)", attack: "ln -s dir vol/inside; subPaths inside, dir and file"}
	record(t, r)
	n.WriteManifest("inside.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: inside
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  volumes: [{name: vol, emptyDir: {}}]
  initContainers:
  - name: plant
    image: %[1]s
    command: ["sh", "-c", "mkdir /vol/dir && echo hello >/vol/dir/file && ln -s dir /vol/inside"]
    volumeMounts: [{name: vol, mountPath: /vol}]
  containers:
  - name: main
    image: %[1]s
    terminationMessagePolicy: FallbackToLogsOnError
    command: ["sh", "-c", "echo dir=$(cat /data/file) file=$(cat /f) new=$(ls -d /made) | tee /dev/termination-log; echo out >/data/out"]
    volumeMounts:
    - {name: vol, mountPath: /data, subPath: inside}
    - {name: vol, mountPath: /f, subPath: dir/file}
    - {name: vol, mountPath: /made, subPath: a/b}
`, testbed.BusyboxImage))
	r.answer = finished(t, n, "inside", "main")
	if want := "dir=hello file=hello new=/made"; !strings.Contains(r.answer, want) {
		t.Errorf("output %q, want %q", r.answer, want)
	}
	p, _ := n.Pod("inside")
	subpaths := filepath.Join(n.RootDir, "pods", string(p.UID), "volume-subpaths")
	if got := mountsUnder(t, subpaths); got != 3 {
		t.Errorf("%d subPath bind mounts under %s, want 3", got, subpaths)
	}
	n.RemoveManifest("inside.yaml")
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		_, err := os.Stat(subpaths)
		return os.IsNotExist(err) && mountsUnder(t, subpaths) == 0, fmt.Sprintf("%s: %v, %d mounts", subpaths, err, mountsUnder(t, subpaths))
	})
	r.answer += "; binds gone with the pod"
	r.invariant = hostUntouched(t, n)
}

func mountsUnder(t *testing.T, dir string) int {
	t.Helper()
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		t.Fatal(err)
	}
	return len(mounts)
}

// A link planted in a shared hostPath directory does not pass a hostPath
// type check it does not meet: a pod claiming the host's secret as a
// socket (as a docker.sock mount would) or a directory is refused.
func TestHostPathTypeThroughALink(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	shared := fmt.Sprintf("%s/shared-types-%s", canary.dir, n.NodeName)
	n.WriteManifest("planter.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: planter
spec:
  restartPolicy: Never
  volumes: [{name: shared, hostPath: {path: %s, type: DirectoryOrCreate}}]
  containers:
  - name: main
    image: %s
    terminationMessagePolicy: FallbackToLogsOnError
    command: ["sh", "-c", "ln -s %s /shared/link && echo planted | tee /dev/termination-log"]
    volumeMounts: [{name: shared, mountPath: /shared}]
`, shared, testbed.BusyboxImage, canary.secret))
	if out := finished(t, n, "planter", "main"); !strings.Contains(out, "planted") {
		t.Fatalf("the link was not planted: %q", out)
	}
	for _, typ := range []string{"Socket", "Directory"} {
		name := "claim-" + strings.ToLower(typ)
		t.Run(name, func(t *testing.T) {
			r := &row{scenario: "hostpath-type-" + strings.ToLower(typ), attack: "a planted link to the host secret mounted as hostPath type " + typ}
			record(t, r)
			n.WriteManifest(name+".yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  restartPolicy: Never
  volumes: [{name: v, hostPath: {path: %s/link, type: %s}}]
  containers:
  - name: main
    image: %s
    command: ["sh", "-c", "cat /v; cat /v/*"]
    volumeMounts: [{name: v, mountPath: /v}]
`, name, shared, typ, testbed.BusyboxImage))
			var events []string
			testbed.Eventually(t, podTimeout, func() (bool, string) {
				events = n.PodEvents(name, "FailedMount")
				return len(events) > 0, "no FailedMount event"
			})
			r.answer = "FailedMount: hostPath type check failed"
			if !strings.Contains(events[0], "hostPath type check failed") {
				t.Errorf("event %q does not say the type check failed", events[0])
			}
			if got := len(n.RuntimeContainers(name)); got != 0 {
				t.Errorf("%d containers created", got)
			}
			r.invariant = hostUntouched(t, n)
		})
	}
}
