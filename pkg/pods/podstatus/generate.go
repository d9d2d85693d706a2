package podstatus

import (
	"fmt"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/pods/allocation"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// Input is everything the API status of a pod is computed from.
type Input struct {
	Pod *v1.Pod
	// Runtime is what the runtime reports (never nil).
	Runtime *container.PodStatus
	// Old is the status the status manager last recorded (zero if none):
	// LastStatus.
	Old v1.PodStatus
	// StartFailures are the latest start failures per container.
	StartFailures map[string]StartFailure
	// Ready says whether a running container passes its readiness checks.
	Ready func(name string, s *container.Status) bool
	// Started says whether a running container passed its startup checks.
	Started func(name string, s *container.Status) bool
	// PodIsTerminal is set when the pod will run no more containers.
	PodIsTerminal bool
	HostIPs       []string
	// Resources, when set, gives each container's applied resources and
	// the pod's pending resize.
	Resources ResizeState
	// RecursiveReadOnly: the pod's runtime handler makes mounts
	// recursively read-only.
	RecursiveReadOnly bool
	// Now is when the status is computed, for the active deadline.
	Now time.Time
}

// StartFailure is why a container last failed to start.
type StartFailure struct {
	Err     error
	Message string
}

// ResizeState is what the status reports of resources and resizes
// (allocation.Store).
type ResizeState interface {
	Actuated(uid types.UID, name string) (v1.ResourceRequirements, bool)
	PendingResize(uid types.UID) (allocation.Pending, bool)
}

// Generate computes the API status of a pod from the runtime's view:
// container states, the phase, the conditions the kubelet owns, the
// resize conditions, and the active deadline.
func Generate(in Input) v1.PodStatus {
	s := generate(in)
	failPastDeadline(in.Pod, &s, in.Now)
	return s
}

func generate(in Input) v1.PodStatus {
	pod := in.Pod
	s := v1.PodStatus{QOSClass: podutil.QOSClass(pod)}

	initialized := regularContainerCreated(pod, in.Runtime)
	s.InitContainerStatuses = containerStatuses(in, pod.Spec.InitContainers, "PodInitializing", true)
	regularWaiting := "ContainerCreating"
	if len(pod.Spec.InitContainers) > 0 && !initialized {
		regularWaiting = "PodInitializing"
	}
	s.ContainerStatuses = containerStatuses(in, pod.Spec.Containers, regularWaiting, false)
	// Every app and init container says whether it started, false until
	// it has (upstream's prober sets the field on each): clients read it
	// without a nil check (the node e2e suite's WaitForPodContainerStarted).
	for _, list := range [][]v1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses} {
		for i := range list {
			if list[i].Started == nil {
				list[i].Started = new(false)
			}
		}
	}
	if len(pod.Spec.EphemeralContainers) > 0 {
		eph := make([]v1.Container, len(pod.Spec.EphemeralContainers))
		for i := range pod.Spec.EphemeralContainers {
			eph[i] = v1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		}
		s.EphemeralContainerStatuses = containerStatuses(in, eph, "ContainerCreating", false)
	}

	s.Phase = podPhase(pod, s.InitContainerStatuses, s.ContainerStatuses, in.PodIsTerminal)
	// A terminal phase, once reached (by us or reported by the source),
	// never changes.
	if !podutil.IsTerminal(s.Phase) {
		switch {
		case podutil.IsTerminal(in.Old.Phase):
			s.Phase = in.Old.Phase
		case podutil.IsTerminal(pod.Status.Phase):
			s.Phase = pod.Status.Phase
		}
	}
	if s.Phase == in.Old.Phase {
		s.Reason, s.Message = in.Old.Reason, in.Old.Message
		if s.Reason == "" {
			s.Reason = pod.Status.Reason
		}
		if s.Message == "" {
			s.Message = pod.Status.Message
		}
	}

	// Conditions owned by others (readiness gates, disruption) are kept.
	for _, c := range pod.Status.Conditions {
		if !podutil.IsKubeletCondition(c.Type) {
			s.Conditions = append(s.Conditions, c)
		}
	}
	all := allContainerStatuses(&s)
	s.Conditions = append(s.Conditions, resizeConditions(in, &s)...)
	s.Conditions = append(s.Conditions,
		readyToStartContainersCondition(pod, in.Runtime),
		initializedCondition(pod, all, s.Phase),
		readyCondition(pod, s.Conditions, all, s.Phase),
		containersReadyCondition(pod, all, s.Phase),
		v1.PodCondition{Type: v1.PodScheduled, Status: v1.ConditionTrue},
	)
	// The status and nodelet's conditions were computed from this spec
	// (PodObservedGenerationTracking, on by default since v1.34).
	s.ObservedGeneration = pod.Generation
	for i := range s.Conditions {
		if podutil.IsKubeletCondition(s.Conditions[i].Type) {
			s.Conditions[i].ObservedGeneration = pod.Generation
		}
	}

	for _, ip := range in.HostIPs {
		s.HostIPs = append(s.HostIPs, v1.HostIP{IP: ip})
	}
	if len(in.HostIPs) > 0 {
		s.HostIP = in.HostIPs[0]
	}
	ips := in.Runtime.IPs
	if pod.Spec.HostNetwork {
		ips = in.HostIPs
	}
	for _, ip := range ips {
		s.PodIPs = append(s.PodIPs, v1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		s.PodIP = ips[0]
	} else if len(in.Old.PodIPs) > 0 && !in.PodIsTerminal {
		// Keep reporting the last IP while the sandbox is briefly gone.
		s.PodIP, s.PodIPs = in.Old.PodIP, in.Old.PodIPs
	}
	s.StartTime = in.Old.StartTime
	return s
}

// regularContainerCreated reports whether any app container exists in
// the runtime: initialisation then happened at some point.
func regularContainerCreated(pod *v1.Pod, rs *container.PodStatus) bool {
	for i := range pod.Spec.Containers {
		if rs.FindContainerStatusByName(pod.Spec.Containers[i].Name) != nil {
			return true
		}
	}
	return false
}

// volumeMountStatuses reports a container's mounts as upstream does,
// with whether each read-only one is recursively so.
func volumeMountStatuses(c *v1.Container, rro bool) []v1.VolumeMountStatus {
	var out []v1.VolumeMountStatus
	for _, vm := range c.VolumeMounts {
		st := v1.VolumeMountStatus{Name: vm.Name, MountPath: vm.MountPath, ReadOnly: vm.ReadOnly}
		if vm.ReadOnly {
			mode := v1.RecursiveReadOnlyDisabled
			if on, err := podutil.ResolveRecursiveReadOnly(vm, rro); err == nil && on {
				mode = v1.RecursiveReadOnlyEnabled
			}
			st.RecursiveReadOnly = &mode
		}
		out = append(out, st)
	}
	return out
}

// containerStatuses builds the API statuses of a list of containers.
func containerStatuses(in Input, specs []v1.Container, defaultWaiting string, init bool) []v1.ContainerStatus {
	if len(specs) == 0 {
		return nil
	}
	out := make([]v1.ContainerStatus, 0, len(specs))
	for i := range specs {
		c := &specs[i]
		cs := v1.ContainerStatus{Name: c.Name, Image: c.Image, VolumeMounts: volumeMountStatuses(c, in.RecursiveReadOnly)}
		history := in.Runtime.StatusesByName(c.Name)
		if len(history) == 0 {
			cs.State.Waiting = &v1.ContainerStateWaiting{Reason: defaultWaiting}
			if prev, ok := findStatus(oldStatuses(in.Old, init), c.Name); ok {
				// The runtime lost the container (garbage collection,
				// a runtime reset): fall back on what was recorded.
				switch {
				case prev.State.Terminated != nil:
					cs = prev
				default:
					cs.RestartCount = prev.RestartCount
					cs.LastTerminationState = prev.LastTerminationState
					if prev.State.Running != nil && cs.LastTerminationState.Terminated == nil {
						// It ran and vanished: it must have stopped.
						cs.LastTerminationState.Terminated = &v1.ContainerStateTerminated{
							Reason: "ContainerStatusUnknown", ExitCode: 137,
							Message: "The container could not be located when the pod was deleted.  The container used to be Running",
						}
						if in.Pod.DeletionTimestamp == nil {
							cs.RestartCount++
						}
					}
				}
			}
		} else {
			cur := history[0]
			cs.ContainerID = cur.ID.String()
			cs.ImageID = cur.ImageRef
			if cur.Image != "" {
				cs.Image = cur.Image
			}
			cs.RestartCount = int32(cur.RestartCount)
			cs.State = apiState(cur)
			for _, prev := range history[1:] {
				if prev.State == container.StateExited {
					cs.LastTerminationState = apiState(prev)
					break
				}
			}
			if cur.State == container.StateRunning {
				started := in.Started == nil || in.Started(c.Name, cur)
				cs.Started = &started
				cs.Ready = started && (in.Ready == nil || in.Ready(c.Name, cur))
			} else {
				f := false
				cs.Started = &f
			}
			if init && !podutil.IsRestartableInitContainer(c) {
				// A regular init container is ready once it succeeded,
				// and not while it runs (upstream's prober rule).
				t := cs.State.Terminated
				cs.Ready = t != nil && t.ExitCode == 0
			}
		}
		// A container that will be started again shows why it is waiting:
		// its last start failed, or it is backing off.
		if r, ok := in.StartFailures[c.Name]; ok && !in.PodIsTerminal && cs.State.Running == nil && willRestart(in.Pod, c, init, history) {
			if cs.State.Terminated != nil {
				cs.LastTerminationState = cs.State
			}
			cs.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: r.Err.Error(), Message: r.Message}}
		}
		out = append(out, cs)
	}
	return out
}

// oldStatuses are the recorded statuses of init or app containers.
func oldStatuses(old v1.PodStatus, init bool) []v1.ContainerStatus {
	if init {
		return old.InitContainerStatuses
	}
	return old.ContainerStatuses
}

// willRestart reports whether a container that is not running will be
// started again under the pod's restart policy.
func willRestart(pod *v1.Pod, c *v1.Container, init bool, history []*container.Status) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	if len(history) == 0 || history[0].State != container.StateExited {
		return true
	}
	if init && podutil.IsRestartableInitContainer(c) {
		return true
	}
	return podutil.ContainerShouldRestart(c, &pod.Spec, int32(history[0].ExitCode))
}

// apiState converts one runtime container state.
func apiState(s *container.Status) v1.ContainerState {
	switch s.State {
	case container.StateRunning:
		return v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(s.StartedAt)}}
	case container.StateExited:
		reason := s.Reason
		if reason == "" {
			reason = "Error"
			if s.ExitCode == 0 {
				reason = "Completed"
			}
		}
		return v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
			ExitCode: int32(s.ExitCode), Reason: reason, Message: s.Message,
			StartedAt: metav1.NewTime(s.StartedAt), FinishedAt: metav1.NewTime(s.FinishedAt),
			ContainerID: s.ID.String(),
		}}
	case container.StateCreated:
		return v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	default:
		return v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerStatusUnknown", Message: "The container state is unknown to the runtime"}}
	}
}

func findStatus(all []v1.ContainerStatus, name string) (v1.ContainerStatus, bool) {
	for _, s := range all {
		if s.Name == name {
			return s, true
		}
	}
	return v1.ContainerStatus{}, false
}

// podPhase derives the phase from the containers' states:
//   - Pending while a regular init container has not succeeded, a sidecar
//     has not started (before any app container ran), or an app container
//     has not started yet;
//   - Failed if an init container failed and will not restart;
//   - Running while any container runs, or any stopped one restarts
//     (each container's restart rules and policy, else the pod's);
//   - Succeeded or Failed once every app container has stopped and none
//     will restart.
func podPhase(pod *v1.Pod, initStatuses, statuses []v1.ContainerStatus, podIsTerminal bool) v1.PodPhase {
	spec := &pod.Spec
	pendingInit, pendingSidecars, failedInit := 0, 0, 0
	unknown, running, waiting, stopped, succeeded, stoppedForGood := 0, 0, 0, 0, 0, 0
	// final counts a stopped container that will not start again: its
	// restart rules, its own policy, or the pod's say so.
	final := func(c *v1.Container, t *v1.ContainerStateTerminated) bool {
		return !podutil.ContainerShouldRestart(c, spec, t.ExitCode)
	}
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		st, ok := findStatus(initStatuses, c.Name)
		if podutil.IsRestartableInitContainer(c) {
			switch {
			case !ok:
				unknown++
			case st.State.Running != nil:
				if st.Started == nil || !*st.Started {
					pendingSidecars++
				}
				running++
			case st.State.Terminated != nil:
				// A stopped sidecar does not decide the phase.
			case st.State.Waiting != nil:
				if st.LastTerminationState.Terminated == nil {
					pendingSidecars++
				}
			default:
				pendingSidecars++
				unknown++
			}
			continue
		}
		switch {
		case !ok, st.State.Running != nil:
			pendingInit++
		case st.State.Terminated != nil:
			if t := st.State.Terminated; t.ExitCode != 0 && final(c, t) {
				failedInit++
			}
		case st.State.Waiting != nil:
			if t := st.LastTerminationState.Terminated; t != nil {
				if t.ExitCode != 0 && final(c, t) {
					failedInit++
				}
			} else {
				pendingInit++
			}
		default:
			pendingInit++
		}
	}
	anyRegularStarted := false
	for i := range spec.Containers {
		c := &spec.Containers[i]
		st, ok := findStatus(statuses, c.Name)
		if !ok {
			unknown++
			continue
		}
		switch {
		case st.State.Running != nil:
			running++
			anyRegularStarted = true
		case st.State.Terminated != nil:
			stopped++
			anyRegularStarted = true
			if st.State.Terminated.ExitCode == 0 {
				succeeded++
			}
			if final(c, st.State.Terminated) {
				stoppedForGood++
			}
		case st.State.Waiting != nil:
			if t := st.LastTerminationState.Terminated; t != nil {
				stopped++
				anyRegularStarted = true
				if final(c, t) {
					stoppedForGood++
				}
			} else {
				waiting++
			}
		default:
			unknown++
		}
	}

	if failedInit > 0 {
		return v1.PodFailed
	}
	switch {
	case pendingInit > 0, pendingSidecars > 0 && !anyRegularStarted, waiting > 0:
		return v1.PodPending
	case running > 0 && unknown == 0:
		return v1.PodRunning
	case running == 0 && stopped > 0 && unknown == 0:
		if podIsTerminal && !podutil.IsStatic(pod) {
			// Nothing will restart, whatever the policy says.
			if stopped == succeeded {
				return v1.PodSucceeded
			}
			return v1.PodFailed
		}
		switch {
		case stopped != stoppedForGood:
			// At least one is restarting.
			return v1.PodRunning
		case stopped == succeeded:
			return v1.PodSucceeded
		default:
			return v1.PodFailed
		}
	default:
		return v1.PodPending
	}
}

func readyToStartContainersCondition(pod *v1.Pod, rs *container.PodStatus) v1.PodCondition {
	c := v1.PodCondition{Type: v1.PodReadyToStartContainers, Status: v1.ConditionFalse}
	if len(rs.SandboxStatuses) > 0 {
		sb := rs.SandboxStatuses[0]
		if sb.Ready && (pod.Spec.HostNetwork || len(sb.IPs) > 0) {
			c.Status = v1.ConditionTrue
		}
	}
	return c
}

func initializedCondition(pod *v1.Pod, all []v1.ContainerStatus, phase v1.PodPhase) v1.PodCondition {
	c := v1.PodCondition{Type: v1.PodInitialized, Status: v1.ConditionTrue}
	var unknown, incomplete []string
	for i := range pod.Spec.InitContainers {
		ic := &pod.Spec.InitContainers[i]
		st, ok := findStatus(all, ic.Name)
		switch {
		case !ok:
			unknown = append(unknown, ic.Name)
		case podutil.IsRestartableInitContainer(ic):
			if st.Started == nil || !*st.Started {
				incomplete = append(incomplete, ic.Name)
			}
		case st.State.Terminated == nil || st.State.Terminated.ExitCode != 0:
			incomplete = append(incomplete, ic.Name)
		}
	}
	if phase == v1.PodSucceeded && len(unknown) == 0 {
		c.Reason = "PodCompleted"
		return c
	}
	for i := range pod.Spec.Containers {
		if st, ok := findStatus(all, pod.Spec.Containers[i].Name); ok && (st.State.Running != nil || st.State.Terminated != nil || st.LastTerminationState.Terminated != nil) {
			// An app container ran: the pod was initialised, even if a
			// sidecar is restarting now.
			return c
		}
	}
	if msg := containersMessage(unknown, "incomplete", incomplete); msg != "" {
		c.Status, c.Reason, c.Message = v1.ConditionFalse, "ContainersNotInitialized", msg
	}
	return c
}

func containersReadyCondition(pod *v1.Pod, all []v1.ContainerStatus, phase v1.PodPhase) v1.PodCondition {
	c := v1.PodCondition{Type: v1.ContainersReady, Status: v1.ConditionTrue}
	var unknown, unready []string
	check := func(name string) {
		st, ok := findStatus(all, name)
		switch {
		case !ok:
			unknown = append(unknown, name)
		case !st.Ready:
			unready = append(unready, name)
		}
	}
	for i := range pod.Spec.InitContainers {
		if podutil.IsRestartableInitContainer(&pod.Spec.InitContainers[i]) {
			check(pod.Spec.InitContainers[i].Name)
		}
	}
	for i := range pod.Spec.Containers {
		check(pod.Spec.Containers[i].Name)
	}
	if phase == v1.PodSucceeded && len(unknown) == 0 {
		c.Status, c.Reason = v1.ConditionFalse, "PodCompleted"
		return c
	}
	if msg := containersMessage(unknown, "unready", unready); msg != "" {
		c.Status, c.Reason, c.Message = v1.ConditionFalse, "ContainersNotReady", msg
	}
	return c
}

// containersMessage says which containers hold a condition back, in
// upstream's words: "containers with unknown status: [a], containers
// with <what> status: [b]"; empty when none does.
func containersMessage(unknown []string, what string, others []string) string {
	var msgs []string
	if len(unknown) > 0 {
		msgs = append(msgs, fmt.Sprintf("containers with unknown status: %v", unknown))
	}
	if len(others) > 0 {
		msgs = append(msgs, fmt.Sprintf("containers with %s status: %v", what, others))
	}
	return strings.Join(msgs, ", ")
}

func readyCondition(pod *v1.Pod, conditions []v1.PodCondition, all []v1.ContainerStatus, phase v1.PodPhase) v1.PodCondition {
	cr := containersReadyCondition(pod, all, phase)
	if cr.Status != v1.ConditionTrue {
		return v1.PodCondition{Type: v1.PodReady, Status: cr.Status, Reason: cr.Reason, Message: cr.Message}
	}
	var unready []string
	for _, gate := range pod.Spec.ReadinessGates {
		ok := false
		for _, c := range conditions {
			if c.Type == gate.ConditionType && c.Status == v1.ConditionTrue {
				ok = true
			}
		}
		if !ok {
			unready = append(unready, string(gate.ConditionType))
		}
	}
	if len(unready) > 0 {
		sort.Strings(unready)
		return v1.PodCondition{Type: v1.PodReady, Status: v1.ConditionFalse, Reason: "ReadinessGatesNotReady",
			Message: fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist or is not true", unready)}
	}
	return v1.PodCondition{Type: v1.PodReady, Status: v1.ConditionTrue}
}

// allContainerStatuses lists a status's init and app container statuses.
func allContainerStatuses(s *v1.PodStatus) []v1.ContainerStatus {
	return append(append([]v1.ContainerStatus{}, s.InitContainerStatuses...), s.ContainerStatuses...)
}

// ReadinessNeedsReconcile reports whether a pod with readiness gates has
// a Ready condition its gates' conditions no longer agree with.
func ReadinessNeedsReconcile(pod *v1.Pod) bool {
	if len(pod.Spec.ReadinessGates) == 0 {
		return false
	}
	s := &pod.Status
	want := readyCondition(pod, s.Conditions, allContainerStatuses(s), s.Phase)
	for _, c := range s.Conditions {
		if c.Type == v1.PodReady {
			return c.Status != want.Status || c.Message != want.Message
		}
	}
	return false
}
