package container

import (
	"errors"
	"fmt"
	"time"
)

// Errors a sync step can fail with. Their text doubles as the Waiting
// reason in the container's API status, as upstream's do, so operators see
// exactly these words in kubectl.
var (
	ErrCrashLoopBackOff      = errors.New("CrashLoopBackOff")
	ErrImagePull             = errors.New("ErrImagePull")
	ErrImagePullBackOff      = errors.New("ImagePullBackOff")
	ErrImageNeverPull        = errors.New("ErrImageNeverPull")
	ErrInvalidImageName      = errors.New("InvalidImageName")
	ErrCreateContainerConfig = errors.New("CreateContainerConfigError")
	ErrCreateContainer       = errors.New("CreateContainerError")
	ErrRunContainer          = errors.New("RunContainerError")
	ErrPreStartHook          = errors.New("PreStartHookError")
	ErrPostStartHook         = errors.New("PostStartHookError")
	ErrKillContainer         = errors.New("KillContainerError")
	ErrCreatePodSandbox      = errors.New("CreatePodSandboxError")
	ErrConfigPodSandbox      = errors.New("ConfigPodSandboxError")
	ErrKillPodSandbox        = errors.New("KillPodSandboxError")
)

// IsBackOff reports whether err only says "wait before trying again": such
// failures are expected and must not count as sync errors.
func IsBackOff(err error) bool {
	return errors.Is(err, ErrCrashLoopBackOff) || errors.Is(err, ErrImagePullBackOff)
}

// SyncAction names one step a runtime sync took.
type SyncAction string

const (
	StartContainer   SyncAction = "StartContainer"
	KillContainer    SyncAction = "KillContainer"
	CreatePodSandbox SyncAction = "CreatePodSandbox"
	ConfigPodSandbox SyncAction = "ConfigPodSandbox"
	KillPodSandbox   SyncAction = "KillPodSandbox"
)

// SyncResult is the outcome of one step: Err is one of the Err* values
// above (or nil), Message says what happened in words.
type SyncResult struct {
	Action  SyncAction
	Target  string
	Err     error
	Message string
	// RetryAfter is how long a back-off has left, for back-off failures.
	RetryAfter time.Duration
}

// Fail records the step's failure.
func (r *SyncResult) Fail(err error, msg string) { r.Err, r.Message = err, msg }

// PodSyncResult collects every step of one runtime sync.
type PodSyncResult struct {
	Results []*SyncResult
	// SyncError is a failure not tied to one step.
	SyncError error
}

// Add starts recording a step and returns it for Fail.
func (p *PodSyncResult) Add(action SyncAction, target string) *SyncResult {
	r := &SyncResult{Action: action, Target: target}
	p.Results = append(p.Results, r)
	return r
}

// Merge appends another result's steps.
func (p *PodSyncResult) Merge(o PodSyncResult) {
	p.Results = append(p.Results, o.Results...)
	if o.SyncError != nil {
		p.Fail(o.SyncError)
	}
}

// Fail records an error not tied to one step.
func (p *PodSyncResult) Fail(err error) { p.SyncError = errors.Join(p.SyncError, err) }

// Error joins every failure, or returns nil when all steps succeeded.
func (p PodSyncResult) Error() error {
	var errs []error
	for _, r := range p.Results {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("failed to %q for %q: %w: %s", r.Action, r.Target, r.Err, r.Message))
		}
	}
	if p.SyncError != nil {
		errs = append(errs, p.SyncError)
	}
	return errors.Join(errs...)
}

// OnlyBackOff reports whether every failed step failed only because it is
// backing off.
func (p PodSyncResult) OnlyBackOff() bool {
	if p.SyncError != nil {
		return false
	}
	for _, r := range p.Results {
		if r.Err != nil && !IsBackOff(r.Err) {
			return false
		}
	}
	return true
}

// RetryAfter is the shortest time any back-off of the sync has left: when
// the pod should be synced again to make progress. Zero when none.
func (p PodSyncResult) RetryAfter() time.Duration {
	var d time.Duration
	for _, r := range p.Results {
		if r.Err != nil && r.RetryAfter > 0 && (d == 0 || r.RetryAfter < d) {
			d = r.RetryAfter
		}
	}
	return d
}
