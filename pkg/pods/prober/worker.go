package prober

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/observe/instrument"
)

// worker probes one container of one pod with one probe, every period,
// for as long as the pod runs.
type worker struct {
	m         *Manager
	pod       *v1.Pod
	container *v1.Container
	typ       Type
	spec      *v1.Probe
	stopCh    chan struct{}

	// containerID is the instance being probed; a new one starts over.
	containerID string
	// streak counts consecutive equal outcomes, against the thresholds.
	last   bool
	streak int32
	// onHold stops probing after a liveness or startup failure, until the
	// container is replaced.
	onHold bool
	// saved is the result last saved for the instance, at savedAt.
	saved   Result
	savedAt time.Time
}

func newWorker(m *Manager, pod *v1.Pod, c *v1.Container, t Type, spec *v1.Probe) *worker {
	return &worker{m: m, pod: pod, container: c, typ: t, spec: spec, stopCh: make(chan struct{})}
}

func (w *worker) stop() { close(w.stopCh) }

func (w *worker) period() time.Duration {
	if w.spec.PeriodSeconds > 0 {
		return time.Duration(w.spec.PeriodSeconds) * time.Second
	}
	return 10 * time.Second
}

func (w *worker) run() {
	defer func() {
		if w.containerID != "" {
			w.m.forget(w.typ, w.containerID)
		}
	}()
	// Spread workers out: after a restart they would all probe at once.
	select {
	case <-w.stopCh:
		return
	case <-w.m.clock.After(w.m.jitter(w.period())):
	}
	t := w.m.clock.NewTicker(w.period())
	defer t.Stop()
	for {
		if !w.probeOnce() {
			return
		}
		select {
		case <-w.stopCh:
			return
		case <-t.C():
		}
	}
}

// initial is a result before any probe: not ready, alive, not started.
func (w *worker) initial() Result {
	switch w.typ {
	case Readiness:
		return Failure
	case Liveness:
		return Success
	default:
		return Unknown
	}
}

// probeOnce probes if the container is due and reports whether the worker
// should keep going.
func (w *worker) probeOnce() bool {
	status, ok := w.m.status.GetPodStatus(w.pod.UID)
	if !ok {
		return true // not synced yet
	}
	if status.Phase == v1.PodSucceeded || status.Phase == v1.PodFailed {
		return false
	}
	cs := findStatus(status, w.container.Name)
	if cs == nil || cs.ContainerID == "" {
		return true
	}
	id := cs.ContainerID
	if i := strings.Index(id, "://"); i >= 0 {
		id = id[i+3:]
	}
	if id != w.containerID {
		w.adopt(id)
	}
	if w.onHold {
		return true
	}
	if cs.State.Running == nil {
		if w.typ == Readiness && w.m.set(Readiness, id, Failure) {
			w.m.publish(Update{PodUID: w.pod.UID, ContainerID: id, Type: w.typ, Result: Failure}, w.stopCh)
		}
		return true
	}
	// Liveness and readiness wait until the startup probe passed; the
	// startup probe stops once it has.
	started := w.m.Started(w.container, id)
	if w.typ == Startup && started {
		// Passed for good: the saved result is renewed, not re-probed.
		w.keep(Success)
		return true
	}
	if w.typ != Startup && !started {
		return true
	}
	if since := w.m.clock.Since(cs.State.Running.StartedAt.Time); since < time.Duration(w.spec.InitialDelaySeconds)*time.Second {
		return true
	}

	start := w.m.clock.Now()
	o := runProbe(w.m.base, w.m.exec, w.spec, w.container, id, status.PodIP)
	if w.m.base.Err() != nil {
		// nodelet is stopping: the probe was cut short, which says
		// nothing about the container.
		return false
	}
	if o.errored {
		// The runtime could not run the probe: as upstream, the result
		// is thrown away, so a runtime hiccup neither fails nor passes
		// the container.
		w.m.recorder.Eventf(w.ref(), v1.EventTypeWarning, "Unhealthy", "%s probe errored and resulted in unknown state: %s", w.typ, o.output)
		klog.V(1).InfoS("Probe errored", "probe", w.typ, "pod", klog.KObj(w.pod), "podUID", w.pod.UID, "container", w.container.Name, "err", o.output)
		return true
	}
	w.m.observer.Observe(Observation{Pod: w.pod, Container: w.container.Name, Type: w.typ, OK: o.ok, Took: w.m.clock.Since(start)})
	if o.warning != "" {
		w.m.recorder.Eventf(w.ref(), v1.EventTypeWarning, "ProbeWarning", "%s probe warning: %s", w.typ, o.warning)
	}
	if !o.ok {
		w.m.recorder.Eventf(w.ref(), v1.EventTypeWarning, "Unhealthy", "%s probe failed: %s", w.typ, o.output)
		klog.V(2).InfoS("Probe failed", "probe", w.typ, "pod", klog.KObj(w.pod), "podUID", w.pod.UID, "container", w.container.Name, "output", o.output)
	}
	if o.ok == w.last {
		w.streak++
	} else {
		w.last, w.streak = o.ok, 1
	}
	threshold := w.spec.FailureThreshold
	if o.ok {
		threshold = w.spec.SuccessThreshold
	}
	if threshold <= 0 {
		threshold = 1
	}
	if w.streak < threshold {
		return true
	}
	r := Failure
	if o.ok {
		r = Success
	}
	w.keep(r)
	if w.m.set(w.typ, id, r) {
		var err error
		if r == Failure {
			err = fmt.Errorf("failed %d times: %s", w.streak, o.output)
		}
		w.m.steps.Begin(w.pod, instrument.KindProbe, fmt.Sprintf("%s %s", w.typ, w.container.Name))(err, fmt.Sprintf("%d in a row", w.streak))
		w.m.publish(Update{PodUID: w.pod.UID, ContainerID: id, Type: w.typ, Result: r}, w.stopCh)
	}
	if r == Failure && w.typ != Readiness {
		// The container will be restarted; wait for the new one.
		w.onHold, w.streak = true, 0
	}
	return true
}

// ref is what the worker's events are about: its container.
func (w *worker) ref() *v1.ObjectReference {
	return &v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Name: w.pod.Name, Namespace: w.pod.Namespace, UID: w.pod.UID,
		FieldPath: fmt.Sprintf("spec.containers{%s}", w.container.Name)}
}

// adopt starts on a new container instance: from the result restored
// for it from before a restart, or from the initial one.
func (w *worker) adopt(id string) {
	if w.containerID != "" {
		w.m.forget(w.typ, w.containerID)
	}
	w.containerID, w.streak, w.onHold = id, 0, false
	w.saved, w.savedAt = Unknown, time.Time{}
	if r, ok := w.m.takeRestored(w.typ, id); ok {
		// As if the probe had just reached its threshold: the result
		// stands until the thresholds overturn it.
		w.last, w.streak = r.Result == Success, 1
		w.saved, w.savedAt = r.Result, r.At
		klog.V(2).InfoS("Probe result restored", "probe", w.typ, "pod", klog.KObj(w.pod), "podUID", w.pod.UID, "container", w.container.Name, "result", r.Result, "savedAt", r.At)
		return
	}
	w.m.set(w.typ, id, w.initial())
}

// validFor is how long a saved result may be trusted: as long as the
// probe could take to overturn it.
func (w *worker) validFor() time.Duration {
	threshold := w.spec.FailureThreshold
	if threshold <= 0 {
		threshold = 3
	}
	return w.period() * time.Duration(threshold)
}

// keep saves a settled result when it changed, or before the saved one
// expires.
func (w *worker) keep(r Result) {
	now := w.m.clock.Now()
	if r == w.saved && now.Sub(w.savedAt) < w.validFor()/2 {
		return
	}
	w.saved, w.savedAt = r, now
	w.m.save(Saved{Pod: w.pod.UID, Container: w.container.Name, ContainerID: w.containerID, Type: w.typ, Result: r, At: now, ValidFor: w.validFor()})
}

func findStatus(s v1.PodStatus, name string) *v1.ContainerStatus {
	for _, list := range [][]v1.ContainerStatus{s.ContainerStatuses, s.InitContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}
