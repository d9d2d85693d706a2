//go:build integration

package standalone

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"

	"github.com/nodelet/nodelet/internal/testbed"
	"github.com/nodelet/nodelet/internal/testutil"
)

// Start-up errors end nodelet with status 1 and one line naming the
// problem, and leave nothing mounted (the root directory is made a shared
// mount only once the runtime answers).
func TestStartupErrors(t *testing.T) {
	bin, err := testbed.NodeletBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	badField := filepath.Join(dir, "bad.yaml")
	refusedField := filepath.Join(dir, "refused.yaml")
	unknownGate := filepath.Join(dir, "gate.yaml")
	const head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	testutil.Must(t, os.WriteFile(badField, []byte(head+"maxPod: 3\n"), 0o644))
	testutil.Must(t, os.WriteFile(refusedField, []byte(head+"kubeReservedCgroup: /kube.slice\n"), 0o644))
	testutil.Must(t, os.WriteFile(unknownGate, []byte(head+"featureGates: {NoSuchGate: true}\n"), 0o644))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unreachable runtime", []string{"--container-runtime-endpoint", "unix://" + filepath.Join(dir, "nothing.sock"), "--root-dir", dir}, "nothing.sock"},
		{"runtime endpoint that is not a socket", []string{"--container-runtime-endpoint", "unix://" + dir, "--root-dir", dir}, "is not a socket"},
		{"missing config file", []string{"--config", filepath.Join(dir, "missing.yaml")}, "missing.yaml"},
		{"unknown config field", []string{"--config", badField}, `unknown field "maxPod"`},
		{"refused config field", []string{"--config", refusedField}, "kubeReservedCgroup: only pods' allocatable is enforced"},
		{"unknown feature gate", []string{"--config", unknownGate}, `unknown feature gate "NoSuchGate"`},
		{"unknown flag", []string{"--cpu-manager-policy", "static"}, "unknown flag: --cpu-manager-policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exit %v, want status 1; output:\n%s", err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "nodelet: ") || !strings.Contains(last, tc.want) {
				t.Fatalf("last line %q: want the error naming %q", last, tc.want)
			}
		})
	}
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		t.Errorf("a failed start left %s mounted", m.Mountpoint)
	}
}
