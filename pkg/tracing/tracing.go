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
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

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
	// Endpoint is where the collector listens. Required. Its form:
	//   - host:port: OTLP over gRPC, without TLS (a collector beside the
	//     service);
	//   - an http:// or https:// URL: OTLP over HTTP (protobuf), posted to
	//     the URL's path, /v1/traces if it has none; with Protocol GRPC,
	//     OTLP over gRPC to its host, without TLS for http://, with TLS for
	//     https:// (its path is ignored, as gRPC has none).
	Endpoint string
	// Protocol is how spans are sent; empty: as Endpoint's form says.
	Protocol Protocol
	// ServiceName, ServiceNamespace and ServiceInstanceID are the
	// resource's service.name, service.namespace and service.instance.id:
	// those given win over the standard variables (OTEL_SERVICE_NAME,
	// OTEL_RESOURCE_ATTRIBUTES). Those left empty are the variables', or
	// else DefaultServiceName, no namespace, and a random version 4 UUID,
	// so that the replicas' spans stay apart.
	ServiceName, ServiceNamespace, ServiceInstanceID string
	// DefaultServiceName and ServiceVersion yield to the variables.
	DefaultServiceName, ServiceVersion string
	// SamplingRatio, if set, is the share of calls without a trace context
	// that are traced, from 0 to 1; a call with one follows its caller's
	// decision (ParentBased(TraceIDRatioBased)). Nil leaves the sampler to
	// OTEL_TRACES_SAMPLER, which the SDK reads (all calls when unset).
	SamplingRatio *float64
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
	// Address is the whole URL for HTTP. For GRPC it is host:port without
	// TLS, or https://host:port with it.
	Address string
}

// ParseEndpoint reads an Options.Endpoint for protocol p (empty: the
// endpoint's form chooses), with an error that says what is wrong with it.
func ParseEndpoint(s string, p Protocol) (Endpoint, error) {
	if p != "" && p != GRPC && p != HTTP {
		return Endpoint{}, fmt.Errorf("protocol %q: want grpc or http", p)
	}
	if s == "" {
		return Endpoint{}, errors.New("empty: want host:port (OTLP over gRPC) or an http:// or https:// URL (OTLP over HTTP)")
	}
	u, err := url.Parse(s)
	if err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		if u.Host == "" {
			return Endpoint{}, fmt.Errorf("%q has no host", s)
		}
		if p == GRPC {
			if u.Scheme == "http" {
				return Endpoint{Protocol: GRPC, Address: u.Host}, nil
			}
			return Endpoint{Protocol: GRPC, Address: "https://" + u.Host}, nil
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
		return Endpoint{Protocol: HTTP, Address: u.String()}, nil
	}
	if p == HTTP {
		return Endpoint{}, fmt.Errorf("%q is not an http:// or https:// URL (OTLP over HTTP)", s)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" || port == "" {
		if p == GRPC {
			return Endpoint{}, fmt.Errorf("%q is neither host:port nor an http:// or https:// URL (OTLP over gRPC)", s)
		}
		return Endpoint{}, fmt.Errorf("%q is neither host:port (OTLP over gRPC) nor an http:// or https:// URL (OTLP over HTTP)", s)
	}
	return Endpoint{Protocol: GRPC, Address: s}, nil
}

// Tracing is a running trace pipeline.
type Tracing struct {
	provider *sdktrace.TracerProvider
	endpoint Endpoint
	service  string
}

// Start builds the exporter and the tracer provider. Spans are sent in
// batches in the background: a collector that is slow or down never holds
// up a call (spans beyond the queue are dropped), and its errors go to
// OpenTelemetry's error handler.
//
// The exporter is given only the endpoint (and, for host:port, no TLS):
// the SDK reads the rest of its settings from the standard variables
// (OTEL_EXPORTER_OTLP_HEADERS, _CERTIFICATE, _CLIENT_*, _TIMEOUT,
// _COMPRESSION and their _TRACES_ forms).
func Start(ctx context.Context, opts Options) (*Tracing, error) {
	ep, err := ParseEndpoint(opts.Endpoint, opts.Protocol)
	if err != nil {
		return nil, err
	}
	sampler, err := samplerOf(opts.SamplingRatio)
	if err != nil {
		return nil, err
	}
	res, err := resourceOf(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("tracing resource: %w", err)
	}
	var exp sdktrace.SpanExporter
	switch {
	case ep.Protocol == HTTP:
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(ep.Address))
	case strings.HasPrefix(ep.Address, "https://"):
		// A URL, not WithEndpoint: TLS, with the CA and client certificate
		// of OTEL_EXPORTER_OTLP_CERTIFICATE and _CLIENT_* if set.
		exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(ep.Address))
	default:
		exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(ep.Address), otlptracegrpc.WithInsecure())
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter for %s: %w", opts.Endpoint, err)
	}
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	if sampler != nil {
		tpOpts = append(tpOpts, sdktrace.WithSampler(sampler))
	}
	service, _ := res.Set().Value("service.name")
	return &Tracing{provider: sdktrace.NewTracerProvider(tpOpts...), endpoint: ep, service: service.Emit()}, nil
}

// samplerOf is the sampler for Options.SamplingRatio; nil for the SDK's.
func samplerOf(ratio *float64) (sdktrace.Sampler, error) {
	if ratio == nil {
		return nil, nil
	}
	if !(*ratio >= 0 && *ratio <= 1) { // NaN too
		return nil, fmt.Errorf("sampling ratio %g: want a number from 0 to 1", *ratio)
	}
	return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(*ratio)), nil
}

// resourceOf describes the service. Later detectors win: the defaults,
// then the standard variables, then the attributes given.
func resourceOf(ctx context.Context, opts Options) (*resource.Resource, error) {
	var defaults, given []attribute.KeyValue
	if opts.DefaultServiceName != "" {
		defaults = append(defaults, attribute.String("service.name", opts.DefaultServiceName))
	}
	if opts.ServiceVersion != "" {
		defaults = append(defaults, attribute.String("service.version", opts.ServiceVersion))
	}
	if opts.ServiceInstanceID == "" {
		id, err := randomUUID()
		if err != nil {
			return nil, err
		}
		defaults = append(defaults, attribute.String("service.instance.id", id))
	}
	for _, a := range []struct{ key, value string }{
		{"service.name", opts.ServiceName},
		{"service.namespace", opts.ServiceNamespace},
		{"service.instance.id", opts.ServiceInstanceID},
	} {
		if a.value != "" {
			given = append(given, attribute.String(a.key, a.value))
		}
	}
	return resource.New(ctx, resource.WithTelemetrySDK(), resource.WithAttributes(defaults...),
		resource.WithFromEnv(), resource.WithAttributes(given...))
}

// randomUUID is a version 4 UUID (RFC 9562), as service.instance.id's
// semantic conventions suggest when nothing names the instance.
func randomUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("random service.instance.id: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // variant 10
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}

// Provider makes the tracers.
func (t *Tracing) Provider() trace.TracerProvider { return t.provider }

// Endpoint is where spans go.
func (t *Tracing) Endpoint() Endpoint { return t.endpoint }

// ServiceName is the resource's service.name, after the variables.
func (t *Tracing) ServiceName() string { return t.service }

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
