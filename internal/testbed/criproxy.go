package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/rawcodec"
)

// CRIProxy stands between a nodelet and its containerd and forwards every
// CRI call, except those a rule holds or fails: a test makes one call hang
// or fail for one container, image or pod (a wedged StopContainer, a
// stuck pull) and sees what the rest of the node does meanwhile.
type CRIProxy struct {
	// Endpoint is the proxy's socket, for containerRuntimeEndpoint.
	Endpoint string
	srv      *grpc.Server
	conn     *grpc.ClientConn

	mu    sync.Mutex
	holds map[string]chan struct{} // method/subject → released when closed
	fails map[string]codes.Code    // method/subject → the error code returned
	held  map[string]int           // how many calls each rule caught
}

// subjects says, for each method a rule can catch, what a request is
// about: a container ID, an image, or a pod's name.
var subjects = map[string]func([]byte) (string, error){
	"StopContainer": func(b []byte) (string, error) {
		var r runtimeapi.StopContainerRequest
		return r.ContainerId, proto.Unmarshal(b, &r)
	},
	"StartContainer": func(b []byte) (string, error) {
		var r runtimeapi.StartContainerRequest
		return r.ContainerId, proto.Unmarshal(b, &r)
	},
	"PullImage": func(b []byte) (string, error) {
		var r runtimeapi.PullImageRequest
		err := proto.Unmarshal(b, &r)
		return r.GetImage().GetImage(), err
	},
	// The runtime's own status is about nothing in particular: its
	// subject is "".
	"Status": func([]byte) (string, error) { return "", nil },
	"RunPodSandbox": func(b []byte) (string, error) {
		var r runtimeapi.RunPodSandboxRequest
		err := proto.Unmarshal(b, &r)
		return r.GetConfig().GetMetadata().GetName(), err
	},
}

// StartCRIProxy serves a proxy to cd's CRI socket in dir.
func StartCRIProxy(cd *Containerd, dir string) (*CRIProxy, error) {
	conn, err := grpc.NewClient("unix://"+cd.Address, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawcodec.Codec{})))
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
	p := &CRIProxy{Endpoint: "unix://" + sock, conn: conn, holds: map[string]chan struct{}{}, fails: map[string]codes.Code{}, held: map[string]int{}}
	p.srv = grpc.NewServer(grpc.UnknownServiceHandler(p.forward), grpc.ForceServerCodec(rawcodec.Codec{}))
	go func() { _ = p.srv.Serve(l) }() // returns when Stop closes the listener
	return p, nil
}

// Stop ends the proxy; held calls fail.
func (p *CRIProxy) Stop() {
	p.srv.Stop()
	p.conn.Close()
}

// Hold makes every call of method (one of subjects': "StopContainer",
// "PullImage", ...) about the subject (a container ID, an image, a pod's
// name) hang until Release, or until the caller gives up.
func (p *CRIProxy) Hold(method, subject string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holds[method+"/"+subject] = make(chan struct{})
}

// Fail makes every call of method about the subject fail with code,
// until Release.
func (p *CRIProxy) Fail(method, subject string, code codes.Code) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fails[method+"/"+subject] = code
}

// Release lets the held calls of method about the subject go on, and
// the next ones through.
func (p *CRIProxy) Release(method, subject string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ch, ok := p.holds[method+"/"+subject]; ok {
		close(ch)
		delete(p.holds, method+"/"+subject)
	}
	delete(p.fails, method+"/"+subject)
}

// Held says how many calls of method about the subject a rule caught.
func (p *CRIProxy) Held(method, subject string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held[method+"/"+subject]
}

// forward relays one call, in both directions, to containerd.
func (p *CRIProxy) forward(_ any, in grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(in)
	if !ok {
		return status.Error(codes.Internal, "no method")
	}
	ctx := in.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	// A rule's error ends the call to containerd too: otherwise the reply
	// this side waits for would never come.
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	out, err := p.conn.NewStream(metadata.NewOutgoingContext(octx, md), &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
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
				cancel()
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
			select {
			case ruleErr := <-sent:
				if ruleErr != nil {
					return ruleErr
				}
			default:
			}
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
// gives up, or fails one a rule fails.
func (p *CRIProxy) hold(ctx context.Context, method string, req []byte) error {
	name := method[strings.LastIndex(method, "/")+1:]
	subject, ok := subjects[name]
	if !ok {
		return nil
	}
	s, err := subject(req)
	if err != nil {
		return err
	}
	key := name + "/" + s
	p.mu.Lock()
	ch, held := p.holds[key]
	code, failed := p.fails[key]
	if held || failed {
		p.held[key]++
	}
	p.mu.Unlock()
	switch {
	case failed:
		return status.Error(code, "failed by the test's CRI proxy")
	case !held:
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return status.Error(codes.DeadlineExceeded, fmt.Sprintf("held by the test's CRI proxy: %v", ctx.Err()))
	}
}
