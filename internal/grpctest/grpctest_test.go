package grpctest

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestServeAndDial(t *testing.T) {
	h := health.NewServer()
	h.SetServingStatus("x", healthpb.HealthCheckResponse_NOT_SERVING)
	addr := Serve(t, func(g *grpc.Server) { healthpb.RegisterHealthServer(g, h) })
	resp, err := healthpb.NewHealthClient(Dial(t, addr)).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("status %v, want NOT_SERVING: the call did not reach the registered service", resp.Status)
	}
}
