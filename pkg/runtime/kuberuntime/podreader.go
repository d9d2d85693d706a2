package kuberuntime

import (
	"context"
	"fmt"
	"sort"
	"time"

	"golang.org/x/sync/errgroup"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/crierr"
)

// podReader reads pods back from the runtime: what runs, and everything
// the runtime knows about one pod.
type podReader struct {
	runtime        RuntimeService
	runtimeName    string
	clock          clock.Clock
	requestTimeout time.Duration
}

// pods lists every pod that has a sandbox or container in the runtime,
// grouped by the pod UID label. Objects without the label are not
// nodelet's and are left alone.
func (m *podReader) pods(ctx context.Context) ([]*container.Pod, error) {
	cctx, cancel := context.WithTimeout(ctx, m.requestTimeout)
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

// status reads everything the runtime knows about one pod: all its
// sandboxes and all its containers, dead or alive, newest first. The two
// halves are read side by side: the read after a start or a stop is on
// the way to the status a client waits for.
func (m *podReader) status(ctx context.Context, uid types.UID, name, namespace string) (*container.PodStatus, error) {
	cctx, cancel := context.WithTimeout(ctx, m.requestTimeout)
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
func (m *podReader) sandboxStatuses(ctx context.Context, selector map[string]string) ([]*container.SandboxStatus, error) {
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
func (m *podReader) containerStatuses(ctx context.Context, selector map[string]string) ([]*container.Status, error) {
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

func (m *podReader) containerStatusFromCRI(s *runtimeapi.ContainerStatus) *container.Status {
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
