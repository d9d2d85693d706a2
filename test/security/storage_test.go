//go:build integration

package security

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// Every byte a pod writes on the node counts against its ephemeral-storage
// limit, through the files nodelet keeps for it as well as its layer, logs
// and emptyDirs: a container writing 24 MiB past its 8Mi limit into
// /etc/hosts (CVE-2020-8557) or into its termination-message file
// (kubernetes#122224, which upstream does not count) is evicted with
// upstream's reason and message. (Static pods are never evicted, as
// upstream: these are API pods.)
func TestNodeFilesCountAgainstTheLimit(t *testing.T) {
	const ns = "sec-storage"
	ctx := context.Background()
	namespace(t, ns)
	n := clusterNode(t, "sec-storage-node")
	cases := []struct{ name, attack, path string }{
		{"hosts-fill", "write 24 MiB into /etc/hosts under an 8Mi limit", "/etc/hosts"},
		{"termination-fill", "write 24 MiB into the termination-message file under an 8Mi limit", "/dev/termination-log"},
	}
	for _, c := range cases {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: c.name}, Spec: v1.PodSpec{
			NodeName: n.NodeName, AutomountServiceAccountToken: new(false), TerminationGracePeriodSeconds: new(int64(1)),
			Containers: []v1.Container{{Name: "main", Image: testbed.BusyboxImage,
				Command:   []string{"sh", "-c", fmt.Sprintf("dd if=/dev/zero of=%s bs=1M count=24; sleep 3600", c.path)},
				Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("8Mi")}},
			}},
		}}
		if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const want = "Pod ephemeral local storage usage exceeds the total limit of containers 8Mi. "
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &row{scenario: "storage " + c.name, attack: c.attack}
			record(t, r)
			var p *v1.Pod
			testbed.Eventually(t, 2*podTimeout, func() (bool, string) {
				var err error
				if p, err = cl.Client.CoreV1().Pods(ns).Get(ctx, c.name, metav1.GetOptions{}); err != nil {
					return false, err.Error()
				}
				return p.Status.Phase == v1.PodFailed, fmt.Sprintf("phase %s", p.Status.Phase)
			})
			r.answer = p.Status.Reason + ": " + p.Status.Message
			if p.Status.Reason != "Evicted" || p.Status.Message != want {
				t.Errorf("status %s %q, want Evicted %q", p.Status.Reason, p.Status.Message, want)
			}
			r.invariant = hostUntouched(t, n)
		})
	}
}
