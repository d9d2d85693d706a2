package app

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"
)

// component is a long-lived part of nodelet: it runs until ctx ends, and
// returning before that is a failure.
type component struct {
	name string
	run  func(ctx context.Context) error
}

// runs adapts a Run that cannot fail.
func runs(name string, run func(ctx context.Context)) component {
	return component{name, func(ctx context.Context) error { run(ctx); return nil }}
}

func concat(lists ...[]component) []component {
	var out []component
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// errExitedEarly is a component returning while nodelet still runs.
var errExitedEarly = errors.New("exited while nodelet was running")

// supervise runs every component until ctx ends or one of them stops
// early, which stops the others and is returned; it returns only when all
// of them have.
func supervise(ctx context.Context, components []component) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range components {
		g.Go(func() error {
			err := c.run(gctx)
			if gctx.Err() != nil {
				return nil // stopping: whatever it says is not a failure
			}
			if err == nil {
				err = errExitedEarly
			}
			klog.ErrorS(err, "Component stopped; stopping nodelet", "component", c.name)
			return fmt.Errorf("%s: %w", c.name, err)
		})
	}
	return g.Wait()
}
