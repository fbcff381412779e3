// Package otlptest is an OpenTelemetry collector for tests: it takes spans
// over OTLP, on gRPC or HTTP (protobuf), and keeps them for the test to
// look at.
package otlptest

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// Collector implements OTLP's TraceService and keeps every span it is sent.
type Collector struct {
	collectortracepb.UnimplementedTraceServiceServer

	mu       sync.Mutex
	spans    []Span
	requests []Request
}

// Span is a span received, with its resource and the resource's service
// name.
type Span struct {
	*tracepb.Span
	Service  string
	Resource *resourcepb.Resource
}

// Request is an export request received: its path (HTTP) or method
// (gRPC), and its headers (gRPC's metadata), keys in canonical form.
type Request struct {
	Path   string
	Header http.Header
}

// TraceID and SpanID and ParentID are the span's ids in hex, as W3C
// traceparent writes them.
func (s Span) TraceID() string  { return hex.EncodeToString(s.GetTraceId()) }
func (s Span) SpanID() string   { return hex.EncodeToString(s.GetSpanId()) }
func (s Span) ParentID() string { return hex.EncodeToString(s.GetParentSpanId()) }

// Attr returns the span attribute key as text, and whether it is there.
func (s Span) Attr(key string) (string, bool) {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return text(kv.GetValue()), true
		}
	}
	return "", false
}

// ResourceAttr returns the resource attribute key as text, and whether it
// is there.
func (s Span) ResourceAttr(key string) (string, bool) {
	for _, kv := range s.Resource.GetAttributes() {
		if kv.GetKey() == key {
			return text(kv.GetValue()), true
		}
	}
	return "", false
}

func text(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	}
	return v.String()
}

// Export implements the TraceService.
func (c *Collector) Export(ctx context.Context, req *collectortracepb.ExportTraceServiceRequest) (*collectortracepb.ExportTraceServiceResponse, error) {
	r := Request{Header: http.Header{}}
	r.Path, _ = grpc.Method(ctx)
	md, _ := metadata.FromIncomingContext(ctx)
	for k, vs := range md {
		for _, v := range vs {
			r.Header.Add(k, v)
		}
	}
	return c.export(r, req), nil
}

// export keeps a request's spans.
func (c *Collector) export(r Request, req *collectortracepb.ExportTraceServiceRequest) *collectortracepb.ExportTraceServiceResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests = append(c.requests, r)
	for _, rs := range req.GetResourceSpans() {
		var service string
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = text(kv.GetValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				c.spans = append(c.spans, Span{Span: sp, Service: service, Resource: rs.GetResource()})
			}
		}
	}
	return &collectortracepb.ExportTraceServiceResponse{}
}

// ServeHTTP takes OTLP over HTTP: a protobuf ExportTraceServiceRequest
// posted to any path.
func (c *Collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	req := &collectortracepb.ExportTraceServiceRequest{}
	if err == nil {
		err = proto.Unmarshal(body, req)
	}
	if err != nil || r.Method != http.MethodPost {
		http.Error(w, fmt.Sprintf("want a POST of an ExportTraceServiceRequest: %v", err), http.StatusBadRequest)
		return
	}
	out, _ := proto.Marshal(c.export(Request{Path: r.URL.Path, Header: r.Header.Clone()}, req))
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// StartGRPC returns a collector listening for OTLP over gRPC on a loopback
// port (with TLS if opts say so), and its host:port; it stops when the
// test ends.
func StartGRPC(t testing.TB, opts ...grpc.ServerOption) (*Collector, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &Collector{}
	s := grpc.NewServer(opts...)
	collectortracepb.RegisterTraceServiceServer(s, c)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return c, l.Addr().String()
}

// StartHTTP returns a collector listening for OTLP over HTTP on a loopback
// port, and its base URL; it stops when the test ends.
func StartHTTP(t testing.TB) (*Collector, string) {
	t.Helper()
	c := &Collector{}
	s := httptest.NewServer(c)
	t.Cleanup(s.Close)
	return c, s.URL
}

// Spans returns the spans received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Requests returns the export requests received so far.
func (c *Collector) Requests() []Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Request(nil), c.requests...)
}

// Wait returns the spans once ok accepts them, or fails the test after
// timeout with what it has.
func (c *Collector) Wait(t testing.TB, timeout time.Duration, ok func([]Span) bool) []Span {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		spans := c.Spans()
		if ok(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, the collector has %d spans:\n%s", timeout, len(spans), Describe(spans))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Describe lists spans one a line, for failure messages.
func Describe(spans []Span) string {
	var out []byte
	for _, s := range spans {
		out = fmt.Appendf(out, "  %s trace=%s span=%s parent=%s attrs=%v\n", s.GetName(), s.TraceID(), s.SpanID(), s.ParentID(), s.GetAttributes())
	}
	return string(out)
}

// Named returns the spans called name.
func Named(spans []Span, name string) []Span {
	var out []Span
	for _, s := range spans {
		if s.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}
