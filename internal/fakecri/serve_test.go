package fakecri

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"
)

// Served over a socket, the fake answers unary calls as it does in
// process, and the event stream once enabled.
func TestServe(t *testing.T) {
	r := New(testingclock.NewFakeClock(time.Unix(1000, 0)), "img")
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := r.Serve(l)
	defer srv.Stop()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := runtimeapi.NewRuntimeServiceClient(conn)
	ctx := context.Background()
	sb, err := c.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u"}}})
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil || len(list.Items) != 1 || list.Items[0].Id != sb.PodSandboxId {
		t.Fatalf("sandboxes %v, %v; want the one just run, %s", list, err, sb.PodSandboxId)
	}
	if n, _ := r.Counts(); n != 1 {
		t.Fatalf("the fake has %d sandboxes", n)
	}
	img, err := runtimeapi.NewImageServiceClient(conn).ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "img"}})
	if err != nil || img.Image == nil {
		t.Fatalf("image status %v, %v", img, err)
	}
	events, err := c.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err == nil {
		_, err = events.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("event stream: %v, want unimplemented", err)
	}
	feed := r.EnableEvents()
	feed <- &runtimeapi.ContainerEventResponse{ContainerId: "c1", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT}
	events, err = c.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if e, err := events.Recv(); err != nil || e.ContainerId != "c1" || e.ContainerEventType != runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT {
		t.Fatalf("event %v, %v", e, err)
	}
}
