//go:build integration

package security

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/internal/testbed"
)

// A static pod the API server would refuse is reported, naming the field
// as the API server does, and never runs: an unmasked /proc in the host's
// user namespace (writable /proc/sys), a volume item written outside its
// volume. A valid manifest written after them runs, so the source read
// them.
func TestStaticPodsValidatedAsTheAPIServerDoes(t *testing.T) {
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	cases := []struct{ name, attack, spec, want string }{
		{"unmasked-proc", "procMount: Unmasked without hostUsers: false", fmt.Sprintf(`  containers:
  - name: main
    image: %s
    command: ["sh", "-c", "echo x >/proc/sys/kernel/hostname; sleep 3600"]
    securityContext: {procMount: Unmasked}
`, testbed.BusyboxImage),
			"spec.containers[0].securityContext.procMount: Invalid value: \"Unmasked\": `hostUsers` must be false to use `Unmasked`"},
		{"item-escape", "downwardAPI item path ../../../../escape", fmt.Sprintf(`  volumes:
  - name: info
    downwardAPI:
      items:
      - path: ../../../../escape
        fieldRef: {fieldPath: metadata.name}
  containers:
  - name: main
    image: %s
    command: ["sleep", "3600"]
    volumeMounts: [{name: info, mountPath: /info}]
`, testbed.BusyboxImage),
			"spec.volumes[0].downwardAPI.path: Invalid value: \"../../../../escape\": must not contain '..'"},
		{"item-absolute", "downwardAPI item path /etc/cron.d/x", fmt.Sprintf(`  volumes:
  - name: info
    downwardAPI:
      items:
      - path: /etc/cron.d/x
        fieldRef: {fieldPath: metadata.name}
  containers:
  - name: main
    image: %s
    command: ["sleep", "3600"]
    volumeMounts: [{name: info, mountPath: /info}]
`, testbed.BusyboxImage),
			"spec.volumes[0].downwardAPI.path: Invalid value: \"/etc/cron.d/x\": must be a relative path"},
	}
	for _, c := range cases {
		n.WriteManifest(c.name+".yaml", fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\nspec:\n  terminationGracePeriodSeconds: 1\n%s", c.name, c.spec))
	}
	n.WriteManifest("fine.yaml", probePod("fine", "", "", "echo fine"))
	finished(t, n, "fine", "main")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &row{scenario: "static-validation " + c.name, attack: c.attack}
			record(t, r)
			// The log quotes the error, and the event (logged too) holds it.
			quoted := strings.Trim(strconv.Quote(c.want), `"`)
			testbed.Eventually(t, podTimeout, func() (bool, string) {
				var logged, event bool
				for _, l := range strings.Split(n.Log(), "\n") {
					if strings.Contains(l, quoted) {
						logged = true
						event = event || strings.Contains(l, `reason="FailedValidation"`)
					}
				}
				return logged && event, fmt.Sprintf("logged %v, event %v: %s", logged, event, c.want)
			})
			r.answer = "refused: " + c.want
			if p, err := n.Pod(c.name); err != nil || p != nil {
				t.Errorf("the invalid pod %s is served as a pod (%v)", c.name, err)
			}
			if got := len(n.RuntimeSandboxes(c.name)); got != 0 {
				t.Errorf("%d sandboxes for the invalid pod %s", got, c.name)
			}
			r.invariant = hostUntouched(t, n)
		})
	}
}
