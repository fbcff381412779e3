package main

import (
	"io"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/internal/rawgrpc"
)

// The null server's RLQS answers every bucket of a report with the same
// token bucket at once, dividing nothing: what is left of a report's cost
// is gRPC's, reading the report and writing an answer of envoy-rls's size.
// It reads and writes the messages' bytes as envoy-rls does (rawgrpc), so
// that the two differ only in the service's own work.

// nullAssignment is a BucketAction's fields after its BucketId: a token
// bucket of 100,000 a second, for 15 s, as envoy-rls sends for the bench's
// limits.
var nullAssignment = func() []byte {
	b, err := proto.Marshal(&rlqsv3.RateLimitQuotaResponse_BucketAction{BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
		QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			AssignmentTimeToLive: durationpb.New(15 * time.Second),
			RateLimitStrategy: &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
				MaxTokens: 1_000_000, TokensPerFill: wrapperspb.UInt32(100_000), FillInterval: durationpb.New(time.Second)}}}}}})
	if err != nil {
		panic(err) // a fixed message: cannot fail
	}
	return b
}()

// registerNullRLQS registers the null RLQS on srv, which must have
// rawgrpc.ServerOption.
func registerNullRLQS(srv *grpc.Server) {
	desc := rlqsv3.RateLimitQuotaService_ServiceDesc
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: desc.ServiceName,
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: desc.Streams[0].StreamName, ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				for {
					var m rawgrpc.Message
					if err := ss.RecvMsg(&m); err == io.EOF {
						return nil
					} else if err != nil {
						return err
					}
					if err := ss.SendMsg(&rawgrpc.Message{Bytes: nullAnswer(m.Bytes)}); err != nil {
						return err
					}
				}
			}}},
		Metadata: desc.Metadata,
	}, struct{}{})
}

// nullAnswer answers a RateLimitQuotaUsageReports: each of its buckets'
// BucketId with nullAssignment. It reads no more than it must, and stops
// at what it cannot read (an Envoy's reports always read).
func nullAnswer(report []byte) []byte {
	var out []byte
	for len(report) > 0 {
		num, typ, n := protowire.ConsumeTag(report)
		if n < 0 {
			break
		}
		report = report[n:]
		n = protowire.ConsumeFieldValue(num, typ, report)
		if n < 0 {
			break
		}
		if num == 2 && typ == protowire.BytesType { // bucket_quota_usages
			usage, _ := protowire.ConsumeBytes(report)
			if id := fieldBytes(usage, 1); id != nil { // its bucket_id
				size := protowire.SizeTag(1) + protowire.SizeBytes(len(id)) + len(nullAssignment)
				out = protowire.AppendTag(out, 1, protowire.BytesType) // bucket_action
				out = protowire.AppendVarint(out, uint64(size))
				out = protowire.AppendTag(out, 1, protowire.BytesType)
				out = protowire.AppendBytes(out, id)
				out = append(out, nullAssignment...)
			}
		}
		report = report[n:]
	}
	return out
}

// fieldBytes returns the bytes of field num of a message, nil if absent.
func fieldBytes(m []byte, num protowire.Number) []byte {
	for len(m) > 0 {
		f, typ, n := protowire.ConsumeTag(m)
		if n < 0 {
			return nil
		}
		m = m[n:]
		if f == num && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(m)
			return v
		}
		if n = protowire.ConsumeFieldValue(f, typ, m); n < 0 {
			return nil
		}
		m = m[n:]
	}
	return nil
}
