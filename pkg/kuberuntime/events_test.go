package kuberuntime

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func waitNotify(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("no notification after %s", what)
	}
}

func TestWatchContainerChangesPollsWithoutAnEventStream(t *testing.T) {
	f := newFixture(t)
	pod := newPod(v1.RestartPolicyAlways, "a").pod
	f.sync(t, pod)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	notified := make(chan struct{}, 10)
	go f.m.WatchContainerChanges(ctx, 100*time.Millisecond, func() { notified <- struct{}{} })

	waitTicker := func() {
		deadline := time.Now().Add(5 * time.Second)
		for !f.clock.HasWaiters() {
			if time.Now().After(deadline) {
				t.Fatal("the poller never waited on its ticker")
			}
			time.Sleep(time.Millisecond) // polling interval, not synchronisation
		}
	}
	waitTicker()
	// Nothing changed: a tick notifies nothing.
	f.clock.Step(100 * time.Millisecond)
	waitTicker()
	select {
	case <-notified:
		t.Fatal("notified without a change")
	default:
	}
	running := runtimeapi.ContainerState_CONTAINER_RUNNING
	f.rt.Exit(f.rt.ContainerIDs("a", &running)[0], 1)
	f.clock.Step(100 * time.Millisecond)
	waitNotify(t, notified, "a container exited")
}

func TestWatchContainerChangesUsesTheEventStream(t *testing.T) {
	f := newFixture(t)
	events := f.rt.EnableEvents()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	notified := make(chan struct{}, 10)
	go f.m.WatchContainerChanges(ctx, time.Hour, func() { notified <- struct{}{} })
	events <- &runtimeapi.ContainerEventResponse{ContainerId: "c1", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT}
	waitNotify(t, notified, "a stop event")
	if got := calls(f.rt, "ListContainers"); len(got) != 0 {
		t.Fatalf("polled although the runtime streams events: %v", got)
	}
}
