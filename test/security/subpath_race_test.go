//go:build integration && long

package security

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// The subPath race (CVE-2021-25741): one container swaps the subPath's
// directory for a link to / and back, as fast as it can, while the pod's
// other container, mounting that subPath, restarts over and over (the
// back-off capped at 1 s). Each start either mounts the real directory
// (what was opened beneath the volume is what is mounted) or is refused
// because the link was there when it was opened: the restarted container
// never sees the host's root. It records what it saw at each start in a
// volume the test reads. The swapper leaves the link in place for a few
// milliseconds in every 50 (process starts): a start that meets it is
// refused and retried 10 s later, as upstream's pod worker retries a
// sync error, so 200 restarts take about 10 minutes; the test is make
// test-subpath-race's, on both runtimes, not make test's.
func TestSubPathSwapRace(t *testing.T) {
	const restarts = 200
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{ExtraConfig: "crashLoopBackOff: {maxContainerRestartPeriod: 1s}\n"})
	r := &row{scenario: "subpath-swap-race", attack: fmt.Sprintf("swap vol/real for a link to / in a loop; %d restarts mounting it", restarts)}
	record(t, r)
	n.WriteManifest("race.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: race
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{name: vol, emptyDir: {}}, {name: out, emptyDir: {}}]
  initContainers:
  - name: prepare
    image: %[1]s
    command: ["sh", "-c", "mkdir -p /vol/real && touch /vol/real/inside"]
    volumeMounts: [{name: vol, mountPath: /vol}]
  containers:
  - name: swapper
    image: %[1]s
    resources: {limits: {cpu: 500m}}
    command: ["sh", "-c", "cd /vol; while true; do mv real real.tmp; ln -s / real; rm real; mv real.tmp real; sleep 0.05; done"]
    volumeMounts: [{name: vol, mountPath: /vol}]
  - name: victim
    image: %[1]s
    command: ["sh", "-c", "echo \"LS $(ls -A /sub | tr '\\n' ' ')\" >>/out/seen; cat /sub%[2]s && echo ESCAPED >>/out/seen; exit 0"]
    volumeMounts: [{name: vol, mountPath: /sub, subPath: real}, {name: out, mountPath: /out}]
`, testbed.BusyboxImage, canary.secret))
	p := n.WaitPod(t, "race", time.Duration(restarts)*10*time.Second, func(p *v1.Pod) (bool, string) {
		s := testbed.ContainerStatus(p, "victim")
		return s.RestartCount >= restarts, fmt.Sprintf("victim restarted %d times", s.RestartCount)
	})
	seen, err := os.ReadFile(filepath.Join(n.RootDir, "pods", string(p.UID), "volumes", "kubernetes.io~empty-dir", "out", "seen"))
	if err != nil {
		t.Fatal(err)
	}
	// What a start may see is the volume's: the directory, and what the
	// swap leaves in it (where nodelet made the missing subPath directory
	// between the link's removal and the rename back, the swapper's
	// rename puts real.tmp inside it). The host's root has these.
	hostNames := map[string]bool{"etc": true, "proc": true, "sys": true, "usr": true, "bin": true, "root": true, "dev": true}
	runs, out := 0, 0
	for _, l := range strings.Split(strings.TrimSpace(string(seen)), "\n") {
		if !strings.HasPrefix(l, "LS ") {
			out++
			t.Errorf("a start of the victim read the host's secret: %q", l)
			continue
		}
		runs++
		for _, name := range strings.Fields(strings.TrimPrefix(l, "LS ")) {
			if hostNames[name] {
				out++
				t.Errorf("a start of the victim saw the host's root: %q", l)
				break
			}
		}
	}
	refusals := len(n.PodEvents("race", "Failed"))
	r.answer = fmt.Sprintf("%d starts saw only the volume; %d refused (the link caught)", runs-out, refusals)
	if runs < restarts || out > 0 {
		t.Errorf("%d starts recorded, %d outside the volume", runs, out)
	}
	// The swap met the resolution at least once: the race was run.
	if refusals == 0 {
		t.Error("no start was refused: the swapper never had the link in place when a start resolved the subPath")
	}
	r.invariant = hostUntouched(t, n)
}
