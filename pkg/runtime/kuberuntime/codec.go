package kuberuntime

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// answerCodec is gRPC's proto codec, except that an answer that arrived
// in several frames is joined into a slice of its own size, garbage once
// decoded. gRPC joins it into a buffer from its shared pool, whose sizes
// jump from 32 KiB to 1 MiB: every list of a few dozen pods or more
// (ListContainers, ListPodSandbox, the stats list) took a 1 MiB buffer,
// and the pool kept several of them alive, a third of the heap in use
// with 110 pods running. An answer in one frame is decoded in place, as
// before.
type answerCodec struct{ encoding.CodecV2 }

var (
	theAnswerCodec = answerCodec{encoding.GetCodecV2(protocodec.Name)}
	// answers is the call option that makes a connection's calls use it.
	answers = grpc.ForceCodecV2(theAnswerCodec)
)

func (c answerCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if len(data) <= 1 {
		return c.CodecV2.Unmarshal(data, v)
	}
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("failed to unmarshal, message is %T, want proto.Message", v)
	}
	return proto.Unmarshal(data.Materialize(), m)
}
