package kuberuntime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/infra/failpoint"
	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/crierr"
	"github.com/nodelet/nodelet/pkg/runtime/runtimegate"
)

// containerKind says where in the spec a container comes from; it decides
// its field path in events and whether it is ever restarted.
type containerKind int

const (
	kindRegular containerKind = iota
	kindInit
	kindEphemeral
)

func (k containerKind) String() string {
	return [...]string{"container", "init container", "ephemeral container"}[k]
}

// ensureImageVolumes pulls the images of the image volumes the container
// mounts, each with its volume's pull policy and the pod's pull secrets,
// and returns the pulled reference of each image. A failure is an image
// error of the container, as for its own image.
func (m *Manager) ensureImageVolumes(ctx context.Context, pod *v1.Pod, c *v1.Container, pullSecrets []v1.Secret, sandboxCfg *runtimeapi.PodSandboxConfig) (map[string]string, string, error) {
	refs := map[string]string{}
	for _, vm := range c.VolumeMounts {
		img := podutil.ImageVolume(pod, vm.Name)
		if img == nil || refs[img.Reference] != "" {
			continue
		}
		// The puller takes a container; the volume's image stands in.
		as := &v1.Container{Name: c.Name, Image: img.Reference, ImagePullPolicy: img.PullPolicy}
		ref, msg, err := m.images.EnsureImage(ctx, pod, as, pullSecrets, sandboxCfg)
		if err != nil {
			return nil, msg, err
		}
		refs[img.Reference] = ref
	}
	return refs, "", nil
}

// startContainer pulls the image, creates and starts the container and
// runs its postStart hook. On failure it returns one of the container
// package's sentinel errors, unwrapped so its text is the container's
// Waiting reason, and the details as the message.
func (m *Manager) startContainer(ctx context.Context, sandboxID string, sandboxCfg *runtimeapi.PodSandboxConfig, c *v1.Container, pod *v1.Pod, podStatus *container.PodStatus, pullSecrets []v1.Secret, podIPs []string) (string, error) {
	ref := podutil.ContainerRef(pod, c)
	endImage := m.steps.Begin(pod, instrument.KindImage, c.Image)
	imageRef, msg, err := m.images.EnsureImage(ctx, pod, c, pullSecrets, sandboxCfg)
	endImage(err, imageDetail(ctx, m.images, imageRef, msg))
	if err != nil {
		m.warn(ctx, ref, "Failed", "Error: %v", err)
		return msg, err
	}
	volumeRefs, msg, err := m.ensureImageVolumes(ctx, pod, c, pullSecrets, sandboxCfg)
	if err != nil {
		m.warn(ctx, ref, "Failed", "Error: %v", err)
		return msg, err
	}

	restartCount := 0
	if last := podStatus.FindContainerStatusByName(c.Name); last != nil {
		restartCount = last.RestartCount + 1
	}
	cfg, err := m.containerConfig(ctx, pod, c, restartCount, imageRef, podIPs)
	if errors.Is(err, ErrMountVolume) {
		m.warn(ctx, podutil.PodRef(pod), "FailedMount", "%v", err)
	}
	if err == nil {
		err = targetPIDNamespace(pod, c.Name, podStatus, cfg)
	}
	if err != nil {
		m.warn(ctx, ref, "Failed", "Error: %v", err)
		return err.Error(), container.ErrCreateContainerConfig
	}
	for _, mnt := range cfg.Mounts {
		if mnt.Image != nil {
			mnt.Image.Image = volumeRefs[mnt.Image.Image]
		}
	}

	endStart := m.steps.Begin(pod, instrument.KindContainer, c.Name)
	id, msg, err := m.createAndStart(ctx, pod, c, sandboxID, cfg, sandboxCfg)
	endStart(err, "created and started "+shortID(id))
	if err != nil {
		return msg, err
	}

	if c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
		cid := container.ContainerID{Type: m.runtimeName, ID: id}
		endHook := m.steps.Begin(pod, instrument.KindHook, "postStart "+c.Name)
		msg, err := m.hooks.runHook(ctx, pod, c, cid, c.Lifecycle.PostStart, podIPs, 0)
		endHook(err, msg)
		if err != nil {
			m.recorder.Event(ref, v1.EventTypeWarning, "FailedPostStartHook", msg)
			if kerr := m.killContainer(ctx, pod, cid, c.Name, "FailedPostStartHook", "FailedPostStartHook", nil, unordered); kerr != nil {
				klog.ErrorS(kerr, "Failed to kill container after its postStart hook failed", "pod", klog.KObj(pod), "podUID", pod.UID, "container", c.Name)
			}
			return msg, container.ErrPostStartHook
		}
	}
	return "", nil
}

// imageDetail says what a step making sure of an image found: the image's
// size once present, or why not.
func imageDetail(ctx context.Context, images ImagePuller, ref, msg string) string {
	if ref == "" {
		return msg
	}
	if img := images.Image(ctx, ref); img != nil {
		return fmt.Sprintf("%s, %d bytes", shortID(ref), img.Size)
	}
	return shortID(ref)
}

// shortID is an ID or digest cut to 12 characters, as tools print them.
func shortID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// warn records a warning event about a failure, unless ctx was
// cancelled: the pod is being torn down, and what that interrupted did
// not fail.
func (m *Manager) warn(ctx context.Context, ref *v1.ObjectReference, reason, format string, args ...any) {
	if ctx.Err() != nil {
		return
	}
	m.recorder.Eventf(ref, v1.EventTypeWarning, reason, format, args...)
}

// createAndStart creates and starts a container, holding a start slot for
// the two calls.
func (m *Manager) createAndStart(ctx context.Context, pod *v1.Pod, c *v1.Container, sandboxID string, cfg *runtimeapi.ContainerConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, string, error) {
	ref := podutil.ContainerRef(pod, c)
	slot, err := m.starts.Acquire(ctx, waiter(pod))
	if err != nil {
		return "", err.Error(), container.ErrCreateContainer
	}
	// Only a container started counts towards the limit: a failure's
	// latency says nothing about the runtime's load.
	var counted runtimegate.Kind
	defer func() { slot.Done(counted) }()
	cctx, cancel := m.call(ctx)
	created, err := m.runtime.CreateContainer(cctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: sandboxID, Config: cfg, SandboxConfig: sandboxCfg,
	})
	cancel()
	if err != nil {
		m.warn(ctx, ref, "Failed", "Error: %s", crierr.Message(err))
		return "", crierr.Message(err), container.ErrCreateContainer
	}
	id := created.ContainerId
	m.recorder.Eventf(ref, v1.EventTypeNormal, "Created", "Created container: %s", c.Name)
	// The fault tests stop nodelet here, leaving a created container
	// that was never started.
	failpoint.Inject("container-created")
	for _, h := range m.containerHooks {
		if err := h.PreStartContainer(ctx, pod, c, id); err != nil {
			m.warn(ctx, ref, "Failed", "Error: Internal PreStartContainer hook failed: %v", err)
			return id, err.Error(), container.ErrPreStartHook
		}
	}

	// The start is not cancelled with the pod's sync: containerd 2.x
	// marks a start cancelled mid-call exited but keeps its task, which
	// then can never be removed (containerd#11037). A start runs to its
	// end (or the request timeout), and the teardown stops what it
	// started.
	cctx, cancel = m.call(context.WithoutCancel(ctx))
	_, err = m.runtime.StartContainer(cctx, &runtimeapi.StartContainerRequest{ContainerId: id})
	cancel()
	if err != nil {
		m.warn(ctx, ref, "Failed", "Error: %s", crierr.Message(err))
		return id, crierr.Message(err), container.ErrRunContainer
	}
	counted = runtimegate.Container
	m.recorder.Eventf(ref, v1.EventTypeNormal, "Started", "Started container %s", c.Name)
	m.legacyLogs.link(filepath.Join(sandboxCfg.GetLogDirectory(), cfg.GetLogPath()), pod.Name, pod.Namespace, c.Name, id)
	// The fault tests stop nodelet here: a container running that nodelet
	// has not recorded as started.
	failpoint.Inject("container-started")
	return id, "", nil
}

// containerConfig describes a container to the runtime. The container
// hooks amend it before its command and arguments are expanded, so a
// device plugin's variables can be used there as upstream allows.
func (m *Manager) containerConfig(ctx context.Context, pod *v1.Pod, c *v1.Container, restartCount int, imageRef string, podIPs []string) (*runtimeapi.ContainerConfig, error) {
	opts, err := m.helper.RunContainerOptions(ctx, pod, c, podIPs)
	if err != nil {
		return nil, err
	}
	mounts := opts.Mounts
	if err := m.recursiveReadOnly(pod, c, mounts); err != nil {
		return nil, err
	}
	if c.TerminationMessagePath != "" {
		hostPath, err := m.terminationMessageFile(pod, c)
		if err != nil {
			return nil, err
		}
		mounts = append(mounts, &runtimeapi.Mount{ContainerPath: c.TerminationMessagePath, HostPath: hostPath})
	}

	logDir := filepath.Join(podLogDir(m.podLogsDir, pod), c.Name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating log directory: %w", err)
	}

	linux, err := linuxContainerConfig(pod, c, m.memoryCapacity, m.security)
	if err != nil {
		return nil, err
	}
	if m.noCPUQuota {
		linux.Resources.CpuQuota, linux.Resources.CpuPeriod = 0, 0
	}
	if linux.SecurityContext.NamespaceOptions, err = m.sandboxes.namespaceOptions(pod); err != nil {
		return nil, err
	}
	if err := verifyRunAsNonRoot(pod, c, linux.SecurityContext, m.images.Image(ctx, imageRef)); err != nil {
		return nil, err
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: uint32(restartCount)},
		Image:       &runtimeapi.ImageSpec{Image: imageRef, UserSpecifiedImage: c.Image},
		WorkingDir:  c.WorkingDir,
		Envs:        opts.Envs,
		Mounts:      mounts,
		Labels:      containerLabels(pod, c),
		Annotations: containerAnnotations(pod, c, restartCount),
		LogPath:     filepath.Join(c.Name, strconv.Itoa(restartCount)+".log"),
		Stdin:       c.Stdin,
		StdinOnce:   c.StdinOnce,
		Tty:         c.TTY,
		Linux:       linux,
	}
	for _, h := range m.containerHooks {
		if err := h.PreCreateContainer(ctx, pod, c, cfg); err != nil {
			return nil, err
		}
	}
	env := make(map[string]string, len(cfg.Envs))
	for _, kv := range cfg.Envs {
		env[kv.Key] = string(kv.Value)
	}
	mapping := EnvMapping(env)
	cfg.Command = make([]string, len(c.Command))
	for i, s := range c.Command {
		cfg.Command[i] = Expand(s, mapping)
	}
	cfg.Args = make([]string, len(c.Args))
	for i, s := range c.Args {
		cfg.Args[i] = Expand(s, mapping)
	}
	return cfg, nil
}

// targetPIDNamespace puts an ephemeral container with a
// targetContainerName in its target's PID namespace (kubectl debug
// --target), which must be running.
func targetPIDNamespace(pod *v1.Pod, name string, podStatus *container.PodStatus, cfg *runtimeapi.ContainerConfig) error {
	target := ""
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == name {
			target = pod.Spec.EphemeralContainers[i].TargetContainerName
		}
	}
	if target == "" {
		return nil
	}
	st := podStatus.FindContainerStatusByName(target)
	if st == nil || st.State != container.StateRunning {
		return fmt.Errorf("targetContainerName %q: the target container is not running", target)
	}
	ns := cfg.Linux.SecurityContext.NamespaceOptions
	ns.Pid, ns.TargetId = runtimeapi.NamespaceMode_TARGET, st.ID.ID
	return nil
}

// recursiveReadOnly marks the mounts that asked for it read-only all the
// way down (submounts too), as upstream resolves the mode: Enabled needs
// the runtime handler's support, IfPossible uses it where there is.
func (m *Manager) recursiveReadOnly(pod *v1.Pod, c *v1.Container, mounts []*runtimeapi.Mount) error {
	supported := PodFeatures(m.features.get, m.sandboxes.classes)(pod).RecursiveReadOnly
	for _, vm := range c.VolumeMounts {
		rro, err := podutil.ResolveRecursiveReadOnly(vm, supported)
		if err != nil {
			return fmt.Errorf("failed to resolve recursive read-only mode: %w", err)
		}
		if !rro {
			continue
		}
		for _, mnt := range mounts {
			if mnt.ContainerPath == vm.MountPath {
				mnt.RecursiveReadOnly = true
			}
		}
	}
	return nil
}

// terminationMessageFile creates the host file a container's termination
// message path is bound to. Each container instance gets its own file so a
// restart does not inherit its predecessor's message.
func (m *Manager) terminationMessageFile(pod *v1.Pod, c *v1.Container) (string, error) {
	dir := m.helper.PodContainerDir(pod.UID, c.Name)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", fmt.Errorf("creating container directory: %w", err)
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	path := filepath.Join(dir, hex.EncodeToString(b[:]))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o666)
	if err != nil {
		return "", fmt.Errorf("creating termination message file: %w", err)
	}
	f.Close()
	// Non-root containers must be able to write it; the umask got in the way.
	return path, os.Chmod(path, 0o666)
}

// killContainer stops one container as upstream's kubelet does: the
// preStop hook first (when there is a grace period), then its turn in
// the pod's termination order, then StopContainer with whatever is left
// of the grace period, and never less than minGracePeriodSeconds. pod may
// be a placeholder without a spec (an orphan): the grace period and hook
// are then read from the container's annotations.
func (m *Manager) killContainer(ctx context.Context, pod *v1.Pod, id container.ContainerID, name, message, reason string, gracePeriodOverride *int64, order *turns) (err error) {
	spec := podutil.FindContainer(pod, name)
	grace := int64(v1.DefaultTerminationGracePeriodSeconds)
	var preStop *v1.LifecycleHandler
	if spec != nil {
		grace = podutil.GracePeriodSeconds(pod)
		if spec.Lifecycle != nil {
			preStop = spec.Lifecycle.PreStop
		}
	} else {
		// No spec (an orphan): use what was recorded on the container.
		spec = &v1.Container{Name: name}
		if info, err := m.containerInfo(ctx, id); err == nil {
			if info.PodGracePeriod != nil {
				grace = *info.PodGracePeriod
			}
			preStop = info.PreStop
		}
	}
	if gracePeriodOverride != nil {
		grace = *gracePeriodOverride
	}

	ref := podutil.ContainerRef(pod, spec)
	if message == "" {
		message = fmt.Sprintf("Stopping container %s", name)
	}
	m.recorder.Event(ref, v1.EventTypeNormal, "Killing", message)
	end := m.steps.Begin(pod, instrument.KindKill, name)
	detail := fmt.Sprintf("grace period %ds", grace)
	defer func() { end(err, detail) }()

	start := m.clock.Now()
	if preStop != nil && grace > 0 {
		detail += ", preStop hook first"
		m.runPreStop(ctx, pod, spec, id, ref, preStop, time.Duration(grace)*time.Second)
		grace -= int64(m.clock.Since(start).Seconds())
	}
	grace -= order.wait(name, grace)
	if grace < minGracePeriodSeconds {
		grace = minGracePeriodSeconds
	}

	klog.V(2).InfoS("Killing container with a grace period", "pod", klog.KObj(pod), "podUID", pod.UID, "container", name, "containerID", id.ID, "gracePeriod", grace, "reason", reason)
	slot, aerr := m.stops.Acquire(ctx, waiter(pod))
	if aerr != nil {
		return fmt.Errorf("stopping container %s (%s) of pod %s: %w", name, id.ID, podutil.Ref(pod), aerr)
	}
	ended := slot.HoldFor(stopHold, runtimegate.ContainerStop)
	defer m.stopping.begin(id.ID)()
	cctx, cancel := context.WithTimeout(ctx, time.Duration(grace)*time.Second+m.requestTimeout)
	defer cancel()
	_, err = m.runtime.StopContainer(cctx, &runtimeapi.StopContainerRequest{ContainerId: id.ID, Timeout: grace})
	ended(err)
	if err != nil && !crierr.IsNotFound(err) {
		return fmt.Errorf("stopping container %s (%s) of pod %s: %w", name, id.ID, podutil.Ref(pod), err)
	}
	return nil
}

// runPreStop runs a preStop hook and waits for it no longer than the
// grace period, as upstream's kubelet: the hook itself has no deadline
// (an exec hook's command runs on until it ends or its container is
// stopped), so a hook that never exits lives until the container is
// killed, the grace period plus the two seconds StopContainer still
// gets (upstream's node e2e: "should terminate sidecars simultaneously if
// prestop doesn't exit" measures 32 s of a 30 s grace period).
func (m *Manager) runPreStop(ctx context.Context, pod *v1.Pod, spec *v1.Container, id container.ContainerID, ref *v1.ObjectReference, h *v1.LifecycleHandler, grace time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if msg, err := m.hooks.runHook(ctx, pod, spec, id, h, nil, 0); err != nil {
			m.recorder.Event(ref, v1.EventTypeWarning, "FailedPreStopHook", msg)
			klog.V(2).InfoS("PreStop hook failed", "pod", klog.KObj(pod), "podUID", pod.UID, "container", spec.Name, "err", err)
		}
	}()
	select {
	case <-done:
	case <-m.clock.After(grace):
		klog.V(2).InfoS("PreStop hook not completed in the grace period", "pod", klog.KObj(pod), "podUID", pod.UID, "container", spec.Name, "gracePeriod", grace)
	case <-ctx.Done():
	}
}

// minGracePeriodSeconds keeps every stop graceful: a zero grace period,
// or one used up by a preStop hook or the wait for a sidecar's turn,
// still gives the container two seconds after SIGTERM, as upstream's.
const minGracePeriodSeconds = 2

func (m *Manager) containerInfo(ctx context.Context, id container.ContainerID) (containerInfo, error) {
	ctx, cancel := m.call(ctx)
	defer cancel()
	resp, err := m.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id.ID})
	if err != nil {
		return containerInfo{}, err
	}
	return containerInfoFromAnnotations(resp.GetStatus().GetAnnotations()), nil
}

// KillPod stops the pod's containers and then its sandboxes. pod may be a
// placeholder built from the runtime pod when there is no configuration
// left.
func (m *Manager) KillPod(ctx context.Context, pod *v1.Pod, running container.Pod, gracePeriodOverride *int64) error {
	r := m.killPodWithResult(ctx, pod, running, gracePeriodOverride)
	return r.Error()
}

// killPodWithResult stops every running container at once, in
// upstream's termination order (turns: the sidecars after the app, the
// last declared first), then the sandboxes.
func (m *Manager) killPodWithResult(ctx context.Context, pod *v1.Pod, running container.Pod, gracePeriodOverride *int64) container.PodSyncResult {
	var result container.PodSyncResult
	var live []*container.Container
	names := map[string]bool{}
	for _, c := range running.Containers {
		if c.State != container.StateExited {
			live = append(live, c)
			names[c.Name] = true
		}
	}
	m.killContainers(ctx, pod, live, gracePeriodOverride, newTurns(m.clock, pod, names), &result)
	if result.Error() != nil {
		// Stopping the sandbox under a container that may still run would
		// pull its network away; try again on the next sync instead.
		return result
	}
	for _, sb := range running.Sandboxes {
		r := result.Add(container.KillPodSandbox, sb.ID)
		if err := m.sandboxes.stop(ctx, pod, sb.ID); err != nil {
			r.Fail(container.ErrKillPodSandbox, err.Error())
		}
	}
	return result
}

// killContainers stops cs at once, each at its turn, and records each in
// result.
func (m *Manager) killContainers(ctx context.Context, pod *v1.Pod, cs []*container.Container, gracePeriodOverride *int64, order *turns, result *container.PodSyncResult) {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, c := range cs {
		wg.Add(1)
		go func(c *container.Container) {
			defer wg.Done()
			err := m.killContainer(ctx, pod, c.ID, c.Name, "", "", gracePeriodOverride, order)
			order.stopped(c.Name)
			mu.Lock()
			defer mu.Unlock()
			r := result.Add(container.KillContainer, c.Name)
			if err != nil {
				r.Fail(container.ErrKillContainer, err.Error())
			}
		}(c)
	}
	wg.Wait()
}

// errHookTimeout classifies a hook that ran out of time.
var errHookTimeout = errors.New("hook timed out")
