package app

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

// TestSuperviseStopsAllWhenOneExitsEarly: a component returning while
// nodelet runs (with an error, or without) stops the others, and
// supervise returns only once every one of them has.
func TestSuperviseStopsAllWhenOneExitsEarly(t *testing.T) {
	for name, exit := range map[string]error{"failing": errors.New("port closed"), "returning": nil} {
		t.Run(name, func(t *testing.T) {
			var stopped atomic.Int32
			waiter := func(ctx context.Context) error {
				<-ctx.Done()
				stopped.Add(1)
				return ctx.Err()
			}
			err := supervise(context.Background(), []component{
				{"a", waiter}, {"b", waiter},
				{"server", func(context.Context) error { return exit }},
			})
			want := "server: port closed"
			if exit == nil {
				want = "server: " + errExitedEarly.Error()
			}
			if err == nil || err.Error() != want {
				t.Fatalf("supervise returned %v, want %q", err, want)
			}
			if n := stopped.Load(); n != 2 {
				t.Fatalf("%d of 2 components had stopped when supervise returned", n)
			}
		})
	}
}

// TestSuperviseShutdownIsNotAFailure: when ctx ends, what the components
// return (context.Canceled, say) is not an error, and supervise waits for
// the slowest.
func TestSuperviseShutdownIsNotAFailure(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	var finished atomic.Bool
	done := make(chan error)
	go func() {
		done <- supervise(ctx, []component{
			{"quick", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
			runs("slow", func(ctx context.Context) { <-ctx.Done(); <-release; finished.Store(true) }),
		})
	}()
	cancel()
	select {
	case err := <-done:
		t.Fatalf("supervise returned (%v) before the slow component stopped", err)
	default:
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if !finished.Load() {
		t.Fatal("supervise returned before the slow component finished")
	}
}
