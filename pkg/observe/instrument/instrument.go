// Package instrument is the leaf the node's instrumentation hangs from:
// the kinds of step a pod's life is made of, the one interface a
// component records its steps through, and the observers of the pod
// workers' calls. The observers (the timeline, the metrics, the tracer)
// implement SyncObserver and register with the pod workers as an
// ordered list; the components that record steps (the merge, the volume
// manager, the runtime manager, the prober, the status writer) depend on
// this package only, never on an observer, so none of them sits above
// the pod workers.
package instrument

import (
	"context"

	v1 "k8s.io/api/core/v1"
)

// Kind is what a step was: each component records its own kinds.
type Kind string

// Step kinds.
const (
	KindSource      Kind = "source"      // the pod was first seen
	KindMerge       Kind = "merge"       // an operation of the sources' merge
	KindWait        Kind = "wait"        // time between steps, before the pod ran
	KindSync        Kind = "sync"        // one SyncPod
	KindRunning     Kind = "running"     // first reported Running
	KindReady       Kind = "ready"       // first reported Ready
	KindEvent       Kind = "event"       // an event about the pod or a container
	KindVolume      Kind = "volume"      // setting up one volume
	KindImage       Kind = "image"       // making sure an image is present
	KindSandbox     Kind = "sandbox"     // creating the pod sandbox
	KindContainer   Kind = "container"   // creating and starting a container
	KindHook        Kind = "hook"        // a lifecycle hook
	KindKill        Kind = "kill"        // stopping a container
	KindProbe       Kind = "probe"       // a probe result that changed
	KindStatus      Kind = "status"      // the status written to the API
	KindTerminating Kind = "terminating" // stopping its containers
	KindTerminated  Kind = "terminated"  // releasing what it held
	KindResize      Kind = "resize"      // a container resized in place
)

// StepRecorder records a step of a pod's life: Begin starts it, and the
// function it returns ends it with its error and a detail.
type StepRecorder interface {
	Begin(pod *v1.Pod, kind Kind, name string) func(err error, detail string)
}

// NoSteps records nothing: for a component built without a timeline (in
// tests).
type NoSteps struct{}

// Begin records nothing.
func (NoSteps) Begin(*v1.Pod, Kind, string) func(error, string) { return func(error, string) {} }

// Stage is which of the sync scripts the pod workers call.
type Stage int

// The pod workers' calls.
const (
	SyncPod Stage = iota
	SyncTerminatingPod
	SyncTerminatingRuntimePod
	SyncTerminatedPod
)

// Call is one of the pod workers' calls into the sync scripts.
type Call struct {
	Stage Stage
	Pod   *v1.Pod
	// UpdateType names the update a SyncPod carries (create, update,
	// sync); "kill" for the terminations.
	UpdateType string
	// GracePeriod is a SyncTerminatingPod's override, nil if none.
	GracePeriod *int64
}

// SyncObserver watches the pod workers' calls into the sync scripts.
// ObserveSync is called before the call: it returns the context the call
// runs with (a tracer's span, say) and the function called after it, with
// the call's error.
type SyncObserver interface {
	ObserveSync(ctx context.Context, c Call) (context.Context, func(err error))
}

// Run runs fn, one call of the pod workers, under the observers: each
// observes it in order, fn runs with the context they built, and their
// after functions are called in the reverse order with fn's error.
func Run(ctx context.Context, observers []SyncObserver, c Call, fn func(context.Context) error) error {
	after := make([]func(error), len(observers))
	for i, o := range observers {
		ctx, after[i] = o.ObserveSync(ctx, c)
	}
	err := fn(ctx)
	for i := len(after) - 1; i >= 0; i-- {
		after[i](err)
	}
	return err
}
