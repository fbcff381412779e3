package grpcconn

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/internal/grpctest"
)

// closer is a health service whose Watch closes its call's connection
// once asked to, and reports what the peer's AuthInfo said.
type closer struct {
	healthpb.UnimplementedHealthServer
	closed chan bool
	info   chan credentials.AuthInfo
}

func (c *closer) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	p, _ := peer.FromContext(ctx)
	c.info <- p.AuthInfo
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (c *closer) Watch(_ *healthpb.HealthCheckRequest, ss healthpb.Health_WatchServer) error {
	c.closed <- Close(ss.Context())
	<-ss.Context().Done()
	return nil
}

// TestCloseEndsTheConnection: a handler's Close ends its call, with the
// connection it came on; the client connects again for the next call. The
// peer's AuthInfo is the wrapped credentials' (plaintext here), its
// security level included.
func TestCloseEndsTheConnection(t *testing.T) {
	c := &closer{closed: make(chan bool, 1), info: make(chan credentials.AuthInfo, 1)}
	addr := grpctest.Serve(t, func(g *grpc.Server) { healthpb.RegisterHealthServer(g, c) }, grpc.Creds(Credentials(nil)))
	conn := grpctest.Dial(t, addr)
	client := healthpb.NewHealthClient(conn)
	if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	ai := <-c.info
	if ai.AuthType() != "insecure" {
		t.Errorf("AuthType %q, want the plaintext credentials' insecure", ai.AuthType())
	}
	if lv := ai.(interface {
		GetCommonAuthInfo() credentials.CommonAuthInfo
	}).GetCommonAuthInfo().SecurityLevel; lv != credentials.NoSecurity {
		t.Errorf("security level %v, want NoSecurity", lv)
	}

	w, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ok := <-c.closed:
		if !ok {
			t.Fatal("Close found no connection")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler did not run")
	}
	if _, err := w.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("the call whose connection closed: %v, want Unavailable", err)
	}
	if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("a call after: %v", err)
	}
}

// TestCloseWithoutCredentials: a server without Credentials has nothing
// to close.
func TestCloseWithoutCredentials(t *testing.T) {
	c := &closer{closed: make(chan bool, 1)}
	addr := grpctest.Serve(t, func(g *grpc.Server) { healthpb.RegisterHealthServer(g, c) })
	w, err := healthpb.NewHealthClient(grpctest.Dial(t, addr)).Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if ok := <-c.closed; ok {
		t.Fatal("Close closed a connection of a server without Credentials")
	}
	_ = w
}
