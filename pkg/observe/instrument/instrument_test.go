package instrument

import (
	"context"
	"errors"
	"strings"
	"testing"
)

type ctxKey string

// logObserver notes its name before and after each call, and adds its
// name to the call's context.
type logObserver struct {
	name string
	log  *[]string
}

func (o logObserver) ObserveSync(ctx context.Context, c Call) (context.Context, func(error)) {
	*o.log = append(*o.log, o.name+" before "+c.UpdateType)
	ctx = context.WithValue(ctx, ctxKey(o.name), true)
	return ctx, func(err error) { *o.log = append(*o.log, o.name+" after "+err.Error()) }
}

// Observers see a call in their order before it and in the reverse
// order after it, with its error; the call runs with the context they
// built.
func TestRunNestsTheObservers(t *testing.T) {
	var log []string
	boom := errors.New("boom")
	err := Run(context.Background(), []SyncObserver{logObserver{"first", &log}, logObserver{"second", &log}},
		Call{Stage: SyncPod, UpdateType: "create"}, func(ctx context.Context) error {
			if ctx.Value(ctxKey("first")) == nil || ctx.Value(ctxKey("second")) == nil {
				t.Error("the call did not run with the observers' context")
			}
			log = append(log, "call")
			return boom
		})
	if err != boom {
		t.Fatalf("error %v", err)
	}
	if got := strings.Join(log, "; "); got != "first before create; second before create; call; second after boom; first after boom" {
		t.Fatalf("order %q", got)
	}
}
