// Package periodic runs components' background work: on a ticker of an
// injected clock (Run), and a bounded wait for their goroutines at stop
// (WaitStopped). Run is the loop
// several of nodelet's components share: the HTTP pod source, the
// eviction manager, image garbage collection and the runtime health
// check.
package periodic

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// Run calls f every period until ctx ends, and once at the start when
// immediately is set. The ticker exists before that first call, so
// whoever observes the call can rely on the period having started (tests
// that step a fake clock after it do).
func Run(ctx context.Context, clk clock.WithTicker, period time.Duration, immediately bool, f func(context.Context)) {
	t := clk.NewTicker(period)
	defer t.Stop()
	if immediately {
		f(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			f(ctx)
		}
	}
}
