//go:build integration

package standalone

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// RuntimeClasses name real handlers, not themselves: a standalone node
// reads them from --runtime-classes. A pod of class "fast" runs under the
// test containerd's handler "test-handler" (runc again, as upstream's
// node e2e CI configures it), one of class "plain" under "runc", one
// naming no class under the default, and one naming a class the node
// does not know fails its sandbox with upstream's error and event, and
// never runs under the default handler. The handler each sandbox got is
// what containerd itself reports.
func TestRuntimeClassesNameTheirHandlers(t *testing.T) {
	classes := filepath.Join(t.TempDir(), "runtimeclasses.yaml")
	if err := os.WriteFile(classes, []byte(`apiVersion: node.k8s.io/v1
kind: RuntimeClassList
items:
- metadata: {name: fast}
  handler: test-handler
- metadata: {name: plain}
  handler: runc
`), 0o644); err != nil {
		t.Fatal(err)
	}
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{Args: []string{"--runtime-classes=" + classes}})
	pod := func(name, class string) string {
		spec := ""
		if class != "" {
			spec = "  runtimeClassName: " + class + "\n"
		}
		return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\nspec:\n%s  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: %s\n    command: [sleep, \"3600\"]\n",
			name, spec, testbed.BusyboxImage)
	}
	n.WriteManifest("fast.yaml", pod("fast", "fast"))
	n.WriteManifest("plain.yaml", pod("plain", "plain"))
	n.WriteManifest("default.yaml", pod("default", ""))
	n.WriteManifest("unknown.yaml", pod("unknown", "nope"))
	for _, name := range []string{"fast", "plain", "default"} {
		n.WaitPod(t, name, 90*time.Second, testbed.PodRunning)
	}
	for name, want := range map[string]string{"fast": "test-handler", "plain": "runc", "default": ""} {
		if handler, err := cd.SandboxHandler(context.Background(), "default", name+"-"+n.NodeName); err != nil || handler != want {
			t.Errorf("%s: sandbox runtime handler %q (%v), want %q", name, handler, err, want)
		}
	}

	want := `runtimeclass.node.k8s.io \"nope\" not found`
	testbed.Eventually(t, 60*time.Second, func() (bool, string) {
		ev := n.PodEvents("unknown", "FailedCreatePodSandBox")
		return len(ev) > 0 && strings.Contains(ev[0], want), fmt.Sprintf("events %q", ev)
	})
	if p, err := n.Pod("unknown"); err != nil || p.Status.Phase != v1.PodPending {
		t.Errorf("the unknown class's pod: %v, %v", p, err)
	}
	sbs, err := cd.Sandboxes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs {
		if strings.HasPrefix(sb.GetMetadata().GetName(), "unknown-") {
			t.Errorf("a pod of an unknown class got a sandbox %s (handler %q)", sb.Id, sb.RuntimeHandler)
		}
	}
}
