package tracing_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/envoy-rls/envoy-rls/internal/otlptest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
	"github.com/envoy-rls/envoy-rls/pkg/tracing"
)

// The caller's span, as Envoy would send it.
const (
	callerTrace  = "0af7651916cd43dd8448eb211c80319c"
	callerSpan   = "b7ad6b7169203331"
	callSpanName = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
)

const config = `
domain: api
descriptors:
  - key: user
    leaky_bucket: {size: 1, drip_rate: 1h}
`

// newService returns a service on a fresh memory store, with tr's tracing
// if tr is not nil.
func newService(t testing.TB, tr *tracing.Tracing) *rls.Service {
	t.Helper()
	cfg, _, err := descriptors.Parse(descriptors.Source{Name: "api.yaml", Data: []byte(config)})
	if err != nil {
		t.Fatal(err)
	}
	st, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	opts := rls.Options{Store: st, Config: cfg}
	if tr != nil {
		opts.Tracing = &rls.Tracing{Provider: tr.Provider(), Propagator: tracing.Propagator()}
	}
	svc, err := rls.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// serveGRPC serves svc as the service does, and returns a client of it.
func serveGRPC(t testing.TB, svc *rls.Service) *grpc.ClientConn {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := health.NewServer()
	s := rls.NewGRPCServer(svc, nil, hs, slog.New(slog.DiscardHandler))
	go s.Serve(l)
	t.Cleanup(s.Stop)
	servers.Store(t, s)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// servers holds each test's gRPC server, for stopGRPC.
var servers sync.Map

// stopGRPC stops the test's gRPC server gracefully: it returns once every
// call's handler has.
func stopGRPC(t testing.TB) {
	if s, ok := servers.Load(t); ok {
		s.(*grpc.Server).GracefulStop()
	}
}

func start(t *testing.T, endpoint string) *tracing.Tracing {
	t.Helper()
	tr, err := tracing.Start(context.Background(), tracing.Options{Endpoint: endpoint, ServiceName: "envoy-rls", ServiceVersion: "v0.0.0-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Shutdown(context.Background()) })
	return tr
}

func userRequest(user string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}}}}}
}

// call makes a ShouldRateLimit call with the given metadata.
func call(t *testing.T, conn *grpc.ClientConn, req *rlsv3.RateLimitRequest, md ...string) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(metadata.AppendToOutgoingContext(ctx, md...), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// flush sends every span ended so far.
func flush(t *testing.T, tr *tracing.Tracing) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// checkCall finds the call span of trace traceID and its store span, and
// checks their parents and attributes.
func checkCall(t *testing.T, spans []otlptest.Span, name, traceID, parentID, code string) {
	t.Helper()
	var callSpan *otlptest.Span
	for _, s := range otlptest.Named(spans, name) {
		if s.TraceID() == traceID {
			callSpan = &s
		}
	}
	if callSpan == nil {
		t.Fatalf("no %s span in trace %s:\n%s", name, traceID, otlptest.Describe(spans))
	}
	if callSpan.ParentID() != parentID || callSpan.Service != "envoy-rls" {
		t.Errorf("%s: parent %q, service %q; want the caller's span %s, envoy-rls", name, callSpan.ParentID(), callSpan.Service, parentID)
	}
	want := map[string]string{"rls.domain": "api", "rls.code": code, "rls.descriptors": "1"}
	for k, v := range want {
		if got, _ := callSpan.Attr(k); got != v {
			t.Errorf("%s: %s = %q, want %q", name, k, got, v)
		}
	}
	var store []otlptest.Span
	for _, s := range otlptest.Named(spans, "store.apply") {
		if s.TraceID() == traceID && s.ParentID() == callSpan.SpanID() {
			store = append(store, s)
		}
	}
	if len(store) != 1 {
		t.Fatalf("%d store.apply spans under %s, want 1:\n%s", len(store), name, otlptest.Describe(spans))
	}
	want = map[string]string{"rls.store": "memory", "rls.store.operation": "apply", "rls.buckets": "1"}
	for k, v := range want {
		if got, _ := store[0].Attr(k); got != v {
			t.Errorf("store span: %s = %q, want %q", k, got, v)
		}
	}
}

// TestSpansOverGRPC: a call carrying a W3C traceparent, one carrying
// Envoy's B3 headers (its Zipkin tracer) and one carrying none: each is a
// span, the first two children of the caller's, each with its store span;
// a caller that chose not to sample gets no span; health checks none.
func TestSpansOverGRPC(t *testing.T) {
	collector, addr := otlptest.StartGRPC(t)
	tr := start(t, addr)
	conn := serveGRPC(t, newService(t, tr))

	call(t, conn, userRequest("alice"), "traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	const b3Trace, b3Span = "463ac35c9f6413ad48485a3953bb6124", "a2fb4a1d1a96d312"
	call(t, conn, userRequest("alice"), "x-b3-traceid", b3Trace, "x-b3-spanid", b3Span, "x-b3-sampled", "1")
	call(t, conn, userRequest("bob"))
	const unsampled = "11111111111111111111111111111111"
	call(t, conn, userRequest("carol"), "traceparent", "00-"+unsampled+"-"+callerSpan+"-00")
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	// A call's span ends as its handler returns, which may come after the
	// caller has its answer: the server stops gracefully, which waits for
	// every handler, before the spans are flushed.
	conn.Close()
	stopGRPC(t)
	flush(t, tr)

	spans := collector.Wait(t, 10*time.Second, func(s []otlptest.Span) bool { return len(s) >= 6 })
	checkCall(t, spans, callSpanName, callerTrace, callerSpan, "OK")
	checkCall(t, spans, callSpanName, b3Trace, b3Span, "OVER_LIMIT")
	roots := 0
	for _, s := range otlptest.Named(spans, callSpanName) {
		if s.ParentID() == "" {
			roots++
			checkCall(t, spans, callSpanName, s.TraceID(), "", "OK")
		}
	}
	if roots != 1 {
		t.Errorf("%d calls without a caller traced as roots, want 1", roots)
	}
	if len(spans) != 6 {
		t.Errorf("%d spans, want 6: three calls and their store calls, none for the unsampled call or the health check:\n%s",
			len(spans), otlptest.Describe(spans))
	}
}

// TestSpansOverHTTP: OTLP over HTTP, and POST /json traced as a gRPC call
// is, from its traceparent header.
func TestSpansOverHTTP(t *testing.T) {
	collector, url := otlptest.StartHTTP(t)
	tr := start(t, url) // no path: /v1/traces
	svc := newService(t, tr)
	web := http.Handler(rls.HTTPHandler(svc, health.NewServer(), nil, true))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: web}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })

	req, _ := http.NewRequest("POST", "http://"+l.Addr().String()+"/json",
		strings.NewReader(`{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "dave"}]}]}`))
	req.Header.Set("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /json: %v %v", resp, err)
	}
	resp.Body.Close()
	flush(t, tr)
	spans := collector.Wait(t, 10*time.Second, func(s []otlptest.Span) bool { return len(s) >= 2 })
	checkCall(t, spans, "POST /json", callerTrace, callerSpan, "OK")
}

// TestOffTracesNothing: without Tracing, nothing is traced, even with a
// global tracer provider and propagator set and a traceparent sent: the
// service does not reach for OpenTelemetry's globals.
func TestOffTracesNothing(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	oldProvider, oldPropagator := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	defer func() { otel.SetTracerProvider(oldProvider); otel.SetTextMapPropagator(oldPropagator) }()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	otel.SetTextMapPropagator(propagation.TraceContext{})
	conn := serveGRPC(t, newService(t, nil))
	call(t, conn, userRequest("alice"), "traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	if n := len(rec.Ended()) + len(rec.Started()); n != 0 {
		t.Fatalf("%d spans with tracing off", n)
	}
}

func TestParseEndpoint(t *testing.T) {
	for _, c := range []struct{ in, protocol, address, err string }{
		{"collector:4317", "grpc", "collector:4317", ""},
		{"127.0.0.1:4317", "grpc", "127.0.0.1:4317", ""},
		{"[::1]:4317", "grpc", "[::1]:4317", ""},
		{"http://collector:4318", "http", "http://collector:4318/v1/traces", ""},
		{"https://otel.example.com/", "http", "https://otel.example.com/v1/traces", ""},
		{"http://collector:4318/custom/traces", "http", "http://collector:4318/custom/traces", ""},
		{"", "", "", "empty"},
		{"collector", "", "", `"collector" is neither host:port`},
		{":4317", "", "", `":4317" is neither host:port`},
		{"grpc://collector:4317", "", "", `"grpc://collector:4317" is neither host:port`},
		{"http://", "", "", `"http://" has no host`},
	} {
		ep, err := tracing.ParseEndpoint(c.in, "")
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: error %v, want one saying %q", c.in, err, c.err)
		case c.err == "" && (err != nil || string(ep.Protocol) != c.protocol || ep.Address != c.address):
			t.Errorf("%q: %+v %v, want %s %s", c.in, ep, err, c.protocol, c.address)
		}
	}
}

// BenchmarkCall is a ShouldRateLimit call over loopback gRPC with tracing
// off, and on with calls sampled (every one) or not (a caller that
// chose not to sample, as with OTEL_TRACES_SAMPLER's ratio on calls
// without a trace context): what tracing adds to a call.
func BenchmarkCall(b *testing.B) {
	for _, c := range []struct {
		name, traceparent string
		on                bool
	}{
		{"off", "", false},
		{"sampled", "00-" + callerTrace + "-" + callerSpan + "-01", true},
		{"unsampled", "00-" + callerTrace + "-" + callerSpan + "-00", true},
	} {
		b.Run(c.name, func(b *testing.B) {
			var tr *tracing.Tracing
			if c.on {
				_, addr := otlptest.StartGRPC(b)
				var err error
				if tr, err = tracing.Start(context.Background(), tracing.Options{Endpoint: addr}); err != nil {
					b.Fatal(err)
				}
				defer tr.Shutdown(context.Background())
			}
			conn := serveGRPC(b, newService(b, tr))
			client := rlsv3.NewRateLimitServiceClient(conn)
			ctx := context.Background()
			if c.traceparent != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", c.traceparent)
			}
			req := userRequest("bench")
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.ShouldRateLimit(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
