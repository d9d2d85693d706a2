// Package kuberuntime turns desired pods into sandboxes and containers on a
// CRI runtime, and reads them back. It is the "SyncPod → CRI" box of the
// pipeline: the kubelet core calls SyncPod with the pod spec and the status
// the PLEG cached; SyncPod computes the actions (computePodActions) and
// carries them out in seed 000's order. KillPod tears a pod down with its
// grace period. GetPods and GetPodStatus let the PLEG see what runs.
//
// Everything nodelet must know to rebuild a pod's state after a restart is
// kept in the runtime itself, as labels and annotations (labels.go).
package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sync/errgroup"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/container"
	"github.com/nodelet/nodelet/pkg/crierr"
	"github.com/nodelet/nodelet/pkg/startlimit"
	"github.com/nodelet/nodelet/pkg/timeline"
)

// ErrMountVolume classifies a RunContainerOptions failure to set up a
// volume: it is reported as a FailedMount event on the pod, as upstream
// reports it.
var ErrMountVolume = errors.New("MountVolume.SetUp failed")

// RunContainerOptions is what the kubelet core decides about a container
// beyond its spec: its environment, its mounts, where its pod's files live.
type RunContainerOptions struct {
	Envs   []*runtimeapi.KeyValue
	Mounts []*runtimeapi.Mount
	// Hostname overrides the sandbox hostname when set.
	Hostname string
}

// Helper is what the runtime manager asks of the kubelet core: the
// per-container options that depend on volumes, the pod's environment and
// node-level settings the runtime does not own.
type Helper interface {
	RunContainerOptions(ctx context.Context, pod *v1.Pod, c *v1.Container, podIPs []string) (*RunContainerOptions, error)
	PodContainerDir(uid types.UID, containerName string) string
	// PodDNS is the pod's resolver configuration and hostname.
	PodDNS(pod *v1.Pod) (*runtimeapi.DNSConfig, string, error)
}

// PodState tells garbage collection what the pod workers decided: which
// pods' content may go.
type PodState interface {
	ShouldPodContentBeRemoved(uid types.UID) bool
}

// Options configure a Manager.
type Options struct {
	Runtime RuntimeService
	// Images makes sure each container's image is present: the root
	// builds the puller (images.NewPuller) with its credentials, records
	// and limits.
	Images      ImagePuller
	Helper      Helper
	Recorder    record.EventRecorder
	Clock       clock.WithTicker
	RuntimeName string
	PodLogsDir  string
	// LegacyLogsDir is where each container's log is linked for log
	// shippers (LegacyContainerLogsDir); "" links none.
	LegacyLogsDir  string
	RequestTimeout time.Duration
	// CgroupParent returns the cgroup a pod's sandbox goes under ("" lets
	// the runtime choose).
	CgroupParent func(pod *v1.Pod) string
	// Health is what the probes say; nil when nothing is probed.
	Health ContainerHealth
	// NoCPUQuota (cpuCFSQuota: false) leaves containers' CPU limits
	// unenforced: no CFS quota.
	NoCPUQuota bool
	// MemoryCapacity is the node's memory, for OOM score adjustments.
	MemoryCapacity int64
	// Steps records each step of a pod's start and stop (its timeline);
	// nil records nothing.
	Steps StepRecorder
	// Resources remembers what each running container was given, so a
	// pod resized in place is seen and applied; nil sees no resize.
	Resources ResourceState
	// PodCgroup applies a pod's resources to its cgroup again (on a
	// resize); nil when pods have no cgroups of their own.
	PodCgroup func(pod *v1.Pod) error
	// Security is the node's defaults for unset security settings.
	Security Security
	// UserNamespaces gives pods with hostUsers: false their user
	// namespace; nil refuses such pods.
	UserNamespaces UserNamespaces
	// ContainerHooks take part in every container's start, in order:
	// the resource managers give it its cpusets and NUMA memory, its
	// devices and CDI devices.
	ContainerHooks []ContainerHook
	// Starts admits the calls that start things, Stops those that stop
	// them (and garbage collection's removals, after every pod's stop);
	// nil for gates that find their limits from the machine's core count
	// up (or down).
	Starts, Stops *startlimit.Gate
}

// ContainerHook takes part in a container's start.
type ContainerHook interface {
	// PreCreateContainer amends what the runtime is asked to create:
	// devices, mounts, environment, annotations, CDI devices, Linux
	// resources. The container's command and arguments are expanded
	// after it, with the environment it leaves.
	PreCreateContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, cfg *runtimeapi.ContainerConfig) error
	// PreStartContainer runs once the container is created, before it
	// starts.
	PreStartContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, containerID string) error
}

// UserNamespaces is the user namespace a pod's sandbox and containers
// run in (userns.Allocator).
type UserNamespaces interface {
	Namespace(pod *v1.Pod) (*runtimeapi.UserNamespace, error)
}

// hostUsersOnly runs every pod in the node's user namespace and refuses
// the pods that ask for their own.
type hostUsersOnly struct{}

func (hostUsersOnly) Namespace(pod *v1.Pod) (*runtimeapi.UserNamespace, error) {
	if pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers {
		return nil, fmt.Errorf("hostUsers: false: this node gives pods no user namespaces")
	}
	return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}, nil
}

// StepRecorder records a step of a pod's life: Begin starts it, and the
// function it returns ends it with its error and a detail.
type StepRecorder interface {
	Begin(pod *v1.Pod, kind timeline.Kind, name string) func(err error, detail string)
}

// ImagePuller makes sure a container's image is present (images.Puller).
type ImagePuller interface {
	EnsureImage(ctx context.Context, pod *v1.Pod, c *v1.Container, pullSecrets []v1.Secret, sandbox *runtimeapi.PodSandboxConfig) (ref, msg string, err error)
	BackOffLeft(uid types.UID, image string) time.Duration
	Image(ctx context.Context, ref string) *runtimeapi.Image
	ForgetBackOffs()
}

// Manager is the CRI runtime manager.
type Manager struct {
	runtime        RuntimeService
	helper         Helper
	recorder       record.EventRecorder
	clock          clock.WithTicker
	runtimeName    string
	podLogsDir     string
	legacyLogs     legacyLogs
	requestTimeout time.Duration
	cgroupParent   func(*v1.Pod) string
	health         ContainerHealth
	memoryCapacity int64
	noCPUQuota     bool
	security       Security
	features       featureState
	userns         UserNamespaces

	images         ImagePuller
	hooks          *hookRunner
	containerHooks []ContainerHook
	steps          StepRecorder
	resources      ResourceState
	podCgroup      func(*v1.Pod) error
	// starts admits the runtime calls that start sandboxes and
	// containers, and stops those that stop them, each as many at once as
	// the runtime takes without queueing: their knees differ (a stop is
	// mostly waiting, and teardown scales further on this VM).
	starts, stops *startlimit.Gate
	// stopping holds what nodelet is stopping itself.
	stopping *stopping

	// crashBackOff delays restarts of failing containers: 10 s doubling
	// to 5 min, forgotten after 10 min of good behaviour.
	crashBackOff *flowcontrol.Backoff
}

const (
	crashBackOffInitial = 10 * time.Second
	crashBackOffMax     = 5 * time.Minute
)

// New builds a Manager.
func New(o Options) *Manager {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = 2 * time.Minute
	}
	if o.RuntimeName == "" {
		o.RuntimeName = "containerd"
	}
	if o.CgroupParent == nil {
		o.CgroupParent = func(*v1.Pod) string { return "" }
	}
	if o.Recorder == nil {
		o.Recorder = &record.FakeRecorder{}
	}
	if o.UserNamespaces == nil {
		o.UserNamespaces = hostUsersOnly{}
	}
	if o.Steps == nil {
		o.Steps = timeline.NoSteps{}
	}
	if o.Resources == nil {
		o.Resources = noResourceState{}
	}
	if o.PodCgroup == nil {
		o.PodCgroup = func(*v1.Pod) error { return nil }
	}
	if o.Starts == nil {
		o.Starts = startlimit.New(startlimit.Options{Clock: o.Clock})
	}
	if o.Stops == nil {
		o.Stops = startlimit.New(startlimit.Options{Name: "stop", Clock: o.Clock})
	}
	m := &Manager{
		runtime:        o.Runtime,
		helper:         o.Helper,
		recorder:       o.Recorder,
		clock:          o.Clock,
		runtimeName:    o.RuntimeName,
		podLogsDir:     o.PodLogsDir,
		legacyLogs:     legacyLogs(o.LegacyLogsDir),
		requestTimeout: o.RequestTimeout,
		cgroupParent:   o.CgroupParent,
		health:         o.Health,
		memoryCapacity: o.MemoryCapacity,
		noCPUQuota:     o.NoCPUQuota,
		security:       o.Security,
		userns:         o.UserNamespaces,
		crashBackOff:   flowcontrol.NewBackOffWithJitter(crashBackOffInitial, crashBackOffMax, 0),
		starts:         o.Starts,
		stops:          o.Stops,
		stopping:       newStopping(o.Clock),
		steps:          o.Steps,
		resources:      o.Resources,
		podCgroup:      o.PodCgroup,
		containerHooks: o.ContainerHooks,
		images:         o.Images,
	}
	m.crashBackOff.Clock = o.Clock
	m.hooks = &hookRunner{runtime: o.Runtime, clock: o.Clock, recorder: o.Recorder}
	return m
}

// Unexpected filters exit reports from the runtime down to the containers
// and sandboxes nodelet is not stopping itself: only those need their
// pods read at once.
func (m *Manager) Unexpected(ids []string) []string {
	out := ids[:0:0]
	for _, id := range ids {
		if !m.stopping.has(id) {
			out = append(out, id)
		}
	}
	return out
}

// call bounds one unary CRI request by the request timeout.
func (m *Manager) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, m.requestTimeout)
}

// RuntimeHealth reports the runtime's own conditions: an error when the
// runtime is unreachable or not ready, and separately when its network is
// not ready (only host-network pods may start then).
func (m *Manager) RuntimeHealth(ctx context.Context) (runtimeErr, networkErr error) {
	ctx, cancel := m.call(ctx)
	defer cancel()
	resp, err := m.runtime.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRuntimeUnreachable, err), nil
	}
	m.features.set(featuresOf(resp))
	for _, c := range resp.GetStatus().GetConditions() {
		switch c.Type {
		case runtimeapi.RuntimeReady:
			if !c.Status {
				runtimeErr = fmt.Errorf("container runtime not ready: %s: %s", c.Reason, c.Message)
			}
		case runtimeapi.NetworkReady:
			if !c.Status {
				networkErr = fmt.Errorf("container runtime network not ready: %s: %s", c.Reason, c.Message)
			}
		}
	}
	return runtimeErr, networkErr
}

// Features is what the runtime said it supports at its last status
// check (RuntimeHealth).
func (m *Manager) Features() Features { return m.features.get() }

// GetPods lists every pod that has a sandbox or container in the runtime,
// grouped by the pod UID label. Objects without the label are not
// nodelet's and are left alone.
func (m *Manager) GetPods(ctx context.Context) ([]*container.Pod, error) {
	cctx, cancel := m.call(ctx)
	defer cancel()
	sandboxes, err := m.runtime.ListPodSandbox(cctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, fmt.Errorf("listing pod sandboxes: %w", err)
	}
	containers, err := m.runtime.ListContainers(cctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	pods := map[types.UID]*container.Pod{}
	get := func(id podIdentity) *container.Pod {
		p, ok := pods[id.UID]
		if !ok {
			p = &container.Pod{ID: id.UID, Name: id.Name, Namespace: id.Namespace}
			pods[id.UID] = p
		}
		return p
	}
	for _, s := range sandboxes.GetItems() {
		id, ok := podIdentityFromLabels(s.Labels)
		if !ok {
			continue
		}
		p := get(id)
		p.Sandboxes = append(p.Sandboxes, &container.Sandbox{
			ID: s.Id, Ready: s.State == runtimeapi.PodSandboxState_SANDBOX_READY,
			Attempt: s.GetMetadata().GetAttempt(), CreatedAt: time.Unix(0, s.CreatedAt),
		})
	}
	for _, c := range containers.GetContainers() {
		id, ok := podIdentityFromLabels(c.Labels)
		if !ok {
			continue
		}
		get(id).Containers = append(get(id).Containers, &container.Container{
			ID:        container.ContainerID{Type: m.runtimeName, ID: c.Id},
			Name:      c.GetMetadata().GetName(),
			Image:     c.GetImage().GetImage(),
			ImageID:   c.ImageRef,
			Hash:      recordedHash(c.Labels, c.Annotations),
			State:     stateFromCRI(c.State),
			CreatedAt: time.Unix(0, c.CreatedAt),
		})
	}
	out := make([]*container.Pod, 0, len(pods))
	for _, p := range pods {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// GetPodStatus reads everything the runtime knows about one pod: all its
// sandboxes and all its containers, dead or alive, newest first. The two
// halves are read side by side: the read after a start or a stop is on
// the way to the status a client waits for.
func (m *Manager) GetPodStatus(ctx context.Context, uid types.UID, name, namespace string) (*container.PodStatus, error) {
	cctx, cancel := m.call(ctx)
	defer cancel()
	ps := &container.PodStatus{ID: uid, Name: name, Namespace: namespace, TimeStamp: m.clock.Now()}
	selector := map[string]string{LabelPodUID: string(uid)}
	var g errgroup.Group
	g.Go(func() (err error) {
		ps.SandboxStatuses, err = m.sandboxStatuses(cctx, selector)
		return err
	})
	g.Go(func() (err error) {
		ps.ContainerStatuses, err = m.containerStatuses(cctx, selector)
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("reading pod %s/%s: %w", namespace, name, err)
	}
	if len(ps.SandboxStatuses) > 0 && ps.SandboxStatuses[0].Ready {
		ps.IPs = ps.SandboxStatuses[0].IPs
	}
	return ps, nil
}

// sandboxStatuses reads the sandboxes with the labels, newest first.
func (m *Manager) sandboxStatuses(ctx context.Context, selector map[string]string) ([]*container.SandboxStatus, error) {
	sandboxes, err := m.runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: selector},
	})
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	var out []*container.SandboxStatus
	for _, s := range sandboxes.GetItems() {
		resp, err := m.runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: s.Id})
		if crierr.IsNotFound(err) {
			continue // removed since the list
		}
		if err != nil {
			return nil, fmt.Errorf("status of sandbox %s: %w", s.Id, err)
		}
		out = append(out, sandboxStatusFromCRI(resp.GetStatus()))
	}
	container.SortSandboxesNewestFirst(out)
	return out, nil
}

// containerStatuses reads the containers with the labels, newest first.
func (m *Manager) containerStatuses(ctx context.Context, selector map[string]string) ([]*container.Status, error) {
	containers, err := m.runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{LabelSelector: selector},
	})
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	var out []*container.Status
	for _, c := range containers.GetContainers() {
		resp, err := m.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
		if crierr.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("status of container %s: %w", c.Id, err)
		}
		st := m.containerStatusFromCRI(resp.GetStatus())
		st.SandboxID = c.PodSandboxId
		out = append(out, st)
	}
	container.SortNewestFirst(out)
	return out, nil
}

func stateFromCRI(s runtimeapi.ContainerState) container.State {
	switch s {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		return container.StateCreated
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return container.StateRunning
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return container.StateExited
	default:
		return container.StateUnknown
	}
}

func sandboxStatusFromCRI(s *runtimeapi.PodSandboxStatus) *container.SandboxStatus {
	out := &container.SandboxStatus{
		ID:        s.Id,
		Ready:     s.State == runtimeapi.PodSandboxState_SANDBOX_READY,
		Attempt:   s.GetMetadata().GetAttempt(),
		CreatedAt: time.Unix(0, s.CreatedAt),
		HostNetwork: s.GetLinux().GetNamespaces().GetOptions().GetNetwork() ==
			runtimeapi.NamespaceMode_NODE,
	}
	if ip := s.GetNetwork().GetIp(); ip != "" {
		out.IPs = append(out.IPs, ip)
	}
	for _, ip := range s.GetNetwork().GetAdditionalIps() {
		out.IPs = append(out.IPs, ip.GetIp())
	}
	return out
}

func (m *Manager) containerStatusFromCRI(s *runtimeapi.ContainerStatus) *container.Status {
	info := containerInfoFromAnnotations(s.Annotations)
	st := &container.Status{
		ID:           container.ContainerID{Type: m.runtimeName, ID: s.Id},
		Name:         s.GetMetadata().GetName(),
		State:        stateFromCRI(s.State),
		CreatedAt:    time.Unix(0, s.CreatedAt),
		Image:        s.GetImage().GetImage(),
		ImageID:      s.ImageId,
		ImageRef:     s.ImageRef,
		Hash:         recordedHash(s.Labels, s.Annotations),
		RestartCount: info.RestartCount,
		ExitCode:     int(s.ExitCode),
		Reason:       s.Reason,
		Message:      s.Message,
	}
	if s.StartedAt > 0 {
		st.StartedAt = time.Unix(0, s.StartedAt)
	}
	if s.FinishedAt > 0 {
		st.FinishedAt = time.Unix(0, s.FinishedAt)
	}
	if st.State == container.StateExited {
		if msg, ok := terminationMessage(s, info); ok {
			st.Message = msg
		}
	}
	return st
}

// terminationMessage reads what the container wrote to its termination
// message path, falling back to the tail of its log when the policy asks
// for it and the container failed without a message.
func terminationMessage(s *runtimeapi.ContainerStatus, info containerInfo) (string, bool) {
	if info.TerminationMessagePath != "" {
		for _, mnt := range s.Mounts {
			if mnt.ContainerPath != info.TerminationMessagePath {
				continue
			}
			msg, err := readTail(mnt.HostPath, maxTerminationMessageBytes)
			if err != nil {
				klog.V(4).InfoS("Cannot read termination message", "containerID", s.Id, "err", err)
				break
			}
			if msg != "" {
				return msg, true
			}
		}
	}
	if info.TerminationMessagePolicy == v1.TerminationMessageFallbackToLogsOnError && s.ExitCode != 0 && s.LogPath != "" {
		if msg, err := tailLogMessage(s.LogPath, maxTerminationMessageLines, maxTerminationMessageLogBytes); err == nil {
			return msg, msg != ""
		}
	}
	return "", false
}

// podLogDir is where the runtime writes a pod's container logs.
func podLogDir(podLogsDir string, pod *v1.Pod) string {
	return filepath.Join(podLogsDir, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
}
