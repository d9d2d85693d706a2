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

	"github.com/nodelet/nodelet/pkg/container"
	"github.com/nodelet/nodelet/pkg/instrument"
	"github.com/nodelet/nodelet/pkg/podutil"
	"github.com/nodelet/nodelet/pkg/podworkers"
)

// StatusGetter reads a pod's API status.
type StatusGetter interface {
	GetPodStatus(uid types.UID) (v1.PodStatus, bool)
}

// InstrumentSyncer records the pod workers' calls into s: the pod first
// seen (the merge's config.seen annotation), each sync and, until the pod
// first runs, the wait before each sync, so that the steps from seen to
// running add up to the pod's start latency exactly as the pod start
// metric measures it; then termination.
func (r *Recorder) InstrumentSyncer(s podworkers.Syncer, status StatusGetter) podworkers.Syncer {
	return &syncer{Syncer: s, r: r, status: status, starting: map[types.UID]time.Time{}, ran: map[types.UID]bool{}, ready: map[types.UID]bool{}}
}

type syncer struct {
	podworkers.Syncer
	r      *Recorder
	status StatusGetter

	mu sync.Mutex
	// starting holds, for a pod not yet running, when its last step ended.
	starting map[types.UID]time.Time
	ran      map[types.UID]bool
	// ready holds the pods that reported Ready once.
	ready map[types.UID]bool
}

func (s *syncer) SyncPod(ctx context.Context, updateType podworkers.UpdateType, pod, mirrorPod *v1.Pod, st *container.PodStatus) (bool, error) {
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
	terminal, err := s.Syncer.SyncPod(ctx, updateType, pod, mirrorPod, st)
	end := s.r.Now()
	s.r.Add(pod, Step{Kind: instrument.KindSync, Name: "sync (" + updateType.String() + ")", Start: now, End: end, Outcome: outcome(err)})
	s.afterSync(pod, starting, end)
	return terminal, err
}

// afterSync notes, at the end of a sync, that the pod first reports
// Running, then Ready, or that its next wait begins.
func (s *syncer) afterSync(pod *v1.Pod, starting bool, now time.Time) {
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

func (s *syncer) SyncTerminatingPod(ctx context.Context, pod *v1.Pod, st *container.PodStatus, grace *int64, fn podworkers.PodStatusFunc) error {
	detail := ""
	if grace != nil {
		detail = fmt.Sprintf("grace period %ds", *grace)
	}
	end := s.r.Begin(pod, instrument.KindTerminating, "stopping containers")
	err := s.Syncer.SyncTerminatingPod(ctx, pod, st, grace, fn)
	end(err, detail)
	return err
}

func (s *syncer) SyncTerminatedPod(ctx context.Context, pod *v1.Pod, st *container.PodStatus) error {
	end := s.r.Begin(pod, instrument.KindTerminated, "releasing volumes and cgroups")
	err := s.Syncer.SyncTerminatedPod(ctx, pod, st)
	end(err, "")
	if err == nil {
		s.mu.Lock()
		delete(s.starting, pod.UID)
		delete(s.ran, pod.UID)
		delete(s.ready, pod.UID)
		s.mu.Unlock()
		s.r.Finish(pod.UID)
	}
	return err
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
