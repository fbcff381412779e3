package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/envoy-rls/envoy-rls/internal/otlptest"
)

// TestTracing: served with -otlp-endpoint, a call carrying a traceparent
// is a span of the caller's trace, with its store call beneath, and the
// spans are sent by shutdown at the latest.
func TestTracing(t *testing.T) {
	collector, addr := otlptest.StartGRPC(t)
	s := startServe(t, "-config", "../../config", "-otlp-endpoint", addr)
	const trace, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+trace+"-"+parent+"-01")
	if _, err := s.client(t).ShouldRateLimit(ctx, rateRequest("api", "user=alice", "action=trade")); err != nil {
		t.Fatal(err)
	}
	s.cancel()
	if code := <-s.exit; code != exitOK {
		t.Fatalf("exit %d:\n%s", code, s.stderr)
	}
	s.exit <- exitOK // for the cleanup, which waits for it too

	spans := collector.Wait(t, 5*time.Second, func(spans []otlptest.Span) bool { return len(spans) >= 2 })
	calls := otlptest.Named(spans, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
	stores := otlptest.Named(spans, "store.apply")
	if len(calls) != 1 || calls[0].TraceID() != trace || calls[0].ParentID() != parent || calls[0].Service != "envoy-rls" ||
		len(stores) != 1 || stores[0].ParentID() != calls[0].SpanID() {
		t.Fatalf("want a call span of trace %s under %s, and its store span:\n%s", trace, parent, otlptest.Describe(spans))
	}
	if v, _ := calls[0].Attr("rls.code"); v != "OK" {
		t.Errorf("rls.code = %q, want OK", v)
	}
	// The start's log says where spans go, and how many.
	for _, want := range []string{"protocol=OTLP/grpc", "endpoint=" + addr, "service=envoy-rls", "sampling_ratio=1"} {
		if !strings.Contains(s.stderr.String(), want) {
			t.Errorf("no %s in the log:\n%s", want, s.stderr)
		}
	}
}
