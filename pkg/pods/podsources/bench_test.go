package podsources

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testutil"

	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
)

// BenchmarkFileWriteToAdd measures the time from a manifest appearing in
// the static pod directory (written and renamed into place) to its ADD
// leaving the merge, with inotify and a long re-list period: the periodic
// re-list never helps.
func BenchmarkFileWriteToAdd(b *testing.B) {
	dir := b.TempDir()
	cfg := New(record.NewFakeRecorder(1000), clock.RealClock{})
	src := NewFileSource(dir, Static{NodeName: "node1"}, time.Hour, cfg, record.NewFakeRecorder(1000), clock.RealClock{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go src.Run(ctx)
	<-cfg.Updates() // the first, empty set
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := fmt.Sprintf("p%d", i)
		tmp := filepath.Join(dir, "."+name)
		start := time.Now()
		testutil.Must(b, os.WriteFile(tmp, []byte(manifest(name, "img:1")), 0o644))
		testutil.Must(b, os.Rename(tmp, filepath.Join(dir, name+".yaml")))
		for u := range cfg.Updates() {
			if u.Op == ADD && len(u.Pods) == 1 && u.Pods[0].Name == name+"-node1" {
				break
			}
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "ms/add")
}
