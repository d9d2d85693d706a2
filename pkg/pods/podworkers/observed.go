package podworkers

import (
	"context"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// observed runs each call into the sync scripts under the observers
// (timeline, metrics, tracing), in their order: they register as a list
// rather than wrap the syncer one inside another, and none of them needs
// to know the workers' types.
type observed struct {
	Syncer
	observers []instrument.SyncObserver
}

func observe(s Syncer, observers []instrument.SyncObserver) Syncer {
	if len(observers) == 0 {
		return s
	}
	return observed{Syncer: s, observers: observers}
}

func (o observed) SyncPod(ctx context.Context, updateType UpdateType, pod, mirrorPod *v1.Pod, st *container.PodStatus) (bool, error) {
	var terminal bool
	err := instrument.Run(ctx, o.observers, instrument.Call{Stage: instrument.SyncPod, Pod: pod, UpdateType: updateType.String()},
		func(ctx context.Context) (err error) {
			terminal, err = o.Syncer.SyncPod(ctx, updateType, pod, mirrorPod, st)
			return err
		})
	return terminal, err
}

func (o observed) SyncTerminatingPod(ctx context.Context, pod *v1.Pod, st *container.PodStatus, grace *int64, fn PodStatusFunc) error {
	return instrument.Run(ctx, o.observers, instrument.Call{Stage: instrument.SyncTerminatingPod, Pod: pod, UpdateType: UpdateKill.String(), GracePeriod: grace},
		func(ctx context.Context) error { return o.Syncer.SyncTerminatingPod(ctx, pod, st, grace, fn) })
}

func (o observed) SyncTerminatingRuntimePod(ctx context.Context, running *container.Pod) error {
	return instrument.Run(ctx, o.observers, instrument.Call{Stage: instrument.SyncTerminatingRuntimePod, Pod: running.ToAPIPod(), UpdateType: UpdateKill.String()},
		func(ctx context.Context) error { return o.Syncer.SyncTerminatingRuntimePod(ctx, running) })
}

func (o observed) SyncTerminatedPod(ctx context.Context, pod *v1.Pod, st *container.PodStatus) error {
	return instrument.Run(ctx, o.observers, instrument.Call{Stage: instrument.SyncTerminatedPod, Pod: pod, UpdateType: UpdateKill.String()},
		func(ctx context.Context) error { return o.Syncer.SyncTerminatedPod(ctx, pod, st) })
}
