// Package rawgrpc lets a gRPC server read and write a stream's messages
// as their bytes, for a service that parses them itself (package rlqs):
// a Message received is its wire bytes, one copy out of gRPC's buffers;
// one sent is written as it is. Every other message goes through gRPC's
// protobuf codec, unchanged.
package rawgrpc

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// Message is a message as its bytes. One sent must not be changed after
// (gRPC may still be writing it).
type Message struct{ Bytes []byte }

// ServerOption is the server option that installs the codec: on the
// server, for every service (the others see gRPC's protobuf codec).
func ServerOption() grpc.ServerOption {
	return grpc.ForceServerCodecV2(codec{encoding.GetCodecV2(proto.Name)})
}

// codec is gRPC's protobuf codec, but for Message.
type codec struct{ encoding.CodecV2 }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*Message); ok {
		return mem.BufferSlice{mem.SliceBuffer(m.Bytes)}, nil
	}
	return c.CodecV2.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(*Message); ok {
		m.Bytes = data.Materialize()
		return nil
	}
	return c.CodecV2.Unmarshal(data, v)
}
