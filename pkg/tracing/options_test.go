package tracing_test

import (
	"context"
	"crypto/tls"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/envoy-rls/envoy-rls/internal/otlptest"
	"github.com/envoy-rls/envoy-rls/internal/testpki"
	"github.com/envoy-rls/envoy-rls/pkg/tracing"
)

func TestParseEndpointWithProtocol(t *testing.T) {
	for _, c := range []struct {
		in                    string
		protocol              tracing.Protocol
		wantProtocol, address string
		err                   string
	}{
		{"collector:4317", tracing.GRPC, "grpc", "collector:4317", ""},
		{"http://collector:4317", tracing.GRPC, "grpc", "collector:4317", ""},
		{"https://otel.example.com:4317", tracing.GRPC, "grpc", "https://otel.example.com:4317", ""},
		{"https://otel.example.com:4317/ignored", tracing.GRPC, "grpc", "https://otel.example.com:4317", ""},
		{"http://collector:4318", tracing.HTTP, "http", "http://collector:4318/v1/traces", ""},
		{"https://otel.example.com/otlp/v1/traces", tracing.HTTP, "http", "https://otel.example.com/otlp/v1/traces", ""},
		{"collector:4318", tracing.HTTP, "", "", `"collector:4318" is not an http:// or https:// URL`},
		{"collector", tracing.GRPC, "", "", `"collector" is neither host:port nor an http:// or https:// URL (OTLP over gRPC)`},
		{"https://", tracing.GRPC, "", "", `"https://" has no host`},
		{"collector:4317", "zipkin", "", "", `protocol "zipkin": want grpc or http`},
	} {
		ep, err := tracing.ParseEndpoint(c.in, c.protocol)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q over %s: error %v, want one saying %q", c.in, c.protocol, err, c.err)
		case c.err == "" && (err != nil || string(ep.Protocol) != c.wantProtocol || ep.Address != c.address):
			t.Errorf("%q over %s: %+v %v, want %s %s", c.in, c.protocol, ep, err, c.wantProtocol, c.address)
		}
	}
}

// TestSamplingRatio: with a ratio of 0, calls without a trace context, or
// whose caller did not sample, are not traced, OTEL_TRACES_SAMPLER
// notwithstanding; a call whose caller sampled is. Without a ratio, the
// SDK's OTEL_TRACES_SAMPLER still decides.
func TestSamplingRatio(t *testing.T) {
	zero := 0.0
	for _, c := range []struct {
		name, sampler string
		ratio         *float64
	}{
		{"ratio 0", "always_on", &zero},
		{"OTEL_TRACES_SAMPLER", "parentbased_always_off", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("OTEL_TRACES_SAMPLER", c.sampler)
			collector, addr := otlptest.StartGRPC(t)
			tr, err := tracing.Start(context.Background(), tracing.Options{Endpoint: addr, SamplingRatio: c.ratio})
			if err != nil {
				t.Fatal(err)
			}
			conn := serveGRPC(t, newService(t, tr))
			call(t, conn, userRequest("bob"))
			call(t, conn, userRequest("carol"), "traceparent", "00-11111111111111111111111111111111-"+callerSpan+"-00")
			call(t, conn, userRequest("alice"), "traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
			conn.Close()
			stopGRPC(t)
			flush(t, tr)
			spans := collector.Wait(t, 10*time.Second, func(s []otlptest.Span) bool { return len(s) >= 2 })
			for _, s := range spans {
				if s.TraceID() != callerTrace {
					t.Errorf("a span of trace %s, want only the sampled caller's %s:\n%s", s.TraceID(), callerTrace, otlptest.Describe(spans))
				}
			}
			if len(spans) != 2 {
				t.Errorf("%d spans, want the sampled call's and its store call's:\n%s", len(spans), otlptest.Describe(spans))
			}
		})
	}
}

func TestBadSamplingRatio(t *testing.T) {
	for _, r := range []float64{-0.1, 1.5, math.NaN()} {
		_, err := tracing.Start(context.Background(), tracing.Options{Endpoint: "127.0.0.1:4317", SamplingRatio: &r})
		if err == nil || !strings.Contains(err.Error(), "want a number from 0 to 1") {
			t.Errorf("ratio %g: %v, want an error", r, err)
		}
	}
}

// oneSpan starts tracing with opts, sends one span, and returns what the
// collector received.
func oneSpan(t *testing.T, collector *otlptest.Collector, opts tracing.Options) (otlptest.Span, *tracing.Tracing) {
	t.Helper()
	tr, err := tracing.Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.Provider().Tracer("test").Start(context.Background(), "one")
	span.End()
	flush(t, tr)
	spans := collector.Wait(t, 10*time.Second, func(s []otlptest.Span) bool { return len(s) >= 1 })
	return spans[len(spans)-1], tr
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestResource: the service's name, namespace and instance id given win
// over the standard variables; the default name yields to them; an
// instance id not given is a random UUID, one per start.
func TestResource(t *testing.T) {
	collector, addr := otlptest.StartGRPC(t)
	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "service.namespace=env-ns,deployment.environment=prod")
	given, _ := oneSpan(t, collector, tracing.Options{Endpoint: addr, ServiceName: "RateLimit", ServiceNamespace: "gateway",
		ServiceInstanceID: "ratelimit-0", DefaultServiceName: "envoy-rls"})
	for k, want := range map[string]string{"service.name": "RateLimit", "service.namespace": "gateway",
		"service.instance.id": "ratelimit-0", "deployment.environment": "prod"} {
		if got, _ := given.ResourceAttr(k); got != want {
			t.Errorf("given: %s = %q, want %q", k, got, want)
		}
	}

	defaulted, tr := oneSpan(t, collector, tracing.Options{Endpoint: addr, DefaultServiceName: "envoy-rls"})
	if got, _ := defaulted.ResourceAttr("service.name"); got != "from-env" || tr.ServiceName() != "from-env" {
		t.Errorf("default name: service.name = %q (reported %q), want OTEL_SERVICE_NAME's", got, tr.ServiceName())
	}
	id1, _ := defaulted.ResourceAttr("service.instance.id")
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	bare, _ := oneSpan(t, collector, tracing.Options{Endpoint: addr, DefaultServiceName: "envoy-rls"})
	id2, _ := bare.ResourceAttr("service.instance.id")
	if got, _ := bare.ResourceAttr("service.name"); got != "envoy-rls" {
		t.Errorf("no variables: service.name = %q, want the default", got)
	}
	if ns, ok := bare.ResourceAttr("service.namespace"); ok {
		t.Errorf("no namespace given: service.namespace = %q, want none", ns)
	}
	if !uuidV4.MatchString(id1) || !uuidV4.MatchString(id2) || id1 == id2 {
		t.Errorf("instance ids %q and %q: want two random version 4 UUIDs", id1, id2)
	}
}

// TestGRPCOverTLS: OTLP over gRPC to an https:// endpoint uses TLS, with the
// CA of OTEL_EXPORTER_OTLP_CERTIFICATE, and sends the headers of
// OTEL_EXPORTER_OTLP_HEADERS: the SDK still reads its variables.
func TestGRPCOverTLS(t *testing.T) {
	pki := testpki.New(t)
	cert, err := tls.LoadX509KeyPair(pki.ServerCert, pki.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	collector, addr := otlptest.StartGRPC(t, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))
	t.Setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", pki.CACert)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=acme")
	span, tr := oneSpan(t, collector, tracing.Options{Endpoint: "https://" + addr, Protocol: tracing.GRPC})
	if span.GetName() != "one" || tr.Endpoint().Address != "https://"+addr {
		t.Errorf("span %q via %+v", span.GetName(), tr.Endpoint())
	}
	reqs := collector.Requests()
	if len(reqs) == 0 || reqs[0].Header.Get("x-tenant") != "acme" {
		t.Errorf("requests %+v, want x-tenant: acme", reqs)
	}
}
