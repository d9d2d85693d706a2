package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/fakecri"
)

// An answer split over several buffers decodes into the same message as
// the whole one.
func TestAnswerCodecJoinsFrames(t *testing.T) {
	want := &runtimeapi.ListPodSandboxResponse{}
	for i := range 50 {
		want.Items = append(want.Items, &runtimeapi.PodSandbox{Id: fmt.Sprintf("sb-%d", i),
			Metadata: &runtimeapi.PodSandboxMetadata{Name: strings.Repeat("n", 200), Uid: fmt.Sprint(i)}})
	}
	b, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	third := len(b) / 3
	data := mem.BufferSlice{mem.SliceBuffer(b[:third]), mem.SliceBuffer(b[third : 2*third]), mem.SliceBuffer(b[2*third:])}
	got := &runtimeapi.ListPodSandboxResponse{}
	if err := theAnswerCodec.Unmarshal(data, got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Fatalf("decoded %d sandboxes, not the %d sent", len(got.Items), len(want.Items))
	}
	if err := theAnswerCodec.Unmarshal(data, "not a message"); err == nil {
		t.Fatal("a non-message was decoded")
	}
}

// Through a connection Dial made, a list far larger than one HTTP/2 frame
// (16 KiB) arrives whole.
func TestDialDecodesLargeAnswers(t *testing.T) {
	rt := fakecri.New(testingclock.NewFakeClock(time.Unix(1000, 0)), "img")
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := rt.Serve(l)
	defer srv.Stop()
	ctx := context.Background()
	for i := range 300 {
		if _, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
			Metadata: &runtimeapi.PodSandboxMetadata{Name: fmt.Sprintf("pod-%d-%s", i, strings.Repeat("x", 100)), Namespace: "ns", Uid: fmt.Sprint(i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	conn, _, err := Dial(ctx, "unix://"+sock, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	list, err := runtimeapi.NewRuntimeServiceClient(conn).ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if size := proto.Size(list); len(list.Items) != 300 || size < 32<<10 {
		t.Fatalf("%d sandboxes in %d bytes, want 300 in more than two frames (32 KiB)", len(list.Items), size)
	}
}

// DialImages connects to a separate image service endpoint once an image
// service answers there; a socket where none does is refused at once,
// naming the endpoint.
func TestDialImages(t *testing.T) {
	rt := fakecri.New(testingclock.NewFakeClock(time.Unix(1000, 0)), "img")
	dir := t.TempDir()
	sock := filepath.Join(dir, "images.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := rt.Serve(l)
	defer srv.Stop()
	ctx := context.Background()
	conn, err := DialImages(ctx, "unix://"+sock, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	list, err := runtimeapi.NewImageServiceClient(conn).ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil || len(list.Images) != 1 {
		t.Fatalf("images %v, %v: want the one image", list, err)
	}

	empty := filepath.Join(dir, "empty.sock")
	l2, err := net.Listen("unix", empty)
	if err != nil {
		t.Fatal(err)
	}
	none := grpc.NewServer()
	go func() { _ = none.Serve(l2) }()
	defer none.Stop()
	if _, err := DialImages(ctx, empty, 10*time.Second); !errors.Is(err, ErrRuntimeUnreachable) || !strings.Contains(err.Error(), `image service endpoint "`+empty+`"`) {
		t.Fatalf("a socket without an image service: %v", err)
	}
}
