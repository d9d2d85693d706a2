//go:build integration

package runtime

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testbed"
)

// BenchmarkFloorParallelism starts and stops 30 pods straight through CRI
// at several parallelisms and prints, for each, the per-pod latency
// (median and worst, from the burst's start) and the time for all: how
// much of a burst the runtime can usefully work on at once on this
// machine. nodelet's cap on concurrent pod starts is chosen from it.
//
//	go test -run XXX -bench FloorParallelism -benchtime 1x ./test/integration/runtime/
func BenchmarkFloorParallelism(b *testing.B) {
	const n = 30
	for _, p := range []int{1, 2, 4, 8, 16, n} {
		b.Run(fmt.Sprintf("parallel=%d", p), func(b *testing.B) {
			ctx := context.Background()
			for i := 0; i < b.N; i++ {
				f := &testbed.Floor{CD: cd, Parallel: p, LogDir: b.TempDir()}
				started, err := f.Start(ctx, fmt.Sprintf("floor-%d-%d", p, i), n)
				if err != nil {
					b.Fatal(err)
				}
				stopped, err := f.Stop(ctx)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := f.Remove(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				b.Logf("parallel %2d: start p50 %v p100 %v; stop p50 %v p100 %v", p,
					pct(started, 50), pct(started, 100), pct(stopped, 50), pct(stopped, 100))
			}
		})
	}
}

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)].Round(time.Millisecond)
}
