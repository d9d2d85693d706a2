package podsync

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// Hook is one concern's part in a pod's life, as Nomad's alloc runner
// hooks are: the PodSyncer runs the hooks the composition root lists, in
// that order, at each stage a hook takes part in (the interfaces below).
// A concern that takes no part on this node (no API server, no DRA) is
// left out of the list: the syncer holds no null object for it, and a new
// concern is a new hook, not a new field.
//
// The stages, in a pod's life:
//
//	SyncPod:            Register → Prepare, beside the sandbox's creation → PreRun → runtime
//	                    (the containers wait for Prepare; PreRun does not)
//	SyncTerminatingPod: runtime stops every container → PostStop → final status
//	SyncTerminatedPod:  Cleanup → cgroup removed → status terminated
type Hook interface {
	// Name names the hook in logs.
	Name() string
}

// Registrar learns of the pod at every sync, before anything of it is set
// up: the objects it refers to are watched.
type Registrar interface {
	Hook
	Register(pod *v1.Pod)
}

// Preparer readies what the pod's containers need before the first one
// starts (its grant written, its volumes set up). For a pod without a
// running sandbox the preparers run while the runtime creates it, and the
// containers wait for them; otherwise they run first. An error fails the
// sync, which the pod workers retry.
type Preparer interface {
	Hook
	Prepare(ctx context.Context, pod *v1.Pod) error
}

// Unservable is a Preparer that can tell, before trying, that it can
// never prepare the pod on this node: such a pod gets no sandbox.
type Unservable interface {
	Unservable(pod *v1.Pod) error
}

// PreRunner runs just before the runtime syncs the pod, after the
// preparers started: the pod's resource claims are prepared.
type PreRunner interface {
	Hook
	PreRun(ctx context.Context, pod *v1.Pod, sandboxReady bool) error
}

// PostStopper runs once no container of the pod runs, before its final
// status is written: claims are unprepared, so their allocation can be
// released as soon as the API sees the pod end.
type PostStopper interface {
	Hook
	PostStop(ctx context.Context, pod *v1.Pod) error
}

// Cleaner runs once the pod is terminated, before its cgroup goes: its
// volumes are unmounted, then what it referred to is no longer watched.
type Cleaner interface {
	Hook
	Cleanup(ctx context.Context, pod *v1.Pod) error
}

// hooks are the root's list, split by stage once.
type hooks struct {
	registrars   []Registrar
	preparers    []Preparer
	preRunners   []PreRunner
	postStoppers []PostStopper
	cleaners     []Cleaner
}

func splitHooks(list []Hook) hooks {
	var h hooks
	for _, hook := range list {
		if r, ok := hook.(Registrar); ok {
			h.registrars = append(h.registrars, r)
		}
		if p, ok := hook.(Preparer); ok {
			h.preparers = append(h.preparers, p)
		}
		if p, ok := hook.(PreRunner); ok {
			h.preRunners = append(h.preRunners, p)
		}
		if p, ok := hook.(PostStopper); ok {
			h.postStoppers = append(h.postStoppers, p)
		}
		if c, ok := hook.(Cleaner); ok {
			h.cleaners = append(h.cleaners, c)
		}
	}
	return h
}

// unservable says why a preparer can never prepare the pod here, or nil.
func (h hooks) unservable(pod *v1.Pod) error {
	for _, p := range h.preparers {
		if u, ok := p.(Unservable); ok {
			if err := u.Unservable(pod); err != nil {
				return err
			}
		}
	}
	return nil
}

// EventError is a hook's failure that the pod's events report, with
// upstream's reason and message.
type EventError struct {
	Reason, Message string
	Err             error
}

func (e *EventError) Error() string { return e.Err.Error() }
func (e *EventError) Unwrap() error { return e.Err }

// GrantsHook writes the resource grants admission staged (allocation.Store)
// before the pod's containers start. A grant that cannot be written is
// logged and the pod runs with it, as it always did: a restart admits it
// again.
func GrantsHook(w GrantWriter) Hook { return grantsHook{w} }

// GrantWriter writes staged grants to disk (allocation.Store).
type GrantWriter interface {
	Commit() error
}

type grantsHook struct{ w GrantWriter }

func (grantsHook) Name() string { return "grants" }

func (g grantsHook) Prepare(_ context.Context, pod *v1.Pod) error {
	if err := g.w.Commit(); err != nil {
		klog.ErrorS(err, "Failed to record the pod's resource grant", "pod", klog.KObj(pod), "podUID", pod.UID)
	}
	return nil
}

// PodVolumes is the volume manager as the sync scripts use it.
type PodVolumes interface {
	WaitForAttachAndMount(ctx context.Context, pod *v1.Pod) error
	WaitForUnmount(ctx context.Context, pod *v1.Pod) error
	// Unservable says why the pod's volumes can never be set up on this
	// node, whatever the API server and the drivers do; nil when only a
	// set-up can tell.
	Unservable(pod *v1.Pod) error
}

// VolumesHook sets the pod's volumes up before its containers start (and
// refreshes them at every sync: configMaps, secrets, tokens and the
// downward API follow their sources while the pod runs), and waits for
// their teardown once the pod is terminated.
func VolumesHook(v PodVolumes) Hook { return volumesHook{v} }

type volumesHook struct{ v PodVolumes }

func (volumesHook) Name() string                   { return "volumes" }
func (h volumesHook) Unservable(pod *v1.Pod) error { return h.v.Unservable(pod) }

func (h volumesHook) Prepare(ctx context.Context, pod *v1.Pod) error {
	if err := h.v.WaitForAttachAndMount(ctx, pod); err != nil {
		klog.ErrorS(err, "Unable to attach or mount volumes for pod; skipping pod", "pod", klog.KObj(pod), "podUID", pod.UID)
		return fmt.Errorf("unable to attach or mount volumes: %w", err)
	}
	return nil
}

func (h volumesHook) Cleanup(ctx context.Context, pod *v1.Pod) error {
	if err := h.v.WaitForUnmount(ctx, pod); err != nil {
		return err
	}
	klog.V(4).InfoS("Pod termination unmounted volumes", "pod", klog.KObj(pod), "podUID", pod.UID)
	return nil
}

// PodClaims prepares the resource claims of pods (the DRA manager).
type PodClaims interface {
	Prepare(ctx context.Context, pod *v1.Pod, sandboxReady bool) error
	Unprepare(ctx context.Context, pod *v1.Pod) error
}

// ClaimsHook prepares the pod's resource claims before the runtime syncs
// it, and unprepares them once its containers stopped.
func ClaimsHook(c PodClaims) Hook { return claimsHook{c} }

type claimsHook struct{ c PodClaims }

func (claimsHook) Name() string { return "resource claims" }

func (h claimsHook) PreRun(ctx context.Context, pod *v1.Pod, sandboxReady bool) error {
	if err := h.c.Prepare(ctx, pod, sandboxReady); err != nil {
		return &EventError{Reason: "FailedPrepareDynamicResources", Message: fmt.Sprintf("Failed to prepare dynamic resources: %v", err),
			Err: fmt.Errorf("failed to prepare dynamic resources: %w", err)}
	}
	return nil
}

func (h claimsHook) PostStop(ctx context.Context, pod *v1.Pod) error {
	if err := h.c.Unprepare(ctx, pod); err != nil {
		return &EventError{Reason: "FailedUnprepareDynamicResources", Message: fmt.Sprintf("Failed to unprepare dynamic resources: %v", err),
			Err: fmt.Errorf("failed to unprepare dynamic resources: %w", err)}
	}
	return nil
}

// PodObjects watches the API objects pods refer to.
type PodObjects interface {
	RegisterPod(pod *v1.Pod)
	UnregisterPod(pod *v1.Pod)
}

// ObjectsHook watches what the pod refers to (configMaps, secrets) while
// it may need it: from its first sync until its volumes are gone.
func ObjectsHook(o PodObjects) Hook { return objectsHook{o} }

type objectsHook struct{ o PodObjects }

func (objectsHook) Name() string           { return "object watches" }
func (h objectsHook) Register(pod *v1.Pod) { h.o.RegisterPod(pod) }
func (h objectsHook) Cleanup(_ context.Context, pod *v1.Pod) error {
	h.o.UnregisterPod(pod)
	return nil
}

// reportHookError records a hook's failure as the pod's event when it
// carries one, and returns it.
func (s *PodSyncer) reportHookError(pod *v1.Pod, err error) error {
	var ev *EventError
	if errors.As(err, &ev) {
		s.recorder.Event(pod, v1.EventTypeWarning, ev.Reason, ev.Message)
	}
	return err
}
