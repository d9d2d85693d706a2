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
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/runtimeclass"
	"github.com/nodelet/nodelet/pkg/runtime/runtimegate"
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
	// CrashBackOffMax caps the crash-loop back-off (0: 5 min).
	CrashBackOffMax time.Duration
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
	Steps instrument.StepRecorder
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
	// RuntimeClasses name the runtime handler of each pod's
	// runtimeClassName; nil knows no class.
	RuntimeClasses RuntimeClasses
	// Starts admits the calls that start things, Stops those that stop
	// them (and garbage collection's removals, after every pod's stop);
	// nil for gates that find their limits from the machine's core count
	// up (or down).
	Starts, Stops *runtimegate.Gate
}

// RuntimeClasses name the runtime handler of a RuntimeClass
// (runtimeclass.Classes): "" for none, an error for a class the node
// does not know.
type RuntimeClasses interface {
	Handler(className *string) (string, error)
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
	health         ContainerHealth
	memoryCapacity int64
	noCPUQuota     bool
	security       Security
	features       featureState

	images         ImagePuller
	hooks          *hookRunner
	containerHooks []ContainerHook
	steps          instrument.StepRecorder
	resources      ResourceState
	// starts admits the runtime calls that start sandboxes and
	// containers, and stops those that stop them, each as many at once as
	// the runtime takes without queueing: their knees differ (a stop is
	// mostly waiting, and teardown scales further on this VM).
	starts, stops *runtimegate.Gate
	// stopping holds what nodelet is stopping itself.
	stopping  *stopping
	sandboxes *sandboxes
	resizer   *resizer
	reader    *podReader

	// crashBackOff delays restarts of failing containers (newCrashBackOff).
	crashBackOff *flowcontrol.Backoff
}

const (
	crashBackOffInitial = 10 * time.Second
	crashBackOffMax     = 5 * time.Minute
)

// crashBackOff is upstream's crash-loop back-off: 10 s doubling to max
// (crashLoopBackOff.maxContainerRestartPeriod, 5 min by default), starting
// at max where max is below 10 s.
func newCrashBackOff(max time.Duration, clk clock.Clock) *flowcontrol.Backoff {
	if max <= 0 {
		max = crashBackOffMax
	}
	b := flowcontrol.NewBackOffWithJitter(min(crashBackOffInitial, max), max, 0)
	b.Clock = clk
	return b
}

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
		o.Steps = instrument.NoSteps{}
	}
	if o.RuntimeClasses == nil {
		o.RuntimeClasses = runtimeclass.Static(nil)
	}
	if o.Resources == nil {
		o.Resources = noResourceState{}
	}
	if o.PodCgroup == nil {
		o.PodCgroup = func(*v1.Pod) error { return nil }
	}
	if o.Starts == nil {
		o.Starts = runtimegate.New(runtimegate.Options{Clock: o.Clock})
	}
	if o.Stops == nil {
		o.Stops = runtimegate.New(runtimegate.Options{Name: "stop", Clock: o.Clock})
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
		health:         o.Health,
		memoryCapacity: o.MemoryCapacity,
		noCPUQuota:     o.NoCPUQuota,
		security:       o.Security,
		crashBackOff:   newCrashBackOff(o.CrashBackOffMax, o.Clock),
		starts:         o.Starts,
		stops:          o.Stops,
		stopping:       newStopping(o.Clock),
		steps:          o.Steps,
		resources:      o.Resources,
		containerHooks: o.ContainerHooks,
		images:         o.Images,
	}
	m.reader = &podReader{runtime: o.Runtime, runtimeName: o.RuntimeName, clock: o.Clock, requestTimeout: o.RequestTimeout}
	m.resizer = &resizer{runtime: o.Runtime, resources: o.Resources, podCgroup: o.PodCgroup, steps: o.Steps,
		noCPUQuota: o.NoCPUQuota, requestTimeout: o.RequestTimeout}
	m.sandboxes = &sandboxes{
		runtime: o.Runtime, helper: o.Helper, podLogsDir: o.PodLogsDir, cgroupParent: o.CgroupParent, security: o.Security,
		userns: o.UserNamespaces, starts: o.Starts, stops: o.Stops, stopping: m.stopping, requestTimeout: o.RequestTimeout,
		classes: o.RuntimeClasses,
	}
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

// GetPods lists every pod that has a sandbox or container in the runtime
// (podReader.pods).
func (m *Manager) GetPods(ctx context.Context) ([]*container.Pod, error) { return m.reader.pods(ctx) }

// GetPodStatus reads everything the runtime knows about one pod
// (podReader.status).
func (m *Manager) GetPodStatus(ctx context.Context, uid types.UID, name, namespace string) (*container.PodStatus, error) {
	return m.reader.status(ctx, uid, name, namespace)
}

// podLogDir is where the runtime writes a pod's container logs.
func podLogDir(podLogsDir string, pod *v1.Pod) string {
	return filepath.Join(podLogsDir, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
}
