package kuberuntime

import (
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// podActions is what one SyncPod must do, computed from the spec and the
// runtime status alone so that it can be tested as a table.
type podActions struct {
	// KillPod stops every container and the sandbox first.
	KillPod bool
	// CreateSandbox starts a new sandbox (after KillPod if one exists).
	CreateSandbox bool
	// SandboxID is the current sandbox, if any.
	SandboxID string
	// Attempt numbers the sandbox to create.
	Attempt uint32
	// InitContainersToStart are indices into spec.initContainers, in
	// order: at most one regular init container, plus sidecars.
	InitContainersToStart []int
	// ContainersToStart are indices into spec.containers.
	ContainersToStart []int
	// EphemeralContainersToStart are indices into spec.ephemeralContainers.
	EphemeralContainersToStart []int
	// ContainersToKill are running containers that must stop, with why.
	ContainersToKill map[container.ContainerID]containerToKill
}

type containerToKill struct {
	name    string
	message string
	reason  string
	// grace overrides the pod's grace period (a probe's own).
	grace *int64
}

// ContainerHealth is what the probes say about container instances.
type ContainerHealth interface {
	LivenessFailed(containerID string) bool
	StartupFailed(containerID string) bool
	// Started: running and past its startup probe, if it has one.
	Started(c *v1.Container, containerID string) bool
}

// noProbes is the health of a node that runs no probes: every running
// container is alive and started.
type noProbes struct{}

func (noProbes) LivenessFailed(string) bool         { return false }
func (noProbes) StartupFailed(string) bool          { return false }
func (noProbes) Started(*v1.Container, string) bool { return true }

// unhealthy says why a running container whose spec did not change must
// be restarted anyway, if it must.
func unhealthy(c *v1.Container, s *container.Status, health ContainerHealth) (containerToKill, bool) {
	var probe *v1.Probe
	var what string
	switch {
	case health.LivenessFailed(s.ID.ID):
		probe, what = c.LivenessProbe, "liveness"
	case health.StartupFailed(s.ID.ID):
		probe, what = c.StartupProbe, "startup"
	default:
		return containerToKill{}, false
	}
	k := containerToKill{name: c.Name, message: fmt.Sprintf("Container %s failed %s probe", c.Name, what), reason: "Unhealthy"}
	if probe != nil && probe.TerminationGracePeriodSeconds != nil {
		g := *probe.TerminationGracePeriodSeconds
		k.grace = &g
	}
	return k, true
}

func (a podActions) String() string {
	var kill []string
	for id, k := range a.ContainersToKill {
		kill = append(kill, k.name+"("+id.ID+")")
	}
	sort.Strings(kill)
	return fmt.Sprintf("KillPod=%t CreateSandbox=%t SandboxID=%q Attempt=%d Init=%v Start=%v Ephemeral=%v Kill=[%s]",
		a.KillPod, a.CreateSandbox, a.SandboxID, a.Attempt, a.InitContainersToStart, a.ContainersToStart,
		a.EphemeralContainersToStart, strings.Join(kill, " "))
}

// computePodActions decides what SyncPod must do to bring the runtime in
// line with the spec and the probes.
func computePodActions(pod *v1.Pod, status *container.PodStatus, health ContainerHealth) podActions {
	if health == nil {
		health = noProbes{}
	}
	createSandbox, attempt, sandboxID := sandboxChanged(pod, status)
	a := podActions{
		KillPod:          createSandbox,
		CreateSandbox:    createSandbox,
		SandboxID:        sandboxID,
		Attempt:          attempt,
		ContainersToKill: map[container.ContainerID]containerToKill{},
	}

	if createSandbox {
		// A pod that must not restart and already ran gets no new sandbox:
		// its containers' fate is final.
		if pod.Spec.RestartPolicy == v1.RestartPolicyNever && attempt > 0 && len(status.ContainerStatuses) > 0 {
			a.CreateSandbox = false
			return a
		}
		var toStart []int
		for i := range pod.Spec.Containers {
			c := &pod.Spec.Containers[i]
			runOnce := pod.Spec.RestartPolicy == v1.RestartPolicyOnFailure
			if c.RestartPolicy != nil {
				runOnce = *c.RestartPolicy == v1.ContainerRestartPolicyOnFailure
			}
			if runOnce && succeeded(status.FindContainerStatusByName(c.Name)) {
				continue
			}
			toStart = append(toStart, i)
		}
		if len(toStart) == 0 && len(pod.Spec.InitContainers) == 0 {
			// Every container already succeeded under OnFailure.
			a.CreateSandbox = false
			return a
		}
		// A new sandbox starts initialisation from the beginning.
		if len(pod.Spec.InitContainers) > 0 {
			a.InitContainersToStart = []int{0}
			return a
		}
		a.ContainersToStart = toStart
		return a
	}

	// Ephemeral containers run once and are never restarted.
	for i := range pod.Spec.EphemeralContainers {
		if status.FindContainerStatusByName(pod.Spec.EphemeralContainers[i].Name) == nil {
			a.EphemeralContainersToStart = append(a.EphemeralContainersToStart, i)
		}
	}

	// Running containers the spec no longer names must go.
	for _, s := range status.RunningContainers() {
		if !inSpec(pod, s.Name) {
			a.ContainersToKill[s.ID] = containerToKill{name: s.Name, message: fmt.Sprintf("Container %s is not in the pod's spec, stopping it", s.Name)}
		}
	}

	if !computeInitActions(pod, status, &a, health) {
		// Initialisation failed for good, or is still under way: the app
		// containers wait.
		return a
	}

	keep := 0
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		s := status.FindContainerStatusByName(c.Name)
		if s == nil || s.State != container.StateRunning {
			if s != nil && s.State == container.StateUnknown {
				// Whatever is left of it must be stopped before a replacement starts.
				a.ContainersToKill[s.ID] = containerToKill{name: c.Name, message: fmt.Sprintf("Container %s is in an unknown state, will be restarted", c.Name)}
			}
			if shouldRestart(pod, c, s) {
				a.ContainersToStart = append(a.ContainersToStart, i)
			}
			continue
		}
		if !specUnchanged(s.Hash, c) {
			// A changed spec needs a new container whatever the restart policy.
			a.ContainersToKill[s.ID] = containerToKill{name: c.Name, message: fmt.Sprintf("Container %s definition changed, will be restarted", c.Name)}
			a.ContainersToStart = append(a.ContainersToStart, i)
			continue
		}
		if k, bad := unhealthy(c, s, health); bad {
			// The container still runs: its own restart policy decides,
			// not its rules, as upstream has it.
			restart := pod.Spec.RestartPolicy != v1.RestartPolicyNever
			if c.RestartPolicy != nil {
				restart = *c.RestartPolicy != v1.ContainerRestartPolicyNever
			}
			if restart {
				k.message += ", will be restarted"
				a.ContainersToStart = append(a.ContainersToStart, i)
			}
			a.ContainersToKill[s.ID] = k
			continue
		}
		keep++
	}

	if keep == 0 && len(a.ContainersToStart) == 0 && !anyRunningRegularInit(pod, status) {
		// Nothing of the pod should run any more: stop the sandbox and any
		// sidecars so the pod can reach its final phase.
		a.KillPod = true
	}
	if a.KillPod || pod.DeletionTimestamp != nil {
		// A pod being killed or deleted starts nothing: a sidecar
		// restarted now would only keep it alive.
		a.InitContainersToStart, a.ContainersToStart, a.EphemeralContainersToStart = nil, nil, nil
	}
	return a
}

// computeInitActions adds the init container work to a and reports whether
// initialisation is complete so the app containers may run.
//
// Regular init containers run one at a time, in order, each to success.
// Sidecars (init containers with restartPolicy Always) start in their
// place in that order, must have started before the next init container
// starts, and are kept running (restarted when they exit) for the life of
// the pod. Only containers of the current sandbox count: a new sandbox
// starts initialisation over.
//
// The walk goes backwards, as upstream's does: the last init container
// with a status tells how far initialisation got, even when the runtime
// has removed the earlier ones. Every init container before it has
// started once, so a sidecar among them that is down is restarted without
// holding anything else back: neither the init containers after it nor
// the app containers wait for its crash-loop back-off.
func computeInitActions(pod *v1.Pod, status *container.PodStatus, a *podActions, health ContainerHealth) bool {
	inits := pod.Spec.InitContainers
	if len(inits) == 0 {
		return true
	}
	// Once an app container exists in this sandbox, initialisation is
	// over: init containers are not re-run even if theirs were removed.
	initialized := false
	for i := range pod.Spec.Containers {
		if currentStatus(status, a.SandboxID, pod.Spec.Containers[i].Name) != nil {
			initialized = true
			break
		}
	}
	// reached: an init container after this one has started.
	reached := initialized
	for i := len(inits) - 1; i >= 0; i-- {
		c := &inits[i]
		sidecar := podutil.IsRestartableInitContainer(c)
		s := currentStatus(status, a.SandboxID, c.Name)
		switch {
		case s == nil:
			if reached && sidecar {
				a.InitContainersToStart = append(a.InitContainersToStart, i)
			}
			continue
		case reached && !sidecar:
			continue
		case s.State == container.StateCreated:
			// Created but never started (nodelet stopped in between):
			// start it again. It did not fail, whatever the policy.
			a.InitContainersToStart = append(a.InitContainersToStart, i)
		case s.State == container.StateRunning && sidecar:
			if runningSidecar(inits, i, s, reached, a, health) && i == len(inits)-1 {
				initialized = true
			}
		case s.State == container.StateRunning:
			// A regular init container still at work: wait for it.
		case s.State == container.StateExited && sidecar:
			a.InitContainersToStart = append(a.InitContainersToStart, i)
		case s.State == container.StateExited && s.ExitCode == 0:
			if i == len(inits)-1 {
				initialized = true
			} else {
				a.InitContainersToStart = append(a.InitContainersToStart, i+1)
			}
		default:
			// Failed: a non-zero exit, or lost (unknown state).
			code := int32(s.ExitCode)
			if code == 0 {
				code = -1 // lost: a failure, whatever it last said
			}
			if !sidecar && !podutil.ContainerShouldRestart(c, &pod.Spec, code) {
				a.KillPod = true
				a.InitContainersToStart = nil
				return false
			}
			if s.State == container.StateUnknown {
				a.ContainersToKill[s.ID] = containerToKill{name: c.Name, message: fmt.Sprintf("Init container %s is in an unknown state, will be restarted", c.Name)}
			}
			a.InitContainersToStart = append(a.InitContainersToStart, i)
		}
		reached = true
	}
	if !reached {
		// No init container has run in this sandbox yet: the first starts.
		a.InitContainersToStart = append(a.InitContainersToStart, 0)
	}
	// The walk went backwards; start them in declaration order.
	sort.Ints(a.InitContainersToStart)
	return initialized
}

// runningSidecar adds what the running sidecar inits[i] needs: a restart
// if its startup or liveness probe failed or its spec changed, and the
// next init container once it has started for the first time (reached:
// a later one already has). It reports whether the sidecar has started.
func runningSidecar(inits []v1.Container, i int, s *container.Status, reached bool, a *podActions, health ContainerHealth) bool {
	c := &inits[i]
	restart := func(message, reason string, probe *v1.Probe) {
		k := containerToKill{name: c.Name, message: message + ", will be restarted", reason: reason}
		if probe != nil && probe.TerminationGracePeriodSeconds != nil {
			g := *probe.TerminationGracePeriodSeconds
			k.grace = &g
		}
		a.ContainersToKill[s.ID] = k
		a.InitContainersToStart = append(a.InitContainersToStart, i)
	}
	if health.StartupFailed(s.ID.ID) {
		restart(fmt.Sprintf("Init container %s failed startup probe", c.Name), "Unhealthy", c.StartupProbe)
		return false
	}
	if !health.Started(c, s.ID.ID) {
		// Its startup probe has not passed yet: the next one waits.
		return false
	}
	if !reached && i+1 < len(inits) {
		a.InitContainersToStart = append(a.InitContainersToStart, i+1)
	}
	switch {
	case !specUnchanged(s.Hash, c):
		restart(fmt.Sprintf("Init container %s definition changed", c.Name), "", nil)
	case health.LivenessFailed(s.ID.ID):
		restart(fmt.Sprintf("Init container %s failed liveness probe", c.Name), "Unhealthy", c.LivenessProbe)
	}
	return true
}

// currentStatus is the newest status of the named container in the
// current sandbox, or nil.
func currentStatus(status *container.PodStatus, sandboxID, name string) *container.Status {
	s := status.FindContainerStatusByName(name)
	if s == nil || s.SandboxID != sandboxID {
		return nil
	}
	return s
}

// anyRunningRegularInit reports whether a non-sidecar init container still
// runs, in which case the pod is still initialising and must not be killed.
func anyRunningRegularInit(pod *v1.Pod, status *container.PodStatus) bool {
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if podutil.IsRestartableInitContainer(c) {
			continue
		}
		if s := status.FindContainerStatusByName(c.Name); s != nil && s.State == container.StateRunning {
			return true
		}
	}
	return false
}

// sandboxChanged decides whether the pod needs a new sandbox: it has none,
// it has more than one ready, the newest is not ready, its network mode no
// longer matches the spec, or it lost its IP.
func sandboxChanged(pod *v1.Pod, status *container.PodStatus) (create bool, attempt uint32, id string) {
	if status == nil || len(status.SandboxStatuses) == 0 {
		return true, 0, ""
	}
	newest := status.SandboxStatuses[0]
	next := newest.Attempt + 1
	switch {
	case status.ReadySandboxes() > 1:
		return true, next, newest.ID
	case !newest.Ready:
		return true, next, newest.ID
	case newest.HostNetwork != pod.Spec.HostNetwork:
		return true, next, newest.ID
	case !pod.Spec.HostNetwork && len(newest.IPs) == 0:
		return true, next, newest.ID
	}
	return false, newest.Attempt, newest.ID
}

// shouldRestart applies the pod's restart policy to a container that is
// not running (s is its newest status, nil if it never ran).
func shouldRestart(pod *v1.Pod, c *v1.Container, s *container.Status) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	if s == nil || s.State == container.StateCreated || s.State == container.StateUnknown {
		return true
	}
	return podutil.ContainerShouldRestart(c, &pod.Spec, int32(s.ExitCode))
}

func succeeded(s *container.Status) bool {
	return s != nil && s.State == container.StateExited && s.ExitCode == 0
}

func inSpec(pod *v1.Pod, name string) bool {
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == name {
				return true
			}
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == name {
			return true
		}
	}
	return false
}
