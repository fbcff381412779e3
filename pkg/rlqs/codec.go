package rlqs

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// rawMessage is a message as its bytes: what the stream reads its reports
// into and writes its answers from (wire.go), through Codec.
type rawMessage struct{ b []byte }

// ServerOptions are the options a gRPC server serving the service needs:
// its codec, which hands the stream its messages' bytes and passes every
// other message to gRPC's protobuf codec.
func (s *Service) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ForceServerCodecV2(codec{encoding.GetCodecV2(proto.Name)})}
}

// codec is gRPC's protobuf codec, but for rawMessage: its bytes as they
// are, one copy out of gRPC's buffers on the way in, none on the way out.
type codec struct{ encoding.CodecV2 }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*rawMessage); ok {
		return mem.BufferSlice{mem.SliceBuffer(m.b)}, nil
	}
	return c.CodecV2.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(*rawMessage); ok {
		m.b = data.Materialize()
		return nil
	}
	return c.CodecV2.Unmarshal(data, v)
}
