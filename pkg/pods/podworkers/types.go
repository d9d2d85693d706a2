package podworkers

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// State is where a pod is in its lifecycle, as the pod worker drives it.
type State int

const (
	// SyncPod: the pod is set up and kept running.
	SyncPod State = iota
	// TerminatingPod: its containers are being stopped; none will start.
	TerminatingPod
	// TerminatedPod: nothing runs; resources are being released.
	TerminatedPod
)

func (s State) String() string {
	switch s {
	case SyncPod:
		return "sync"
	case TerminatingPod:
		return "terminating"
	case TerminatedPod:
		return "terminated"
	default:
		return "unknown"
	}
}

// UpdateType says why a pod update was sent. It only matters for metrics
// and for telling a create-after-termination apart from other updates.
type UpdateType int

const (
	// UpdateSync resyncs a pod whose spec did not change.
	UpdateSync UpdateType = iota
	// UpdateCreate is a pod seen for the first time.
	UpdateCreate
	// UpdateUpdate carries a changed spec.
	UpdateUpdate
	// UpdateKill asks for the pod to be terminated.
	UpdateKill
)

func (t UpdateType) String() string {
	switch t {
	case UpdateSync:
		return "sync"
	case UpdateCreate:
		return "create"
	case UpdateUpdate:
		return "update"
	case UpdateKill:
		return "kill"
	default:
		return "unknown"
	}
}

// PodStatusFunc amends the API status written when a pod is killed (e.g.
// to say it was evicted).
type PodStatusFunc func(*v1.PodStatus)

// KillPodOptions accompany an UpdateKill.
type KillPodOptions struct {
	// CompletedCh is closed once the pod's containers are all stopped (or
	// at once if the pod is already past that point).
	CompletedCh chan<- struct{}
	// Evict marks the kill as an eviction: content is removed eagerly.
	Evict bool
	// PodStatusFunc amends the status written at termination.
	PodStatusFunc PodStatusFunc
	// PodTerminationGracePeriodSecondsOverride shortens the grace period.
	PodTerminationGracePeriodSecondsOverride *int64
}

// UpdatePodOptions is one update for a pod worker.
type UpdatePodOptions struct {
	UpdateType UpdateType
	// StartTime is when the update was created, for latency metrics.
	StartTime time.Time
	// Pod is the pod's configuration; nil only with RunningPod.
	Pod *v1.Pod
	// MirrorPod is a static pod's mirror in the API server, if any.
	MirrorPod *v1.Pod
	// RunningPod is a pod found in the runtime with no configuration
	// behind it. It can only be killed.
	RunningPod *container.Pod
	// KillPodOptions accompany UpdateKill.
	KillPodOptions *KillPodOptions
}

// Syncer carries out the lifecycle steps the workers decide on. The
// kubelet core implements it; it must be safe to call for many pods at
// once (never twice at once for one pod).
type Syncer interface {
	// SyncPod sets the pod up and keeps it running. It returns
	// isTerminal when the pod reached a terminal phase on its own.
	SyncPod(ctx context.Context, updateType UpdateType, pod, mirrorPod *v1.Pod, status *container.PodStatus) (isTerminal bool, err error)
	// SyncTerminatingPod stops every container of the pod within the grace
	// period. It is called until it succeeds.
	SyncTerminatingPod(ctx context.Context, pod *v1.Pod, status *container.PodStatus, gracePeriod *int64, podStatusFn PodStatusFunc) error
	// SyncTerminatingRuntimePod stops a pod that has no configuration.
	SyncTerminatingRuntimePod(ctx context.Context, running *container.Pod) error
	// SyncTerminatedPod releases what the stopped pod still holds.
	SyncTerminatedPod(ctx context.Context, pod *v1.Pod, status *container.PodStatus) error
}

// StatusSource gives the workers the runtime status they sync from.
type StatusSource interface {
	// GetNewerThan returns the status of a pod as of a time after min,
	// reading it from the runtime if the cache has nothing that new.
	GetNewerThan(ctx context.Context, uid types.UID, name, namespace string, min time.Time) (*container.PodStatus, error)
	// Get returns whatever is cached, without waiting.
	Get(uid types.UID) (*container.PodStatus, error)
}

// Executor runs a worker. Production runs each on its own goroutine;
// tests substitute one they step by hand.
type Executor func(worker func())

// GoExecutor runs every worker on a new goroutine.
func GoExecutor(worker func()) { go worker() }

// PodWorkerSync summarises one worker for the kubelet's housekeeping.
type PodWorkerSync struct {
	State State
	// Orphan is true when the pod is not in the desired set any more.
	Orphan bool
	// HasConfig is false for runtime-only pods.
	HasConfig bool
	// Static is true for pods from a file or HTTP source.
	Static bool
}
