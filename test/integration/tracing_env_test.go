package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/envoy-rls/envoy-rls/internal/otlptest"
)

const callSpan = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// tracingEnv is the environment of a ratelimit that traces to endpoint,
// on the memory store and the repository's config (no Redis), plus more.
func tracingEnv(endpoint string, more ...string) []string {
	return append([]string{"LOG_LEVEL=info", "USE_STATSD=false", "RLS_STORE=memory", "RLS_CONFIG=../../config",
		"TRACING_ENABLED=true", "OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint}, more...)
}

// rateLimitCalls makes n ShouldRateLimit calls, each with the metadata md.
func rateLimitCalls(t *testing.T, p *process, n int, md ...string) {
	t.Helper()
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(metadata.AppendToOutgoingContext(ctx, md...), request([]string{"user=alice"}))
		cancel()
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("ShouldRateLimit: %v, %v; output:\n%s", resp, err, p.out)
		}
	}
}

// TestTracingAsRatelimit starts the binary as ratelimit with
// envoyproxy/ratelimit's tracing variables, over each OTLP protocol: every
// call is traced (a span, and its store call's), under the service's name,
// namespace and instance id, with the headers of
// OTEL_EXPORTER_OTLP_HEADERS, at the endpoint OpenTelemetry's rules give.
func TestTracingAsRatelimit(t *testing.T) {
	for _, c := range []struct {
		protocol, path string
		start          func(t *testing.T) (*otlptest.Collector, string)
	}{
		{"grpc", "/opentelemetry.proto.collector.trace.v1.TraceService/Export", func(t *testing.T) (*otlptest.Collector, string) {
			collector, addr := otlptest.StartGRPC(t)
			return collector, "http://" + addr // http://: without TLS
		}},
		{"http", "/v1/traces", func(t *testing.T) (*otlptest.Collector, string) { return otlptest.StartHTTP(t) }},
	} {
		t.Run(c.protocol, func(t *testing.T) {
			collector, endpoint := c.start(t)
			rl := startAsRatelimit(t, "127.0.0.1", tracingEnv(endpoint, "TRACING_EXPORTER_PROTOCOL="+c.protocol,
				"TRACING_SERVICE_NAME=rate-limit", "TRACING_SERVICE_NAMESPACE=gateway", "TRACING_SERVICE_INSTANCE_ID=ratelimit-0",
				"OTEL_EXPORTER_OTLP_HEADERS=x-tenant=acme")...)
			rateLimitCalls(t, rl, 3)
			rl.stop(t)

			spans := collector.Wait(t, 10*time.Second, func(s []otlptest.Span) bool { return len(s) >= 6 })
			if calls, stores := otlptest.Named(spans, callSpan), otlptest.Named(spans, "store.apply"); len(spans) != 6 || len(calls) != 3 || len(stores) != 3 {
				t.Errorf("%d spans, want 3 calls and their 3 store calls:\n%s", len(spans), otlptest.Describe(spans))
			}
			for _, s := range spans {
				for k, want := range map[string]string{"service.name": "rate-limit", "service.namespace": "gateway", "service.instance.id": "ratelimit-0"} {
					if got, _ := s.ResourceAttr(k); got != want {
						t.Errorf("span %s: %s = %q, want %q", s.GetName(), k, got, want)
					}
				}
			}
			reqs := collector.Requests()
			for _, r := range reqs {
				if r.Path != c.path || r.Header.Get("x-tenant") != "acme" {
					t.Errorf("an export to %s with x-tenant %q, want %s and acme", r.Path, r.Header.Get("x-tenant"), c.path)
				}
			}
			for _, want := range []string{"protocol=OTLP/" + c.protocol, "service=rate-limit", "sampling_ratio=1"} {
				if !strings.Contains(rl.out.String(), want) {
					t.Errorf("no %s in the log:\n%s", want, rl.out)
				}
			}
		})
	}
}

// TestTracingAsRatelimitSampling: with TRACING_SAMPLING_RATE=0, calls
// without a sampled caller are not traced, a call with one is; with
// TRACING_ENABLED false (its default), nothing is, the OTEL_ variables
// notwithstanding.
func TestTracingAsRatelimitSampling(t *testing.T) {
	const trace, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	t.Run("rate 0", func(t *testing.T) {
		collector, addr := otlptest.StartGRPC(t)
		rl := startAsRatelimit(t, "127.0.0.1", tracingEnv("http://"+addr, "TRACING_EXPORTER_PROTOCOL=grpc", "TRACING_SAMPLING_RATE=0")...)
		rateLimitCalls(t, rl, 3)
		rateLimitCalls(t, rl, 1, "traceparent", "00-11111111111111111111111111111111-"+parent+"-00")
		rateLimitCalls(t, rl, 1, "traceparent", "00-"+trace+"-"+parent+"-01")
		rl.stop(t)
		spans := collector.Wait(t, 10*time.Second, func(s []otlptest.Span) bool { return len(s) >= 2 })
		for _, s := range spans {
			if s.TraceID() != trace {
				t.Errorf("a span of trace %s, want only the sampled caller's:\n%s", s.TraceID(), otlptest.Describe(spans))
			}
		}
		if len(spans) != 2 {
			t.Errorf("%d spans, want the sampled call's and its store call's:\n%s", len(spans), otlptest.Describe(spans))
		}
	})
	t.Run("off", func(t *testing.T) {
		collector, addr := otlptest.StartGRPC(t)
		// The last of a variable set twice is the one the process sees.
		rl := startAsRatelimit(t, "127.0.0.1", tracingEnv("http://"+addr, "TRACING_EXPORTER_PROTOCOL=grpc", "TRACING_ENABLED=false")...)
		rateLimitCalls(t, rl, 2, "traceparent", "00-"+trace+"-"+parent+"-01")
		rl.stop(t)
		if spans, reqs := collector.Spans(), collector.Requests(); len(spans) > 0 || len(reqs) > 0 {
			t.Errorf("tracing off: %d exports, spans:\n%s", len(reqs), otlptest.Describe(spans))
		}
		if strings.Contains(rl.out.String(), "tracing") {
			t.Errorf("tracing off, yet the log tells of it:\n%s", rl.out)
		}
	})
}
