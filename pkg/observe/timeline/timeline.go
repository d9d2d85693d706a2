// Package timeline keeps, for every pod, the steps of its life with their
// start, end and outcome: when its source delivered it, each sync and the
// waits between them until it ran, its events (pulls, container starts,
// probe failures, kills), its termination. An operator asking why a pod
// was slow to start reads it from the kubelet API
// (/debug/pods/<namespace>/<name>/timeline) as JSON or as a table with a
// waterfall.
//
// It is bounded: at most Options.MaxSteps steps a pod (the oldest after
// the first few are dropped and counted), and the timelines of the last
// Options.KeepFinished finished pods.
package timeline

import (
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/observe/instrument"
)

// Step is one thing that happened to a pod. A point in time has End
// equal to Start.
type Step struct {
	Kind    instrument.Kind `json:"kind"`
	Name    string          `json:"name"`
	Start   time.Time       `json:"start"`
	End     time.Time       `json:"end"`
	Outcome string          `json:"outcome"`
	Detail  string          `json:"detail,omitempty"`
}

// Duration is how long the step took.
func (s Step) Duration() time.Duration { return s.End.Sub(s.Start) }

// Timeline is one pod's steps, in the order they began.
type Timeline struct {
	UID       types.UID `json:"uid"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Steps     []Step    `json:"steps"`
	// Dropped counts steps left out to keep the timeline bounded.
	Dropped int `json:"dropped,omitempty"`
}

// keepFirst is how many of a pod's first steps are never dropped: its
// start is what operators most often ask about.
const keepFirst = 32

// Options bound a Recorder.
type Options struct {
	Clock clock.PassiveClock
	// MaxSteps bounds each pod's steps; KeepFinished how many finished
	// pods' timelines stay readable.
	MaxSteps, KeepFinished int
	// Finished, if set, receives each pod's timeline when the pod
	// finishes (the node journal keeps the last ones across restarts).
	Finished func(Timeline)
	// Observe, if set, is told of every step as it is recorded (the
	// tracer makes spans of them); it must not block.
	Observe func(pod *v1.Pod, s Step)
}

// Recorder keeps the timelines. It is safe for concurrent use.
type Recorder struct {
	o        Options
	mu       sync.Mutex
	pods     map[types.UID]*Timeline
	byName   map[string]types.UID
	finished []types.UID
}

// New returns an empty Recorder.
func New(o Options) *Recorder {
	if o.MaxSteps < keepFirst*2 {
		o.MaxSteps = keepFirst * 2
	}
	return &Recorder{o: o, pods: map[types.UID]*Timeline{}, byName: map[string]types.UID{}}
}

// Now is the recorder's clock's time.
func (r *Recorder) Now() time.Time { return r.o.Clock.Now() }

// Add records a step of the pod.
func (r *Recorder) Add(pod *v1.Pod, s Step) {
	if pod == nil || pod.UID == "" {
		return
	}
	if r.o.Observe != nil {
		r.o.Observe(pod, s)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.pods[pod.UID]
	if !ok {
		t = &Timeline{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name}
		r.pods[pod.UID] = t
		r.byName[pod.Namespace+"/"+pod.Name] = pod.UID
	}
	if len(t.Steps) >= r.o.MaxSteps {
		// Drop the oldest step after the first few.
		t.Steps = append(t.Steps[:keepFirst], t.Steps[keepFirst+1:]...)
		t.Dropped++
	}
	t.Steps = append(t.Steps, s)
}

// Begin starts a step of the pod now; the function returned ends it with
// the error (nil is success) and a detail.
func (r *Recorder) Begin(pod *v1.Pod, kind instrument.Kind, name string) func(err error, detail string) {
	start := r.Now()
	return func(err error, detail string) {
		r.Add(pod, Step{Kind: kind, Name: name, Start: start, End: r.Now(), Outcome: outcome(err), Detail: detail})
	}
}

func outcome(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

// Finish marks the pod done: its timeline stays readable among the last
// KeepFinished finished pods.
func (r *Recorder) Finish(uid types.UID) {
	if !r.finish(uid) || r.o.Finished == nil {
		return
	}
	if t, ok := r.Get(uid); ok {
		r.o.Finished(t)
	}
}

// finish marks the pod done and reports whether it was not already.
func (r *Recorder) finish(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.pods[uid]; !ok {
		return false
	}
	for _, f := range r.finished {
		if f == uid {
			return false
		}
	}
	r.finished = append(r.finished, uid)
	r.trim()
	return true
}

// Restore adds finished pods' timelines kept from before a restart,
// oldest first, unless the pod has one already.
func (r *Recorder) Restore(ts []Timeline) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range ts {
		t := ts[i]
		if _, ok := r.pods[t.UID]; ok || t.UID == "" {
			continue
		}
		r.pods[t.UID] = &t
		r.byName[t.Namespace+"/"+t.Name] = t.UID
		r.finished = append(r.finished, t.UID)
	}
	r.trim()
}

// trim forgets the oldest finished timelines beyond KeepFinished. Call
// with mu held.
func (r *Recorder) trim() {
	for len(r.finished) > r.o.KeepFinished {
		old := r.finished[0]
		r.finished = r.finished[1:]
		if t, ok := r.pods[old]; ok {
			if r.byName[t.Namespace+"/"+t.Name] == old {
				delete(r.byName, t.Namespace+"/"+t.Name)
			}
			delete(r.pods, old)
		}
	}
}

// Get returns a copy of the pod's timeline.
func (r *Recorder) Get(uid types.UID) (Timeline, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.pods[uid]
	if !ok {
		return Timeline{}, false
	}
	c := *t
	// Spans are added when they end: order by start, so a sync comes
	// before the events that happened during it.
	c.Steps = append([]Step(nil), t.Steps...)
	slices.SortStableFunc(c.Steps, func(a, b Step) int { return a.Start.Compare(b.Start) })
	return c, true
}

// Lookup returns the timeline of the newest pod of that name.
func (r *Recorder) Lookup(namespace, name string) (Timeline, bool) {
	r.mu.Lock()
	uid, ok := r.byName[namespace+"/"+name]
	r.mu.Unlock()
	if !ok {
		return Timeline{}, false
	}
	return r.Get(uid)
}
