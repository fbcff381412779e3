package rls

import (
	"log/slog"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// ServiceName is the gRPC name of the rate-limit service, also its name in
// grpc.health.v1.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// HealthName is the name envoyproxy/ratelimit gives its service in
// grpc.health.v1, which probes written for it ask about.
const HealthName = "ratelimit"

// NewGRPCServer returns a gRPC server with svc, the Rate Limit Quota
// Service quotas (if not nil), the health service hs and reflection (for
// grpcurl and the like) registered, handler panics turned into Internal
// errors, and a span per ShouldRateLimit call if svc traces.
func NewGRPCServer(svc *Service, quotas Registrar, hs *health.Server, log *slog.Logger, opts ...grpc.ServerOption) *grpc.Server {
	// A connection's write buffer goes back to a pool once flushed: an
	// idle Envoy's connection (an RLQS stream reports every few seconds)
	// then holds none, 32 KiB less each, which a fleet of thousands feels.
	opts = append(append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(RecoverUnary(log)), grpc.ChainStreamInterceptor(RecoverStream(log)),
		grpc.SharedWriteBuffer(true)}, svc.grpcTracing()...), opts...)
	if quotas != nil {
		opts = append(opts, quotas.ServerOptions()...)
	}
	g := grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(g, svc)
	if quotas != nil {
		quotas.Register(g)
	}
	healthpb.RegisterHealthServer(g, hs)
	reflection.Register(g)
	return g
}

// Registrar is a service that registers itself on a gRPC server, and
// needs some options of the server: the Rate Limit Quota Service (package
// rlqs).
type Registrar interface {
	Register(g grpc.ServiceRegistrar)
	ServerOptions() []grpc.ServerOption
}

// QuotaServiceName is the gRPC name of the Rate Limit Quota Service, also
// its name in grpc.health.v1.
const QuotaServiceName = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService"

// SetServing marks the overall server (""), the rate-limit service,
// HealthName and the Rate Limit Quota Service as serving or not in hs.
func SetServing(hs *health.Server, serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	hs.SetServingStatus("", st)
	hs.SetServingStatus(ServiceName, st)
	hs.SetServingStatus(HealthName, st)
	hs.SetServingStatus(QuotaServiceName, st)
}
