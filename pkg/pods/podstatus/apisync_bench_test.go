package podstatus

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// BenchmarkSyncerBurst is what a burst's status changes cost the API
// syncer in finding what to write, at 110 to 5,000 pods: each pod's
// status changes once, and the syncer looks after each change, as Run
// does when every change wakes it. "changed" is Run's path; "scan" looks
// at every pod on each change, as it did before, for comparison. The
// writes themselves are not part of it. ns/change should stay flat as
// the pods grow.
func BenchmarkSyncerBurst(b *testing.B) {
	for _, n := range []int{110, 1000, 5000} {
		for _, mode := range []string{"changed", "scan"} {
			b.Run(fmt.Sprintf("pods=%d/%s", n, mode), func(b *testing.B) {
				objs := manyPods(n)
				s, m, _, _ := newSyncer(b, objs...)
				due := s.dueChanged
				if mode == "scan" {
					due = s.due
				}
				statuses := []v1.PodStatus{ready(v1.ConditionTrue), ready(v1.ConditionFalse)}
				found := 0
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					for _, o := range objs {
						m.SetPodStatus(o, statuses[i%2])
						found += len(due())
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/change")
				if found < b.N*n {
					b.Fatalf("%d pods found due over %d changes", found, b.N*n)
				}
			})
		}
	}
}
