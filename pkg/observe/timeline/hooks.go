package timeline

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/pods/podstatus"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// Syncs is the observer of the pod workers' calls that records them: the
// pod first seen (the merge's config.seen annotation), each sync and,
// until the pod first runs, the wait before each sync, so that the steps
// from seen to running add up to the pod's start latency exactly as the
// pod start metric measures it; then termination.
func (r *Recorder) Syncs(status podstatus.Reader) instrument.SyncObserver {
	return &syncs{r: r, status: status, starting: map[types.UID]time.Time{}, ran: map[types.UID]bool{}, ready: map[types.UID]bool{}}
}

type syncs struct {
	r      *Recorder
	status podstatus.Reader

	mu sync.Mutex
	// starting holds, for a pod not yet running, when its last step ended.
	starting map[types.UID]time.Time
	ran      map[types.UID]bool
	// ready holds the pods that reported Ready once.
	ready map[types.UID]bool
}

func (s *syncs) ObserveSync(ctx context.Context, c instrument.Call) (context.Context, func(error)) {
	switch c.Stage {
	case instrument.SyncPod:
		return ctx, s.syncPod(c.Pod, c.UpdateType)
	case instrument.SyncTerminatingPod:
		detail := ""
		if c.GracePeriod != nil {
			detail = fmt.Sprintf("grace period %ds", *c.GracePeriod)
		}
		end := s.r.Begin(c.Pod, instrument.KindTerminating, "stopping containers")
		return ctx, func(err error) { end(err, detail) }
	case instrument.SyncTerminatedPod:
		end := s.r.Begin(c.Pod, instrument.KindTerminated, "releasing volumes and cgroups")
		return ctx, func(err error) {
			end(err, "")
			if err == nil {
				s.forget(c.Pod.UID)
			}
		}
	}
	return ctx, func(error) {}
}

func (s *syncs) syncPod(pod *v1.Pod, updateType string) func(error) {
	now := s.r.Now()
	s.mu.Lock()
	last, starting := s.starting[pod.UID]
	first := !starting && !s.ran[pod.UID]
	if first {
		last = now
		if seen, err := time.Parse(time.RFC3339Nano, pod.Annotations[podutil.ConfigFirstSeenAnnotationKey]); err == nil {
			last = seen
		}
		s.r.Add(pod, Step{Kind: instrument.KindSource, Name: "seen", Start: last, End: last, Outcome: "ok", Detail: "source " + pod.Annotations[podutil.ConfigSourceAnnotationKey]})
		starting = true
	}
	s.mu.Unlock()
	if starting {
		name := "waiting for the next sync"
		if first {
			name = "waiting to be admitted and synced"
		}
		s.r.Add(pod, Step{Kind: instrument.KindWait, Name: name, Start: last, End: now, Outcome: "ok"})
	}
	return func(err error) {
		end := s.r.Now()
		s.r.Add(pod, Step{Kind: instrument.KindSync, Name: "sync (" + updateType + ")", Start: now, End: end, Outcome: outcome(err)})
		s.afterSync(pod, starting, end)
	}
}

func (s *syncs) forget(uid types.UID) {
	s.mu.Lock()
	delete(s.starting, uid)
	delete(s.ran, uid)
	delete(s.ready, uid)
	s.mu.Unlock()
	s.r.Finish(uid)
}

// afterSync notes, at the end of a sync, that the pod first reports
// Running, then Ready, or that its next wait begins.
func (s *syncs) afterSync(pod *v1.Pod, starting bool, now time.Time) {
	s.mu.Lock()
	ready := s.ready[pod.UID]
	s.mu.Unlock()
	if !starting && ready {
		return
	}
	status, ok := s.status.GetPodStatus(pod.UID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if starting {
		if !ok || status.Phase != v1.PodRunning {
			s.starting[pod.UID] = now
			return
		}
		delete(s.starting, pod.UID)
		s.ran[pod.UID] = true
		s.r.Add(pod, Step{Kind: instrument.KindRunning, Name: "running", Start: now, End: now, Outcome: "ok"})
	}
	if ok && podutil.IsPodReady(status) && !s.ready[pod.UID] {
		s.ready[pod.UID] = true
		s.r.Add(pod, Step{Kind: instrument.KindReady, Name: "ready", Start: now, End: now, Outcome: "ok"})
	}
}

// Events returns an event recorder that also records each event about a
// pod (or one of its containers) in the pod's timeline.
func (r *Recorder) Events(next record.EventRecorder) record.EventRecorder {
	return &events{next: next, r: r}
}

type events struct {
	next record.EventRecorder
	r    *Recorder
}

func (e *events) Event(object runtime.Object, eventtype, reason, message string) {
	e.record(object, eventtype, reason, message)
	e.next.Event(object, eventtype, reason, message)
}

func (e *events) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	e.record(object, eventtype, reason, fmt.Sprintf(messageFmt, args...))
	e.next.Eventf(object, eventtype, reason, messageFmt, args...)
}

func (e *events) AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	e.record(object, eventtype, reason, fmt.Sprintf(messageFmt, args...))
	e.next.AnnotatedEventf(object, annotations, eventtype, reason, messageFmt, args...)
}

func (e *events) record(object runtime.Object, eventtype, reason, message string) {
	var pod *v1.Pod
	switch o := object.(type) {
	case *v1.Pod:
		pod = o
	case *v1.ObjectReference:
		if o.Kind == "Pod" {
			pod = &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: o.UID, Namespace: o.Namespace, Name: o.Name}}
			if o.FieldPath != "" {
				message = o.FieldPath + ": " + message
			}
		}
	}
	if pod == nil {
		return
	}
	now := e.r.Now()
	result := "ok"
	if eventtype == v1.EventTypeWarning {
		result = "warning"
	}
	e.r.Add(pod, Step{Kind: instrument.KindEvent, Name: reason, Start: now, End: now, Outcome: result, Detail: message})
}
