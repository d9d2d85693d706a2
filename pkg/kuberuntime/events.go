package kuberuntime

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// reopenDelay spaces attempts to reopen a broken event stream.
const reopenDelay = time.Second

// WatchContainerChanges calls notify soon after any container starts or
// stops, until ctx ends, so the PLEG can relist at once instead of on its
// next tick. It uses the runtime's container event stream (CRI
// GetContainerEvents) where the runtime has one; otherwise (containerd
// before 1.7) it lists the running containers every poll interval, which
// is far cheaper than a full relist, and notifies when that set changes.
func (m *Manager) WatchContainerChanges(ctx context.Context, poll time.Duration, notify func()) {
	for ctx.Err() == nil {
		err := m.streamEvents(ctx, notify)
		if ctx.Err() != nil {
			return
		}
		if status.Code(err) == codes.Unimplemented {
			klog.InfoS("The container runtime has no event stream; polling running containers instead", "interval", poll)
			m.pollRunning(ctx, poll, notify)
			return
		}
		klog.ErrorS(err, "Container event stream broke; reopening it")
		select {
		case <-ctx.Done():
		case <-m.clock.After(reopenDelay):
		}
	}
}

func (m *Manager) streamEvents(ctx context.Context, notify func()) error {
	stream, err := m.runtime.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		return err
	}
	first := true
	for {
		if _, err := stream.Recv(); err != nil {
			return err
		}
		if first {
			klog.InfoS("Watching the container runtime's event stream")
			first = false
		}
		notify()
	}
}

// pollRunning notifies whenever the set of running containers changes.
func (m *Manager) pollRunning(ctx context.Context, poll time.Duration, notify func()) {
	// The baseline is taken before the ticker starts, so a change made
	// after the first tick can be waited for is never in the baseline.
	last, _ := m.runningContainers(ctx)
	t := m.clock.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		cur, err := m.runningContainers(ctx)
		if err != nil {
			continue
		}
		if last != nil && !sameSet(last, cur) {
			notify()
		}
		last = cur
	}
}

func (m *Manager) runningContainers(ctx context.Context) (map[string]bool, error) {
	ctx, cancel := m.call(ctx)
	defer cancel()
	resp, err := m.runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}})
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(resp.GetContainers()))
	for _, c := range resp.GetContainers() {
		out[c.Id] = true
	}
	return out, nil
}

func sameSet(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}
