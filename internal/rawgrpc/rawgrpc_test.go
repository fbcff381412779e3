package rawgrpc

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/internal/grpctest"
)

// TestRawAndProtoSideBySide: on one server with the codec, a stream of
// Messages gets the bytes the client's protobuf codec wrote, and what it
// sends back reaches the client as the message those bytes encode; a
// service of generated types beside it works as without the codec.
func TestRawAndProtoSideBySide(t *testing.T) {
	sent := wrapperspb.String("a value é \x00")
	want, err := proto.Marshal(sent)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	h := health.NewServer()
	addr := grpctest.Serve(t, func(g *grpc.Server) {
		healthpb.RegisterHealthServer(g, h)
		g.RegisterService(&grpc.ServiceDesc{ServiceName: "test.Echo", HandlerType: (*any)(nil),
			Streams: []grpc.StreamDesc{{StreamName: "Echo", ServerStreams: true, ClientStreams: true,
				Handler: func(_ any, ss grpc.ServerStream) error {
					var m Message
					if err := ss.RecvMsg(&m); err != nil {
						return err
					}
					got <- m.Bytes
					return ss.SendMsg(&Message{Bytes: append([]byte(nil), m.Bytes...)})
				}}}}, struct{}{})
	}, ServerOption())
	conn := grpctest.Dial(t, addr)

	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a generated service beside: %v", err)
	}
	st, err := conn.NewStream(context.Background(), &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/test.Echo/Echo")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(sent); err != nil {
		t.Fatal(err)
	}
	back := &wrapperspb.StringValue{}
	if err := st.RecvMsg(back); err != nil {
		t.Fatal(err)
	}
	if b := <-got; string(b) != string(want) {
		t.Fatalf("the server got %q, want the client's encoding %q", b, want)
	}
	if !proto.Equal(back, sent) {
		t.Fatalf("the client got %v back, want %v", back, sent)
	}
}
