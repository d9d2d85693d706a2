package kuberuntime

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/infra/failpoint"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/runtime/crierr"
	"github.com/nodelet/nodelet/pkg/runtime/runtimegate"
)

// sandboxes is the sandbox work: describing a pod's sandbox to the
// runtime, running it and stopping it.
type sandboxes struct {
	runtime        RuntimeService
	helper         Helper
	podLogsDir     string
	cgroupParent   func(*v1.Pod) string
	security       Security
	userns         UserNamespaces
	starts, stops  *runtimegate.Gate
	stopping       *stopping
	requestTimeout time.Duration
	classes        RuntimeClasses
}

// create runs a new sandbox for the pod and returns its ID, or a message
// for the status and an error.
func (m *sandboxes) create(ctx context.Context, pod *v1.Pod, attempt uint32) (string, string, error) {
	cfg, err := m.config(pod, attempt)
	if err != nil {
		msg := fmt.Sprintf("Failed to generate sandbox config for pod %q: %v", podutil.Ref(pod), err)
		return "", msg, err
	}
	// The runtime writes container logs here but does not create it.
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		msg := fmt.Sprintf("Failed to create log directory for pod %q: %v", podutil.Ref(pod), err)
		return "", msg, err
	}
	// As upstream: the class is looked up at every attempt, so a pod
	// naming a class not created yet starts once it is.
	handler, err := m.classes.Handler(pod.Spec.RuntimeClassName)
	if err != nil {
		return "", fmt.Sprintf("Failed to create pod sandbox: %v", err), err
	}
	if handler != "" {
		klog.V(2).InfoS("Running pod with runtime handler", "pod", klog.KObj(pod), "podUID", pod.UID, "runtimeHandler", handler)
	}
	slot, err := m.starts.Acquire(ctx, waiter(pod))
	if err != nil {
		return "", fmt.Sprintf("Failed to create pod sandbox: %v", err), err
	}
	ctx, cancel := context.WithTimeout(ctx, m.requestTimeout)
	defer cancel()
	resp, err := m.runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{
		Config: cfg, RuntimeHandler: handler,
	})
	slot.End(runtimegate.Sandbox, err)
	if err != nil {
		msg := fmt.Sprintf("Failed to create pod sandbox: %v", crierr.Message(err))
		return "", msg, err
	}
	// The fault tests stop nodelet here: a sandbox with no container yet.
	failpoint.Inject("sandbox-created")
	return resp.PodSandboxId, "", nil
}

// config describes the pod's sandbox to the runtime.
func (m *sandboxes) config(pod *v1.Pod, attempt uint32) (*runtimeapi.PodSandboxConfig, error) {
	namespaces, err := m.namespaceOptions(pod)
	if err != nil {
		return nil, err
	}
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name: pod.Name, Namespace: pod.Namespace, Uid: string(pod.UID), Attempt: attempt,
		},
		Labels:       sandboxLabels(pod),
		Annotations:  sandboxAnnotations(pod),
		LogDirectory: podLogDir(m.podLogsDir, pod),
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: m.cgroupParent(pod),
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: namespaces,
				Privileged:       hasPrivileged(pod),
			},
		},
	}
	psc := pod.Spec.SecurityContext
	if psc == nil {
		psc = &v1.PodSecurityContext{}
	}
	seccomp, err := m.security.seccomp(psc, nil)
	if err != nil {
		return nil, err
	}
	lsc := cfg.Linux.SecurityContext
	lsc.Seccomp, lsc.SelinuxOptions, lsc.SupplementalGroupsPolicy = seccomp, seLinux(psc, nil), supplementalGroupsPolicy(psc)
	dns, hostname, err := m.helper.PodDNS(pod)
	if err != nil {
		return nil, err
	}
	cfg.DnsConfig = dns
	if !pod.Spec.HostNetwork {
		cfg.Hostname = hostname
	}
	if sc := pod.Spec.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			lsc.RunAsUser = &runtimeapi.Int64Value{Value: *sc.RunAsUser}
		}
		if sc.RunAsGroup != nil {
			lsc.RunAsGroup = &runtimeapi.Int64Value{Value: *sc.RunAsGroup}
		}
		lsc.SupplementalGroups = append(lsc.SupplementalGroups, sc.SupplementalGroups...)
		if sc.FSGroup != nil {
			lsc.SupplementalGroups = append(lsc.SupplementalGroups, *sc.FSGroup)
		}
		if len(sc.Sysctls) > 0 {
			cfg.Linux.Sysctls = map[string]string{}
			for _, s := range sc.Sysctls {
				cfg.Linux.Sysctls[strings.ReplaceAll(s.Name, "/", ".")] = s.Value
			}
		}
	}
	for i := range pod.Spec.Containers {
		for _, p := range pod.Spec.Containers[i].Ports {
			if p.HostPort <= 0 {
				continue
			}
			cfg.PortMappings = append(cfg.PortMappings, &runtimeapi.PortMapping{
				Protocol:      protocolToCRI(p.Protocol),
				ContainerPort: p.ContainerPort,
				HostPort:      p.HostPort,
				HostIp:        p.HostIP,
			})
		}
	}
	return cfg, nil
}

// namespaceOptions are the pod's namespaces, its user namespace included.
func (m *sandboxes) namespaceOptions(pod *v1.Pod) (*runtimeapi.NamespaceOption, error) {
	o := namespaceOptions(pod)
	userns, err := m.userns.Namespace(pod)
	if err != nil {
		return nil, err
	}
	o.UsernsOptions = userns
	return o, nil
}

func namespaceOptions(pod *v1.Pod) *runtimeapi.NamespaceOption {
	o := &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_POD,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
	if pod.Spec.HostNetwork {
		o.Network = runtimeapi.NamespaceMode_NODE
	}
	if pod.Spec.HostIPC {
		o.Ipc = runtimeapi.NamespaceMode_NODE
	}
	switch {
	case pod.Spec.HostPID:
		o.Pid = runtimeapi.NamespaceMode_NODE
	case pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace:
		o.Pid = runtimeapi.NamespaceMode_POD
	}
	return o
}

func protocolToCRI(p v1.Protocol) runtimeapi.Protocol {
	switch p {
	case v1.ProtocolUDP:
		return runtimeapi.Protocol_UDP
	case v1.ProtocolSCTP:
		return runtimeapi.Protocol_SCTP
	default:
		return runtimeapi.Protocol_TCP
	}
}

// stop stops a sandbox; a sandbox already gone is not an error.
func (m *sandboxes) stop(ctx context.Context, pod *v1.Pod, id string) error {
	slot, err := m.stops.Acquire(ctx, waiter(pod))
	if err != nil {
		return err
	}
	defer m.stopping.begin(id)()
	ctx, cancel := context.WithTimeout(ctx, m.requestTimeout)
	defer cancel()
	_, err = m.runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
	slot.End(runtimegate.SandboxStop, err)
	if err != nil && !crierr.IsNotFound(err) {
		return err
	}
	klog.V(4).InfoS("Stopped pod sandbox", "podSandboxID", id)
	// The fault tests stop nodelet here: a stopped sandbox not removed yet.
	failpoint.Inject("sandbox-stopped")
	return nil
}
