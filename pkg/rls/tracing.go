package rls

import (
	"context"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	noopmetric "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// Tracing turns tracing on: a span per call (gRPC ShouldRateLimit and
// POST /json), a child of the caller's when the call carries a trace
// context, with a child span per store call.
type Tracing struct {
	// Provider makes the spans; required.
	Provider trace.TracerProvider
	// Propagator reads the caller's trace context from the call's gRPC
	// metadata or HTTP headers; required.
	Propagator propagation.TextMapPropagator
}

// tracerName names the service's own spans' instrumentation scope.
const tracerName = "github.com/envoy-rls/envoy-rls/pkg/rls"

// Span attributes.
const (
	attrDomain      = attribute.Key("rls.domain")
	attrCode        = attribute.Key("rls.code")
	attrDescriptors = attribute.Key("rls.descriptors")
	attrStore       = attribute.Key("rls.store")
	attrStoreOp     = attribute.Key("rls.store.operation")
	attrBuckets     = attribute.Key("rls.buckets")
)

// grpcTracing returns the gRPC server option that starts a span for every
// ShouldRateLimit call (health checks and reflection go untraced); none
// when tracing is off.
func (s *Service) grpcTracing() []grpc.ServerOption {
	if s.tracing == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(s.tracing.Provider),
		otelgrpc.WithPropagators(s.tracing.Propagator),
		otelgrpc.WithMeterProvider(noopmetric.NewMeterProvider()), // the service's own metrics count calls
		otelgrpc.WithFilter(filters.FullMethodName(rlsv3.RateLimitService_ShouldRateLimit_FullMethodName)),
	))}
}

// httpTracing wraps h in a span per request, named name; h itself when
// tracing is off.
func (s *Service) httpTracing(h http.Handler, name string) http.Handler {
	if s.tracing == nil {
		return h
	}
	return otelhttp.NewHandler(h, name,
		otelhttp.WithTracerProvider(s.tracing.Provider),
		otelhttp.WithPropagators(s.tracing.Propagator),
		otelhttp.WithMeterProvider(noopmetric.NewMeterProvider()))
}

// annotateCall adds what the service decided to the call's span: only
// called when tracing is on.
func annotateCall(ctx context.Context, req *rlsv3.RateLimitRequest, code string) {
	trace.SpanFromContext(ctx).SetAttributes(
		attrDomain.String(req.GetDomain()),
		attrCode.String(code),
		attrDescriptors.Int(len(req.GetDescriptors())),
	)
}

// startStoreSpan starts the span of a store call: only called when
// tracing is on.
func (s *Service) startStoreSpan(ctx context.Context, op string, buckets int) (context.Context, trace.Span) {
	return s.tracer.Start(ctx, "store."+op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attrStore.String(s.storeName), attrStoreOp.String(op), attrBuckets.Int(buckets)))
}

// endStoreSpan ends a store call's span, with its error said as callers
// are told it: a store's own error text may name its addresses.
func endStoreSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, (&storeError{err: err}).clientMessage())
	}
	span.End()
}
