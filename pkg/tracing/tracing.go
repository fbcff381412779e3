// Package tracing sends the service's traces to an OpenTelemetry collector
// over OTLP, and reads the callers' trace context: W3C traceparent, and the
// B3 headers that Envoy sends when its tracer is Zipkin.
//
// It only sets up the SDK; the spans are made where the calls are served
// (pkg/rls). Tracing is off unless Start is called: the service then has
// no tracer and no gRPC stats handler, and pays nothing.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"

	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Options configure Start.
type Options struct {
	// Endpoint is where the collector listens: host:port for OTLP over gRPC
	// (without TLS, as to a collector beside the service), or an http:// or
	// https:// URL for OTLP over HTTP (protobuf), posted to the URL's path,
	// /v1/traces if it has none. Required.
	Endpoint string
	// ServiceName and ServiceVersion describe the service in every span's
	// resource; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override them.
	ServiceName, ServiceVersion string
}

// Protocol is how spans are sent.
type Protocol string

const (
	GRPC Protocol = "grpc" // OTLP over gRPC
	HTTP Protocol = "http" // OTLP over HTTP, protobuf
)

// Endpoint is a parsed Options.Endpoint.
type Endpoint struct {
	Protocol Protocol
	// Address is host:port for GRPC, the whole URL for HTTP.
	Address string
}

// ParseEndpoint reads an Options.Endpoint, with an error that says what
// is wrong with it.
func ParseEndpoint(s string) (Endpoint, error) {
	if s == "" {
		return Endpoint{}, errors.New("empty: want host:port (OTLP over gRPC) or an http:// or https:// URL (OTLP over HTTP)")
	}
	u, err := url.Parse(s)
	if err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		if u.Host == "" {
			return Endpoint{}, fmt.Errorf("%q has no host", s)
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
		return Endpoint{Protocol: HTTP, Address: u.String()}, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" || port == "" {
		return Endpoint{}, fmt.Errorf("%q is neither host:port (OTLP over gRPC) nor an http:// or https:// URL (OTLP over HTTP)", s)
	}
	return Endpoint{Protocol: GRPC, Address: s}, nil
}

// Tracing is a running trace pipeline.
type Tracing struct {
	provider *sdktrace.TracerProvider
	endpoint Endpoint
}

// Start builds the exporter and the tracer provider. Spans are sent in
// batches in the background: a collector that is slow or down never holds
// up a call (spans beyond the queue are dropped), and its errors go to
// OpenTelemetry's error handler. Sampling follows the caller's decision
// when the call carries a trace context, and samples every other call
// unless OTEL_TRACES_SAMPLER says otherwise (the SDK reads it).
func Start(ctx context.Context, opts Options) (*Tracing, error) {
	ep, err := ParseEndpoint(opts.Endpoint)
	if err != nil {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	switch ep.Protocol {
	case HTTP:
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(ep.Address))
	default:
		exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(ep.Address), otlptracegrpc.WithInsecure())
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter for %s: %w", opts.Endpoint, err)
	}
	var attrs []attribute.KeyValue
	if opts.ServiceName != "" {
		attrs = append(attrs, attribute.String("service.name", opts.ServiceName))
	}
	if opts.ServiceVersion != "" {
		attrs = append(attrs, attribute.String("service.version", opts.ServiceVersion))
	}
	// Later detectors win: the environment over the defaults given here.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithAttributes(attrs...), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("tracing resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracing{provider: tp, endpoint: ep}, nil
}

// Provider makes the tracers.
func (t *Tracing) Provider() trace.TracerProvider { return t.provider }

// Endpoint is where spans go.
func (t *Tracing) Endpoint() Endpoint { return t.endpoint }

// Shutdown sends the spans not yet sent, until ctx ends, and stops.
func (t *Tracing) Shutdown(ctx context.Context) error { return t.provider.Shutdown(ctx) }

// Propagator reads a caller's trace context from W3C traceparent (and
// tracestate, and baggage) or from B3, single header or multiple x-b3-*
// headers as Envoy's Zipkin tracer sends them. When a call carries both,
// traceparent wins.
func Propagator() propagation.TextMapPropagator {
	// Extraction runs in order and a later propagator that finds a context
	// replaces an earlier one's: W3C last.
	return propagation.NewCompositeTextMapPropagator(
		b3.New(b3.WithInjectEncoding(b3.B3MultipleHeader)),
		propagation.TraceContext{},
		propagation.Baggage{},
	)
}
