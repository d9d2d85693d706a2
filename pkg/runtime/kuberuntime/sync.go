package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/crierr"
)

// SyncPod brings the runtime in line with the pod spec, in seed 000's
// order:
//
//  1. compute the sandbox and container changes;
//  2. kill the pod if its sandbox must be replaced (or nothing should run);
//  3. kill containers that must not run;
//  4. create the sandbox if needed;
//  5. start ephemeral containers;
//  6. start the next init container (and sidecars);
//  7. resize running containers in place (a change whose resize policy
//     restarts the container is a kill and a start instead);
//  8. start app containers.
//
// Every step is recorded in the result with a typed error, so the caller
// can tell a crash-loop back-off from a real failure and the status can name
// exactly what went wrong.
//
// beforeContainers, when set, is what the containers need and the sandbox
// does not (the pod's volumes): the caller prepares it beside the sandbox's
// creation, and SyncPod waits for it between steps 4 and 5, so a first
// start does not wait for both in turn. Its error ends the sync before
// any container is created.
func (m *Manager) SyncPod(ctx context.Context, pod *v1.Pod, status *container.PodStatus, pullSecrets []v1.Secret, beforeContainers func(context.Context) error) (result container.PodSyncResult) {
	actions := computePodActions(pod, status, m.health)
	resizes := m.resizer.actions(pod, status, &actions)
	klog.V(3).InfoS("computePodActions", "pod", klog.KObj(pod), "podUID", pod.UID, "actions", actions.String())

	if actions.CreateSandbox && actions.SandboxID != "" {
		m.recorder.Event(podutil.PodRef(pod), v1.EventTypeNormal, "SandboxChanged", "Pod sandbox changed, it will be killed and re-created.")
	}

	// Step 2.
	if actions.KillPod {
		kill := m.killPodWithResult(ctx, pod, status.ToRunningPod(), nil)
		result.Merge(kill)
		if kill.Error() != nil {
			klog.ErrorS(kill.Error(), "Failed to kill pod before recreating its sandbox", "pod", klog.KObj(pod), "podUID", pod.UID)
			return result
		}
		if !actions.CreateSandbox {
			// The pod is done: nothing starts in it again.
			return result
		}
		m.purgeInitContainers(ctx, pod, status)
	} else {
		// Step 3.
		for id, k := range actions.ContainersToKill {
			r := result.Add(container.KillContainer, k.name)
			if err := m.killContainer(ctx, pod, id, k.name, k.message, k.reason, k.grace, unordered); err != nil {
				r.Fail(container.ErrKillContainer, err.Error())
				klog.ErrorS(err, "Failed to kill container", "pod", klog.KObj(pod), "podUID", pod.UID, "container", k.name)
				return result
			}
		}
	}

	podIPs := status.IPs
	sandboxID := actions.SandboxID
	// Step 4.
	if actions.CreateSandbox {
		r := result.Add(container.CreatePodSandbox, podutil.Ref(pod))
		endSandbox := m.steps.Begin(pod, instrument.KindSandbox, fmt.Sprintf("attempt %d", actions.Attempt))
		id, msg, err := m.sandboxes.create(ctx, pod, actions.Attempt)
		endSandbox(err, shortID(id))
		if err != nil {
			if ctx.Err() != nil {
				// The pod workers cancel a sync when the pod's termination
				// is requested: failing to start it is expected then.
				klog.V(4).InfoS("Pod was deleted and its sandbox failed to start", "pod", klog.KObj(pod), "podUID", pod.UID)
				return result
			}
			r.Fail(container.ErrCreatePodSandbox, msg)
			m.recorder.Eventf(podutil.PodRef(pod), v1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: %v", crierr.Message(err))
			klog.ErrorS(err, "Failed to create pod sandbox", "pod", klog.KObj(pod), "podUID", pod.UID)
			return result
		}
		sandboxID = id
		cctx, cancel := m.call(ctx)
		resp, err := m.runtime.PodSandboxStatus(cctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
		cancel()
		if err != nil {
			m.recorder.Eventf(podutil.PodRef(pod), v1.EventTypeWarning, "FailedPodSandBoxStatus", "Unable to get pod sandbox status: %v", crierr.Message(err))
			result.Fail(fmt.Errorf("status of new sandbox %s: %w", id, err))
			return result
		}
		if !pod.Spec.HostNetwork {
			podIPs = sandboxStatusFromCRI(resp.GetStatus()).IPs
		}
	}
	if beforeContainers != nil {
		if err := beforeContainers(ctx); err != nil {
			result.Fail(err)
			return result
		}
	}

	cfgResult := result.Add(container.ConfigPodSandbox, sandboxID)
	sandboxCfg, err := m.sandboxes.config(pod, actions.Attempt)
	if err != nil {
		cfgResult.Fail(container.ErrConfigPodSandbox, err.Error())
		return result
	}

	start := func(kind containerKind, c *v1.Container) error {
		if err := ctx.Err(); err != nil {
			return err // torn down meanwhile: start nothing more
		}
		r := result.Add(container.StartContainer, c.Name)
		if kind != kindEphemeral {
			if msg, left, err := m.crashLoopBackOff(pod, c, status); err != nil {
				r.Fail(err, msg)
				r.RetryAfter = left
				klog.V(4).InfoS("Backing off restarting container", "pod", klog.KObj(pod), "podUID", pod.UID, "container", c.Name, "kind", kind)
				return err
			}
		}
		if msg, err := m.startContainer(ctx, sandboxID, sandboxCfg, c, pod, status, pullSecrets, podIPs); err != nil {
			if ctx.Err() != nil {
				// Cancelled: the pod is being torn down. The container did
				// not fail, and its status must not say it did.
				result.Results = result.Results[:len(result.Results)-1]
				result.Fail(fmt.Errorf("starting container %s: %w", c.Name, ctx.Err()))
				klog.V(3).InfoS("Container start cancelled", "pod", klog.KObj(pod), "podUID", pod.UID, "container", c.Name)
				return ctx.Err()
			}
			r.Fail(err, msg)
			if errors.Is(err, container.ErrImagePullBackOff) {
				r.RetryAfter = m.images.BackOffLeft(pod.UID, c.Image)
			}
			klog.ErrorS(err, "Failed to start container", "pod", klog.KObj(pod), "podUID", pod.UID, "container", c.Name, "kind", kind, "message", msg)
			return err
		}
		if kind != kindEphemeral {
			// What it was created with is what it runs with (ephemeral
			// containers have no resources).
			if err := m.resources.SetActuated(pod.UID, c.Name, c.Resources); err != nil {
				klog.ErrorS(err, "Failed to record a container's resources", "pod", klog.KObj(pod), "podUID", pod.UID, "container", c.Name)
			}
		}
		return nil
	}

	// Step 5.
	for _, i := range actions.EphemeralContainersToStart {
		c := v1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		start(kindEphemeral, &c)
	}
	// Step 6: init containers in order. A regular init container that
	// fails to start stops the rest; a sidecar that fails (or is backing
	// off) does not hold back what comes after it.
	for _, i := range actions.InitContainersToStart {
		c := &pod.Spec.InitContainers[i]
		if err := start(kindInit, c); err != nil && !podutil.IsRestartableInitContainer(c) {
			return result
		}
	}
	// Step 7: containers resized in place.
	m.resizer.apply(ctx, pod, resizes, &result)
	// Step 8.
	for _, i := range actions.ContainersToStart {
		start(kindRegular, &pod.Spec.Containers[i])
	}
	return result
}

// crashLoopBackOff refuses to restart a container that failed too
// recently: the delay starts at 10 s, doubles per restart up to 5 min, and
// is forgotten once the container ran for 10 min. It returns how long the
// back-off has left.
// purgeInitContainers removes every instance of the pod's init containers
// before its sandbox is created again (seed 000 step 2): they ran in the old
// sandbox, and left in place they would read as Completed, so the pod would
// count as initialized and its app containers start before init ran in the
// new sandbox. A failed removal is logged and the rest go on: the init
// containers run again either way.
func (m *Manager) purgeInitContainers(ctx context.Context, pod *v1.Pod, status *container.PodStatus) {
	names := make(map[string]bool, len(pod.Spec.InitContainers))
	for _, c := range pod.Spec.InitContainers {
		names[c.Name] = true
	}
	for _, cs := range status.ContainerStatuses {
		if !names[cs.Name] {
			continue
		}
		klog.V(4).InfoS("Removing init container before the sandbox is re-created", "pod", klog.KObj(pod), "podUID", pod.UID, "container", cs.Name, "containerID", cs.ID)
		cctx, cancel := m.call(ctx)
		err := removeContainer(cctx, m.runtime, m.legacyLogs, cs.ID.ID)
		cancel()
		if err != nil {
			klog.ErrorS(err, "Failed to remove init container", "pod", klog.KObj(pod), "podUID", pod.UID, "container", cs.Name)
		}
	}
}

func (m *Manager) crashLoopBackOff(pod *v1.Pod, c *v1.Container, status *container.PodStatus) (string, time.Duration, error) {
	last := status.FindContainerStatusByName(c.Name)
	if last == nil || last.State != container.StateExited {
		return "", 0, nil
	}
	// The spec hash is part of the key: a container whose image or
	// command changed is a new container and starts at once.
	key := fmt.Sprintf("%s_%s_%s_%s_%s", pod.Name, pod.Namespace, pod.UID, c.Name, HashContainer(c))
	ts := last.FinishedAt
	if ts.IsZero() {
		ts = m.clock.Now()
	}
	if m.crashBackOff.IsInBackOffSince(key, ts) {
		delay := m.crashBackOff.Get(key)
		msg := fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", delay.Round(time.Second), c.Name, pod.Name, pod.Namespace, pod.UID)
		m.recorder.Event(podutil.ContainerRef(pod, c), v1.EventTypeWarning, "BackOff", "Back-off restarting failed container "+c.Name+" in pod "+pod.Name+"_"+pod.Namespace+"("+string(pod.UID)+")")
		return msg, delay - m.clock.Since(ts), container.ErrCrashLoopBackOff
	}
	m.crashBackOff.Next(key, ts)
	return "", 0, nil
}

// ForgetBackOffs drops back-off state no longer needed; housekeeping calls it.
func (m *Manager) ForgetBackOffs() { m.crashBackOff.GC(); m.images.ForgetBackOffs() }
