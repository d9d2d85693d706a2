package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CRIProxy stands between a nodelet and its containerd and forwards every
// CRI call, except those a rule holds: a test makes one call hang for one
// container (a wedged StopContainer, say) and sees what the rest of the
// node does meanwhile.
type CRIProxy struct {
	// Endpoint is the proxy's socket, for containerRuntimeEndpoint.
	Endpoint string
	srv      *grpc.Server
	conn     *grpc.ClientConn

	mu    sync.Mutex
	holds map[string]chan struct{} // method/containerID → released when closed
	held  map[string]int           // how many calls each hold caught
}

// StartCRIProxy serves a proxy to cd's CRI socket in dir.
func StartCRIProxy(cd *Containerd, dir string) (*CRIProxy, error) {
	conn, err := grpc.NewClient("unix://"+cd.Address, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "cri-proxy.sock")
	_ = os.Remove(sock) // a stale socket from a killed run; none otherwise
	l, err := net.Listen("unix", sock)
	if err != nil {
		conn.Close()
		return nil, err
	}
	p := &CRIProxy{Endpoint: "unix://" + sock, conn: conn, holds: map[string]chan struct{}{}, held: map[string]int{}}
	p.srv = grpc.NewServer(grpc.UnknownServiceHandler(p.forward), grpc.ForceServerCodec(rawCodec{}))
	go func() { _ = p.srv.Serve(l) }() // returns when Stop closes the listener
	return p, nil
}

// Stop ends the proxy; held calls fail.
func (p *CRIProxy) Stop() {
	p.srv.Stop()
	p.conn.Close()
}

// Hold makes every call of method (e.g. "StopContainer") about the
// container hang until Release, or until the caller gives up.
func (p *CRIProxy) Hold(method, containerID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holds[method+"/"+containerID] = make(chan struct{})
}

// Release lets the held calls of method about the container go on.
func (p *CRIProxy) Release(method, containerID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ch, ok := p.holds[method+"/"+containerID]; ok {
		close(ch)
		delete(p.holds, method+"/"+containerID)
	}
}

// Held says how many calls of method about the container were held.
func (p *CRIProxy) Held(method, containerID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held[method+"/"+containerID]
}

// forward relays one call, in both directions, to containerd.
func (p *CRIProxy) forward(_ any, in grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(in)
	if !ok {
		return status.Error(codes.Internal, "no method")
	}
	ctx := in.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	out, err := p.conn.NewStream(metadata.NewOutgoingContext(ctx, md), &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		return err
	}
	sent := make(chan error, 1)
	go func() {
		for {
			var b []byte
			if err := in.RecvMsg(&b); err != nil {
				sent <- out.CloseSend()
				return
			}
			if err := p.hold(ctx, method, b); err != nil {
				sent <- err
				return
			}
			if err := out.SendMsg(&b); err != nil {
				sent <- err
				return
			}
		}
	}()
	for {
		var b []byte
		if err := out.RecvMsg(&b); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := in.SendMsg(&b); err != nil {
			return err
		}
		select {
		case err := <-sent:
			if err != nil {
				return err
			}
		default:
		}
	}
}

// hold blocks a request a rule holds until it is released or its caller
// gives up.
func (p *CRIProxy) hold(ctx context.Context, method string, req []byte) error {
	if method != "/runtime.v1.RuntimeService/StopContainer" {
		return nil
	}
	var stop runtimeapi.StopContainerRequest
	if err := proto.Unmarshal(req, &stop); err != nil {
		return err
	}
	key := "StopContainer/" + stop.ContainerId
	p.mu.Lock()
	ch, ok := p.holds[key]
	if ok {
		p.held[key]++
	}
	p.mu.Unlock()
	if !ok {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return status.Error(codes.DeadlineExceeded, fmt.Sprintf("held by the test's CRI proxy: %v", ctx.Err()))
	}
}

// rawCodec passes messages through as bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }
