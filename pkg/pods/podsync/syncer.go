// Package podsync holds the sync scripts the pod workers run for each pod
// (PodSyncer): seed 002's SyncPod, and seed 003's SyncTerminatingPod,
// SyncTerminatingRuntimePod and SyncTerminatedPod, with the API status
// they compute (generateAPIPodStatus) and record. The pod workers decide
// when each runs; the kubelet core (pkg/pods/kubelet) decides which pods the
// workers have. podworkers declares the four methods it calls
// (podworkers.Syncer) and never imports this package.
package podsync

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/cluster/standalone"
	"github.com/nodelet/nodelet/pkg/pods/poddirs"
	"github.com/nodelet/nodelet/pkg/pods/podstatus"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/pods/podworkers"
	"github.com/nodelet/nodelet/pkg/resources/cm"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
)

// syncRuntime is what the sync scripts ask of the container runtime.
type syncRuntime interface {
	SyncPod(ctx context.Context, pod *v1.Pod, status *container.PodStatus, pullSecrets []v1.Secret, beforeContainers func(context.Context) error) container.PodSyncResult
	KillPod(ctx context.Context, pod *v1.Pod, running container.Pod, gracePeriodOverride *int64) error
	GetPodStatus(ctx context.Context, uid types.UID, name, namespace string) (*container.PodStatus, error)
}

// podReads reads a pod's status from the runtime after the scripts changed
// it (the containers just started, or all stopped), as the sync's last
// runtime call. The PLEG's Refresh keeps what it read in its cache, so
// neither the relist that then sees the same change nor the worker's next
// sync need read the pod again.
type podReads interface {
	Refresh(ctx context.Context, uid types.UID, name, namespace string) (*container.PodStatus, error)
}

// runtimeReads reads the runtime directly: no cache to keep.
type runtimeReads struct{ r syncRuntime }

func (r runtimeReads) Refresh(ctx context.Context, uid types.UID, name, namespace string) (*container.PodStatus, error) {
	return r.r.GetPodStatus(ctx, uid, name, namespace)
}

// statusStore is the status manager as the sync scripts use it.
type statusStore interface {
	podstatus.Reader
	SetPodStatus(pod *v1.Pod, status v1.PodStatus)
	TerminatePod(pod *v1.Pod)
}

// MirrorPods creates and deletes the API server's read-only copies of
// static pods, so the cluster sees what runs on the node.
type MirrorPods interface {
	CreateMirrorPod(ctx context.Context, pod *v1.Pod) error
	// DeleteMirrorPod deletes the mirror pod with the full name; with a
	// UID, only that instance. It reports whether it deleted one.
	DeleteMirrorPod(ctx context.Context, fullName string, uid *types.UID) (bool, error)
}

// podCgroups is the container manager as the sync scripts use it.
type podCgroups interface {
	Exists(pod *v1.Pod) bool
	EnsureExists(pod *v1.Pod) error
	PodCgroup(pod *v1.Pod) string
	Destroy(cgroup string) error
}

// probes is the prober as the sync scripts use it.
type probes interface {
	AddPod(pod *v1.Pod)
	RemovePod(pod *v1.Pod)
	StopLivenessAndStartup(pod *v1.Pod)
	Ready(c *v1.Container, containerID string) bool
	Started(c *v1.Container, containerID string) bool
}

// SyncerOptions configure the PodSyncer. The optional parts have null
// objects: nil means "none" and the syncer never asks which it has.
type SyncerOptions struct {
	// Hooks take part in each pod's life, in order (see Hook): the
	// grants, the volumes, the resource claims, the object watches.
	Hooks []Hook
	// Secrets reads the pods' image pull secrets; nil without an API
	// server (standalone.API).
	Secrets SecretGetter
	// Mirrors manages mirror pods; nil without an API server.
	Mirrors MirrorPods
	// Probes runs the pods' probes; nil when nothing is probed (every
	// container counts as started and ready when running).
	Probes probes
	// Cgroups manages pod cgroups; nil when cgroupsPerQOS is off.
	Cgroups podCgroups
	Runtime syncRuntime
	// Reads reads pods back after a start or a stop (the PLEG); nil reads
	// the runtime directly.
	Reads  podReads
	Status statusStore
	// Network says why the pod network is not ready; nil when it always is.
	Network  func() error
	RootDir  string
	HostIPs  []string
	Recorder record.EventRecorder
	Clock    clock.Clock
	// Resources says what each container was granted and runs with, and
	// which resizes wait, for the status; nil reports no resources.
	Resources podstatus.ResizeState
	// Features is what the runtime handler of a pod's RuntimeClass
	// supports (kuberuntime.PodFeatures); nil supports nothing.
	Features func(*v1.Pod) kuberuntime.HandlerFeatures
}

// noProbes is the prober when nothing is probed.
type noProbes struct{}

func (noProbes) AddPod(*v1.Pod)                     {}
func (noProbes) RemovePod(*v1.Pod)                  {}
func (noProbes) StopLivenessAndStartup(*v1.Pod)     {}
func (noProbes) Ready(*v1.Container, string) bool   { return true }
func (noProbes) Started(*v1.Container, string) bool { return true }

// withDefaults fills the optional parts with their null objects.
func (o SyncerOptions) withDefaults() SyncerOptions {
	if o.Network == nil {
		o.Network = func() error { return nil }
	}
	o.Secrets = orNone[SecretGetter](o.Secrets, standalone.API{})
	o.Mirrors = orNone[MirrorPods](o.Mirrors, standalone.API{})
	o.Probes = orNone[probes](o.Probes, noProbes{})
	o.Cgroups = orNone[podCgroups](o.Cgroups, cm.Disabled{})
	o.Reads = orNone[podReads](o.Reads, runtimeReads{o.Runtime})
	if o.Features == nil {
		o.Features = func(*v1.Pod) kuberuntime.HandlerFeatures { return kuberuntime.HandlerFeatures{} }
	}
	return o
}

// PodSyncer carries out the lifecycle steps the pod workers decide on:
// seed 002's SyncPod, and seed 003's SyncTerminatingPod,
// SyncTerminatingRuntimePod and SyncTerminatedPod. It is deliberately a
// type of its own rather than methods on the Kubelet: the pod workers see
// exactly these four methods.
type PodSyncer struct {
	runtime  syncRuntime
	reads    podReads
	status   statusStore
	network  func() error
	cgroups  podCgroups
	probes   probes
	mirrors  MirrorPods
	secrets  SecretGetter
	hooks    hooks
	dirs     poddirs.Root
	hostIPs  []string
	recorder record.EventRecorder
	clock    clock.Clock
	reasons  *reasonCache
	// resources is nil when nodelet keeps no allocations.
	resources podstatus.ResizeState
	features  func(*v1.Pod) kuberuntime.HandlerFeatures
}

var _ podworkers.Syncer = (*PodSyncer)(nil)

// NewPodSyncer returns the sync scripts.
func NewPodSyncer(o SyncerOptions) *PodSyncer {
	o = o.withDefaults()
	return &PodSyncer{
		runtime: o.Runtime, reads: o.Reads, status: o.Status, network: o.Network, cgroups: o.Cgroups, probes: o.Probes,
		mirrors: o.Mirrors, secrets: o.Secrets, hooks: splitHooks(o.Hooks), dirs: poddirs.Root(o.RootDir), hostIPs: o.HostIPs,
		recorder: o.Recorder, clock: o.Clock, reasons: newReasonCache(), resources: o.Resources, features: o.Features,
	}
}

// apiStatus computes a pod's API status from its runtime status.
func (s *PodSyncer) apiStatus(pod *v1.Pod, rs *container.PodStatus, podIsTerminal bool) v1.PodStatus {
	if rs == nil {
		rs = &container.PodStatus{ID: pod.UID, Name: pod.Name, Namespace: pod.Namespace}
	}
	in := podstatus.Input{
		Pod: pod, Runtime: rs, Old: podstatus.LastStatus(s.status, pod), StartFailures: s.reasons.get(pod.UID),
		PodIsTerminal: podIsTerminal, HostIPs: s.hostIPs, Resources: s.resources,
		RecursiveReadOnly: s.features(pod).RecursiveReadOnly,
		Now:               s.clock.Now(),
	}
	in.Ready = func(name string, st *container.Status) bool {
		c := podutil.FindContainer(pod, name)
		return c == nil || s.probes.Ready(c, st.ID.ID)
	}
	in.Started = func(name string, st *container.Status) bool {
		c := podutil.FindContainer(pod, name)
		return c == nil || s.probes.Started(c, st.ID.ID)
	}
	return podstatus.Generate(in)
}

// SyncPod sets a pod up, in seed 002's order: compute the API status and
// stop if the pod is terminal; record the status; wait for the network;
// create the pod's directories; set the volumes up; let the runtime
// create the sandbox and containers. One departure from the seed: a pod
// without a running sandbox has its volumes set up while the runtime
// creates the sandbox, and its containers wait for them (a first start
// no longer waits for the two in turn). Only back-off failures are
// swallowed: every other failure is returned so the worker retries with
// a back-off.
func (s *PodSyncer) SyncPod(ctx context.Context, updateType podworkers.UpdateType, pod, mirrorPod *v1.Pod, rs *container.PodStatus) (bool, error) {
	klog.V(4).InfoS("SyncPod enter", "pod", klog.KObj(pod), "podUID", pod.UID, "updateType", updateType)
	defer klog.V(4).InfoS("SyncPod exit", "pod", klog.KObj(pod), "podUID", pod.UID)

	status := s.apiStatus(pod, rs, false)
	if podutil.IsTerminal(status.Phase) {
		if status.Reason == podstatus.DeadlineReason {
			s.recorder.Event(pod, v1.EventTypeNormal, podstatus.DeadlineReason, podstatus.DeadlineMessage)
		}
		s.status.SetPodStatus(pod, status)
		return true, nil
	}
	s.status.SetPodStatus(pod, status)

	if err := s.network(); err != nil && !pod.Spec.HostNetwork {
		s.recorder.Eventf(pod, v1.EventTypeWarning, "NetworkNotReady", "network is not ready: %v", err)
		return false, fmt.Errorf("%w: %v", podworkers.ErrNetworkNotReady, err)
	}
	if err := s.ensurePodCgroup(ctx, pod, rs, status); err != nil {
		return false, err
	}
	s.syncMirrorPod(ctx, pod, mirrorPod)
	if err := s.makePodDirs(pod.UID); err != nil {
		s.recorder.Eventf(pod, v1.EventTypeWarning, "Failed", "error making pod data directories: %v", err)
		return false, err
	}
	for _, r := range s.hooks.registrars {
		r.Register(pod)
	}
	// The preparers ready what the containers need (the pod's grant
	// written, its volumes set up or refreshed). A pod without a running
	// sandbox gets one meanwhile: the sandbox does not need them, its
	// containers do, and the runtime waits for them before it creates
	// the first. A pod whose sandbox runs waits for them first: nothing
	// in it changes on volumes that fail. Nor does a pod a preparer can
	// never serve get a sandbox.
	beside := !sandboxReady(rs) && s.hooks.unservable(pod) == nil
	prep := s.prepare(ctx, pod, beside)
	if !beside {
		if err := prep.join(); err != nil {
			return false, err
		}
	}
	err := s.runPod(ctx, pod, rs, status, prep.wait)
	if verr := prep.join(); verr != nil {
		// The runtime stopped at it, or failed beside it: the volumes
		// are the reason to report either way.
		return false, verr
	}
	return false, err
}

// runPod has the runtime run what the pod's spec says, once its volumes
// are set up or being set up (beforeContainers waits for them).
func (s *PodSyncer) runPod(ctx context.Context, pod *v1.Pod, rs *container.PodStatus, status v1.PodStatus, beforeContainers func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		// Cancelled: the pod workers want it torn down, start nothing new.
		return err
	}
	s.probes.AddPod(pod)
	for _, h := range s.hooks.preRunners {
		if err := h.PreRun(ctx, pod, sandboxReady(rs)); err != nil {
			return s.reportHookError(pod, err)
		}
	}

	result := s.runtime.SyncPod(ctx, pod, rs, s.pullSecrets(ctx, pod), beforeContainers)
	s.reasons.update(pod.UID, result)
	switch {
	case started(result):
		s.reportStarted(ctx, pod)
	case hasCondition(status, v1.PodResizeInProgress):
		// The resize was applied now, and no container event will bring
		// a sync to say so: report it at once.
		s.status.SetPodStatus(pod, s.apiStatus(pod, rs, false))
	}
	if err := result.Error(); err != nil {
		if !result.OnlyBackOff() {
			return err
		}
		if d := result.RetryAfter(); d > 0 {
			// Waiting is all that is left to do: come back when the
			// back-off ends, not at the next periodic resync.
			return &podworkers.RetryAfterError{Delay: d, Reason: "back-off"}
		}
	}
	return nil
}

// preparation is what a pod's containers wait for, under way: the
// preparers' work.
type preparation struct {
	done chan struct{}
	err  error
}

// prepare runs the preparers in order, beside the caller or before it
// returns; the first failure stops them.
func (s *PodSyncer) prepare(ctx context.Context, pod *v1.Pod, beside bool) *preparation {
	p := &preparation{done: make(chan struct{})}
	run := func() {
		defer close(p.done)
		for _, h := range s.hooks.preparers {
			if p.err = h.Prepare(ctx, pod); p.err != nil {
				return
			}
		}
	}
	if !beside {
		run()
		return p
	}
	go run()
	return p
}

// wait waits for the preparation, or until the sync is cancelled.
func (p *preparation) wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// join waits for the preparation to end, cancelled or not: a sync never
// returns while it still writes the pod's volumes, which a teardown may
// be about to remove.
func (p *preparation) join() error {
	<-p.done
	return p.err
}

// started: the sync started at least one container.
func started(r container.PodSyncResult) bool {
	for _, step := range r.Results {
		if step.Action == container.StartContainer && step.Err == nil {
			return true
		}
	}
	return false
}

// reportStarted reads the pod back from the runtime and records its status
// now. Otherwise the containers just started would show as waiting until
// the next sync, which the runtime's event for the start brings a relist
// later (up to a second on a runtime without CRI events): on a single
// start, half of create→Ready. A failed read changes nothing; that sync
// reports it.
func (s *PodSyncer) reportStarted(ctx context.Context, pod *v1.Pod) {
	cur, err := s.reads.Refresh(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		klog.V(4).InfoS("Cannot read the pod just started; its status waits for the next sync", "pod", klog.KObj(pod), "podUID", pod.UID, "err", err)
		return
	}
	s.status.SetPodStatus(pod, s.apiStatus(pod, cur, false))
}

// sandboxReady: the pod's newest sandbox runs.
func sandboxReady(rs *container.PodStatus) bool {
	return rs != nil && len(rs.SandboxStatuses) > 0 && rs.SandboxStatuses[0].Ready
}

func hasCondition(s v1.PodStatus, t v1.PodConditionType) bool {
	for _, c := range s.Conditions {
		if c.Type == t {
			return true
		}
	}
	return false
}

// SecretGetter reads a secret from the API server.
type SecretGetter interface {
	GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
}

// pullSecrets fetches the pod's imagePullSecrets (the service account's
// were copied into the spec when the pod was created). A secret that
// cannot be read is logged and left out, as upstream does: the pull
// then fails visibly if it needed it.
func (s *PodSyncer) pullSecrets(ctx context.Context, pod *v1.Pod) []v1.Secret {
	if podutil.IsStatic(pod) {
		return nil
	}
	var out []v1.Secret
	for _, ref := range pod.Spec.ImagePullSecrets {
		if ref.Name == "" {
			continue
		}
		secret, err := s.secrets.GetSecret(ctx, pod.Namespace, ref.Name)
		if err != nil {
			klog.InfoS("Unable to retrieve pull secret, the image pull may not succeed", "pod", klog.KObj(pod), "podUID", pod.UID, "secret", klog.KRef(pod.Namespace, ref.Name), "err", err)
			s.recorder.Eventf(pod, v1.EventTypeWarning, "FailedToRetrieveImagePullSecret", "Unable to retrieve some image pull secrets (%s); attempting to pull the image may not succeed.", ref.Name)
			continue
		}
		out = append(out, *secret)
	}
	return out
}

// syncMirrorPod makes the API server's mirror of a static pod match it:
// a mirror being deleted or made from another version of the manifest is
// replaced. Failures are logged and retried at the next sync: the pod
// itself runs regardless.
func (s *PodSyncer) syncMirrorPod(ctx context.Context, pod, mirrorPod *v1.Pod) {
	if !podutil.IsStatic(pod) {
		return
	}
	fullName := podutil.FullName(pod)
	deleted := false
	if mirrorPod != nil && (mirrorPod.DeletionTimestamp != nil || !podutil.IsMirrorOf(mirrorPod, pod)) {
		klog.InfoS("Deleting the mirror pod: it is being deleted or is outdated", "pod", klog.KObj(pod), "podUID", pod.UID, "mirrorPodUID", mirrorPod.UID)
		var err error
		if deleted, err = s.mirrors.DeleteMirrorPod(ctx, fullName, &mirrorPod.UID); err != nil {
			klog.ErrorS(err, "Failed deleting mirror pod", "pod", klog.KObj(pod), "podUID", pod.UID)
			return
		}
	}
	if mirrorPod == nil || deleted {
		if err := s.mirrors.CreateMirrorPod(ctx, pod); err != nil {
			klog.ErrorS(err, "Failed creating a mirror pod", "pod", klog.KObj(pod), "podUID", pod.UID)
		}
	}
}

// ensurePodCgroup creates the pod's cgroup. A pod with running containers
// but no cgroup was started outside the QoS hierarchy (nodelet newly
// started with cgroups per QoS): it is killed and restarted inside one,
// except that a RestartPolicy Never pod is not run again.
func (s *PodSyncer) ensurePodCgroup(ctx context.Context, pod *v1.Pod, rs *container.PodStatus, status v1.PodStatus) error {
	if ctx.Err() != nil || s.cgroups.Exists(pod) {
		return nil
	}
	firstSync := true
	for _, cs := range status.ContainerStatuses {
		if cs.State.Running != nil {
			firstSync = false
		}
	}
	if !firstSync && rs != nil {
		klog.InfoS("Pod runs outside its cgroup; restarting it inside", "pod", klog.KObj(pod), "podUID", pod.UID)
		if err := s.runtime.KillPod(ctx, pod, rs.ToRunningPod(), nil); err != nil {
			klog.ErrorS(err, "Failed to kill a pod running outside its cgroup", "pod", klog.KObj(pod), "podUID", pod.UID)
		} else if pod.Spec.RestartPolicy == v1.RestartPolicyNever {
			return nil
		}
	}
	if err := s.cgroups.EnsureExists(pod); err != nil {
		s.recorder.Eventf(pod, v1.EventTypeWarning, "FailedToCreatePodContainer", "unable to ensure pod container exists: %v", err)
		return fmt.Errorf("failed to ensure that the pod: %v cgroups exist and are correctly applied: %w", pod.UID, err)
	}
	return nil
}

// SyncTerminatingPod stops every container of the pod within its grace
// period, then checks that the runtime agrees nothing runs, and records
// the final container states while they are still there to read.
func (s *PodSyncer) SyncTerminatingPod(ctx context.Context, pod *v1.Pod, rs *container.PodStatus, gracePeriod *int64, statusFn podworkers.PodStatusFunc) error {
	klog.V(4).InfoS("SyncTerminatingPod enter", "pod", klog.KObj(pod), "podUID", pod.UID)
	defer klog.V(4).InfoS("SyncTerminatingPod exit", "pod", klog.KObj(pod), "podUID", pod.UID)

	status := s.apiStatus(pod, rs, false)
	if statusFn != nil {
		statusFn(&status)
	}
	s.status.SetPodStatus(pod, status)

	if rs == nil {
		rs = &container.PodStatus{ID: pod.UID, Name: pod.Name, Namespace: pod.Namespace}
	}
	// Nothing may restart a container of a pod being torn down.
	s.probes.StopLivenessAndStartup(pod)
	if err := s.runtime.KillPod(ctx, pod, rs.ToRunningPod(), gracePeriod); err != nil {
		s.recorder.Eventf(pod, v1.EventTypeWarning, "FailedKillPod", "error killing pod: %v", err)
		return fmt.Errorf("killing pod %s: %w", pod.Name, err)
	}
	s.probes.RemovePod(pod)

	final, err := s.reads.Refresh(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		return fmt.Errorf("reading pod status after killing it: %w", err)
	}
	// Its stopped sandbox no longer reports the pod's IPs: the pod keeps
	// those it ran with, as upstream's (preserveDataFromBeforeStopping).
	// A copy: the read may be the PLEG cache's, which others read.
	stopped := *final
	stopped.IPs = rs.IPs
	final = &stopped
	if running := final.RunningContainers(); len(running) > 0 {
		ids := make([]string, len(running))
		for i, c := range running {
			ids[i] = c.ID.String()
		}
		return fmt.Errorf("detected running containers after a successful KillPod, CRI violation: %v", ids)
	}
	for _, h := range s.hooks.postStoppers {
		if err := h.PostStop(ctx, pod); err != nil {
			return s.reportHookError(pod, err)
		}
	}
	status = s.apiStatus(pod, final, true)
	if statusFn != nil {
		statusFn(&status)
	}
	s.status.SetPodStatus(pod, status)
	klog.V(4).InfoS("Pod termination stopped all running containers", "pod", klog.KObj(pod), "podUID", pod.UID)
	return nil
}

// SyncTerminatingRuntimePod stops a pod found in the runtime that has no
// configuration: there is no spec to honour, so it gets one second.
func (s *PodSyncer) SyncTerminatingRuntimePod(ctx context.Context, running *container.Pod) error {
	pod := running.ToAPIPod()
	klog.V(4).InfoS("Orphaned running pod terminating without grace period", "pod", klog.KObj(pod), "podUID", pod.UID)
	grace := int64(1)
	if err := s.runtime.KillPod(ctx, pod, *running, &grace); err != nil {
		s.recorder.Eventf(pod, v1.EventTypeWarning, "FailedKillPod", "error killing pod: %v", err)
		return fmt.Errorf("killing orphaned pod %s: %w", pod.Name, err)
	}
	return nil
}

// SyncTerminatedPod records the final status once nothing of the pod runs.
func (s *PodSyncer) SyncTerminatedPod(ctx context.Context, pod *v1.Pod, rs *container.PodStatus) error {
	klog.V(4).InfoS("SyncTerminatedPod enter", "pod", klog.KObj(pod), "podUID", pod.UID)
	defer klog.V(4).InfoS("SyncTerminatedPod exit", "pod", klog.KObj(pod), "podUID", pod.UID)
	s.status.SetPodStatus(pod, s.apiStatus(pod, rs, true))
	for _, h := range s.hooks.cleaners {
		if err := h.Cleanup(ctx, pod); err != nil {
			return s.reportHookError(pod, err)
		}
	}
	if err := s.cgroups.Destroy(s.cgroups.PodCgroup(pod)); err != nil {
		return err
	}
	s.status.TerminatePod(pod)
	s.reasons.remove(pod.UID)
	return nil
}

func (s *PodSyncer) makePodDirs(uid types.UID) error {
	for _, d := range []string{"volumes", "plugins", "containers"} {
		if err := os.MkdirAll(filepath.Join(s.dirs.Pod(uid), d), 0o750); err != nil {
			return err
		}
	}
	return nil
}

// reasonCache remembers why each container last failed to start, so the
// API status can say so while the container waits to be retried.
type reasonCache struct {
	mu sync.RWMutex
	m  map[types.UID]map[string]podstatus.StartFailure
}

func newReasonCache() *reasonCache {
	return &reasonCache{m: map[types.UID]map[string]podstatus.StartFailure{}}
}

func (c *reasonCache) update(uid types.UID, result container.PodSyncResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range result.Results {
		if r.Action != container.StartContainer {
			continue
		}
		if r.Err == nil {
			delete(c.m[uid], r.Target)
			continue
		}
		if c.m[uid] == nil {
			c.m[uid] = map[string]podstatus.StartFailure{}
		}
		c.m[uid][r.Target] = podstatus.StartFailure{Err: r.Err, Message: r.Message}
	}
}

func (c *reasonCache) get(uid types.UID) map[string]podstatus.StartFailure {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make(map[string]podstatus.StartFailure, len(c.m[uid]))
	for k, v := range c.m[uid] {
		out[k] = v
	}
	return out
}

func (c *reasonCache) remove(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, uid)
}

// orNone is v, or the null object when v is nil: optional dependencies
// are never nil inside the package.
func orNone[T comparable](v, none T) T {
	var unset T
	if v == unset {
		return none
	}
	return v
}
