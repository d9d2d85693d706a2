// Package prober runs containers' liveness, readiness and startup probes:
// the "probe results" channel of the sync loop. SyncPod adds every pod
// (AddPod); each container probe gets a worker that probes every period
// once the container runs, applies the thresholds, and publishes changes.
// The sync loop syncs the pod on a change; the runtime manager restarts a
// container whose liveness or startup probe failed, and the API status
// reads readiness and "started" from here. Termination stops liveness and
// startup probes first, then all of them.
package prober

import (
	"context"
	"math/rand"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/infra/periodic"
	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/pods/podstatus"
)

// Type is a kind of probe.
type Type int

const (
	Liveness Type = iota
	Readiness
	Startup
)

func (t Type) String() string {
	return [...]string{"Liveness", "Readiness", "Startup"}[t]
}

// Result is what a probe concluded about a container.
type Result int

const (
	// Unknown: not probed yet.
	Unknown Result = iota
	Success
	Failure
)

func (r Result) String() string {
	return [...]string{"Unknown", "Success", "Failure"}[r]
}

// Update reports a changed result.
type Update struct {
	PodUID      types.UID
	ContainerID string
	Type        Type
	Result      Result
}

// Options configure the prober manager.
type Options struct {
	Exec     Executor
	Status   podstatus.Reader
	Recorder record.EventRecorder
	Clock    clock.WithTicker
	// Jitter returns the random part of a worker's first wait; nil means
	// uniform in [0, period).
	Jitter func(period time.Duration) time.Duration
	// Steps records each change of a probe's result in the pod's
	// timeline; nil records nothing.
	Steps instrument.StepRecorder
	// Observer is told of every probe run (for /metrics/probes); nil
	// tells nothing.
	Observer Observer
	// Restored are the results saved before a restart. A container that
	// is still the same instance starts from its restored readiness and
	// passed startup probe, so a restart neither unreadies a ready pod
	// nor readies one whose startup probe has not passed. Liveness starts
	// over (its failures count from zero), and a result older than its
	// ValidFor is ignored.
	Restored []Saved
	// Save keeps a result across restarts; it is called on every change
	// and again before the saved result would expire. nil saves nothing.
	Save func(Saved)
}

// Saved is a probe's settled result for a container instance, as of At,
// to be trusted for ValidFor after that (the probe's period times its
// failure threshold: no longer than the probe could have taken to
// change it).
type Saved struct {
	Pod         types.UID
	Container   string
	ContainerID string
	Type        Type
	Result      Result
	At          time.Time
	ValidFor    time.Duration
}

// Observer is told of every probe run, and of a pod whose probes
// stopped for good.
type Observer interface {
	Observe(o Observation)
	Forget(pod *v1.Pod)
}

type noObserver struct{}

func (noObserver) Observe(Observation) {}
func (noObserver) Forget(*v1.Pod)      {}

// Observation is one probe run.
type Observation struct {
	Pod       *v1.Pod
	Container string
	Type      Type
	OK        bool
	Took      time.Duration
}

// Manager runs the probe workers and keeps their results.
type Manager struct {
	exec     Executor
	status   podstatus.Reader
	recorder record.EventRecorder
	clock    clock.WithTicker
	jitter   func(time.Duration) time.Duration
	steps    instrument.StepRecorder
	observer Observer
	updates  chan Update
	save     func(Saved)

	mu      sync.Mutex
	workers map[key]*worker
	results map[Type]map[string]Result // by container ID
	// restored are the results seeded from before a restart that no
	// worker has taken over yet, with their pod and save time.
	restored map[restoredKey]Saved

	// base is every probe's context: Run cancels it when nodelet stops
	// and waits for the workers (running), so no probe calls the runtime
	// after its connection closes. stopped: no worker starts any more.
	base    context.Context
	cancel  context.CancelFunc
	running sync.WaitGroup
	stopped bool
}

type key struct {
	uid       types.UID
	container string
	typ       Type
}

type restoredKey struct {
	typ         Type
	containerID string
}

// updatesBuffer lets workers report without waiting for the sync loop.
const updatesBuffer = 20

// New returns a prober manager.
func New(o Options) *Manager {
	if o.Jitter == nil {
		o.Jitter = func(p time.Duration) time.Duration { return time.Duration(rand.Int63n(int64(p))) }
	}
	if o.Steps == nil {
		o.Steps = instrument.NoSteps{}
	}
	if o.Observer == nil {
		o.Observer = noObserver{}
	}
	if o.Save == nil {
		o.Save = func(Saved) {}
	}
	base, cancel := context.WithCancel(context.Background())
	m := &Manager{
		base: base, cancel: cancel,
		exec: o.Exec, status: o.Status, recorder: o.Recorder, clock: o.Clock, jitter: o.Jitter, steps: o.Steps, observer: o.Observer,
		updates: make(chan Update, updatesBuffer), save: o.Save,
		workers:  map[key]*worker{},
		results:  map[Type]map[string]Result{Liveness: {}, Readiness: {}, Startup: {}},
		restored: map[restoredKey]Saved{},
	}
	for _, r := range o.Restored {
		if trusted(r, o.Clock.Now()) {
			m.results[r.Type][r.ContainerID] = r.Result
			m.restored[restoredKey{r.Type, r.ContainerID}] = r
		}
	}
	return m
}

// trusted reports whether a result saved before a restart may stand:
// a readiness result or a passed startup probe, saved no longer than
// ValidFor ago. A failed startup or liveness probe is not restored: its
// container is probed again from zero rather than restarted for a count
// the restart interrupted.
func trusted(r Saved, now time.Time) bool {
	if r.ContainerID == "" || now.Sub(r.At) > r.ValidFor || r.At.After(now) {
		return false
	}
	switch r.Type {
	case Readiness:
		return r.Result == Success || r.Result == Failure
	case Startup:
		return r.Result == Success
	default:
		return false
	}
}

// takeRestored hands a restored result to the worker that probes its
// container now.
func (m *Manager) takeRestored(t Type, containerID string) (Saved, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := restoredKey{t, containerID}
	r, ok := m.restored[k]
	delete(m.restored, k)
	return r, ok
}

// dropRestored forgets the restored results no worker took over of the
// pods gone returns true for.
func (m *Manager) dropRestored(gone func(types.UID) bool) {
	for k, r := range m.restored {
		if gone(r.Pod) {
			delete(m.restored, k)
			delete(m.results[k.typ], k.containerID)
		}
	}
}

// stopWait bounds how long Run waits for probes under way.
const stopWait = 10 * time.Second

// Run keeps the probes until ctx ends, then stops every worker, cancels
// the probes under way and returns once the workers have (or after
// stopWait).
func (m *Manager) Run(ctx context.Context) error {
	<-ctx.Done()
	m.mu.Lock()
	m.stopped = true
	for k, w := range m.workers {
		w.stop()
		delete(m.workers, k)
	}
	m.mu.Unlock()
	m.cancel()
	periodic.WaitStopped(&m.running, stopWait, "probe workers")
	return nil
}

// Updates is where changed results are published.
func (m *Manager) Updates() <-chan Update { return m.updates }

// probed lists the containers a pod probes: app containers and sidecars.
func probed(pod *v1.Pod) []*v1.Container {
	var out []*v1.Container
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			out = append(out, c)
		}
	}
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	return out
}

func probeOf(c *v1.Container, t Type) *v1.Probe {
	switch t {
	case Liveness:
		return c.LivenessProbe
	case Readiness:
		return c.ReadinessProbe
	default:
		return c.StartupProbe
	}
}

// AddPod starts a worker for every probe of the pod that has none yet.
func (m *Manager) AddPod(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	for _, c := range probed(pod) {
		for _, t := range []Type{Liveness, Readiness, Startup} {
			p := probeOf(c, t)
			if p == nil {
				continue
			}
			k := key{pod.UID, c.Name, t}
			if _, ok := m.workers[k]; ok {
				continue
			}
			w := newWorker(m, pod, c.DeepCopy(), t, p.DeepCopy())
			m.workers[k] = w
			m.running.Add(1)
			go func() {
				defer m.running.Done()
				w.run()
			}()
		}
	}
}

// RemovePod stops every worker of the pod.
func (m *Manager) RemovePod(pod *v1.Pod) {
	m.stopWorkers(pod.UID, Liveness, Readiness, Startup)
	m.mu.Lock()
	m.dropRestored(func(uid types.UID) bool { return uid == pod.UID })
	m.mu.Unlock()
	m.observer.Forget(pod)
}

// StopLivenessAndStartup stops the probes that could restart a container
// of a pod being terminated; readiness keeps reporting until it is done.
func (m *Manager) StopLivenessAndStartup(pod *v1.Pod) { m.stopWorkers(pod.UID, Liveness, Startup) }

func (m *Manager) stopWorkers(uid types.UID, types ...Type) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, w := range m.workers {
		if k.uid != uid {
			continue
		}
		for _, t := range types {
			if k.typ == t {
				w.stop()
				delete(m.workers, k)
			}
		}
	}
}

// CleanupPods stops the workers of pods that are not in keep.
func (m *Manager) CleanupPods(keep map[types.UID]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, w := range m.workers {
		if !keep[k.uid] {
			w.stop()
			delete(m.workers, k)
		}
	}
	m.dropRestored(func(uid types.UID) bool { return !keep[uid] })
}

// Workers counts the running workers.
func (m *Manager) Workers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.workers)
}

// Result returns a probe's current result for a container instance.
func (m *Manager) Result(t Type, containerID string) (Result, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.results[t][containerID]
	return r, ok
}

// Started reports whether a running container passed its startup probe
// (containers without one are started as soon as they run).
func (m *Manager) Started(c *v1.Container, containerID string) bool {
	if c.StartupProbe == nil {
		return true
	}
	r, _ := m.Result(Startup, containerID)
	return r == Success
}

// Ready reports whether a running, started container passes its
// readiness probe (containers without one are ready once started).
func (m *Manager) Ready(c *v1.Container, containerID string) bool {
	if !m.Started(c, containerID) {
		return false
	}
	if c.ReadinessProbe == nil {
		return true
	}
	r, _ := m.Result(Readiness, containerID)
	return r == Success
}

// set records a result and reports whether it changed.
func (m *Manager) set(t Type, containerID string, r Result) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	prev, ok := m.results[t][containerID]
	m.results[t][containerID] = r
	return !ok || prev != r
}

func (m *Manager) forget(t Type, containerID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.results[t], containerID)
}

// publish hands a changed result to the sync loop, waiting while it is
// behind, but not past the worker's stop.
func (m *Manager) publish(u Update, stop <-chan struct{}) {
	klog.V(2).InfoS("Probe result changed", "podUID", u.PodUID, "containerID", u.ContainerID, "probe", u.Type, "result", u.Result)
	select {
	case m.updates <- u:
	case <-stop:
	}
}

// LivenessFailed reports whether a container instance failed its
// liveness probe and must be restarted.
func (m *Manager) LivenessFailed(containerID string) bool {
	r, _ := m.Result(Liveness, containerID)
	return r == Failure
}

// StartupFailed reports whether a container instance failed its startup
// probe and must be restarted.
func (m *Manager) StartupFailed(containerID string) bool {
	r, _ := m.Result(Startup, containerID)
	return r == Failure
}
