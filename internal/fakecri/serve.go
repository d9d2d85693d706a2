package fakecri

import (
	"net"
	"reflect"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/rawcodec"
)

// Serve answers CRI calls on l with the fake, for a nodelet process to
// run against a runtime that costs nothing (the scale benchmark): every
// unary RuntimeService and ImageService method the fake has, and the
// container event stream once EnableEvents was called. Stop the returned
// server to end it.
func (r *Runtime) Serve(l net.Listener) *grpc.Server {
	srv := grpc.NewServer(grpc.UnknownServiceHandler(r.serve), grpc.ForceServerCodec(rawcodec.Codec{}))
	go func() { _ = srv.Serve(l) }() // returns when the server stops
	return srv
}

// serve calls the fake's method named by the call's method, decoding the
// request into the type the method takes.
func (r *Runtime) serve(_ any, stream grpc.ServerStream) error {
	full, ok := grpc.MethodFromServerStream(stream)
	if !ok {
		return status.Error(codes.Internal, "no method")
	}
	name := full[strings.LastIndex(full, "/")+1:]
	if name == "GetContainerEvents" {
		return r.serveEvents(stream)
	}
	m := reflect.ValueOf(r).MethodByName(name)
	if !m.IsValid() || !unary(m.Type()) {
		return status.Errorf(codes.Unimplemented, "fakecri serves no %s", name)
	}
	var raw []byte
	if err := stream.RecvMsg(&raw); err != nil {
		return err
	}
	req := reflect.New(m.Type().In(1).Elem())
	if err := proto.Unmarshal(raw, req.Interface().(proto.Message)); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	out := m.Call([]reflect.Value{reflect.ValueOf(stream.Context()), req})
	if err, _ := out[1].Interface().(error); err != nil {
		return err
	}
	raw, err := proto.Marshal(out[0].Interface().(proto.Message))
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return stream.SendMsg(&raw)
}

// serveEvents relays the fake's container event stream until the caller
// leaves.
func (r *Runtime) serveEvents(stream grpc.ServerStream) error {
	var raw []byte
	if err := stream.RecvMsg(&raw); err != nil {
		return err
	}
	var req runtimeapi.GetEventsRequest
	if err := proto.Unmarshal(raw, &req); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	events, err := r.GetContainerEvents(stream.Context(), &req)
	if err != nil {
		return err
	}
	for {
		e, err := events.Recv()
		if err != nil {
			return err
		}
		raw, err := proto.Marshal(e)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		if err := stream.SendMsg(&raw); err != nil {
			return err
		}
	}
}

var messageType = reflect.TypeFor[proto.Message]()

// unary: the method is a unary CRI client call, (ctx, *Request,
// ...CallOption) (*Response, error).
func unary(t reflect.Type) bool {
	return t.NumIn() == 3 && t.IsVariadic() && t.In(1).Implements(messageType) &&
		t.NumOut() == 2 && t.Out(0).Implements(messageType)
}
