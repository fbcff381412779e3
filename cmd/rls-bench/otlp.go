package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"sync/atomic"

	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// spanSink is an OpenTelemetry collector that counts the spans it is sent
// and keeps none: a collector that costs the service nothing but the
// sending, to measure what tracing costs.
type spanSink struct {
	collectortracepb.UnimplementedTraceServiceServer
	spans atomic.Int64
}

var exportOK = &collectortracepb.ExportTraceServiceResponse{}

func (s *spanSink) Export(_ context.Context, req *collectortracepb.ExportTraceServiceRequest) (*collectortracepb.ExportTraceServiceResponse, error) {
	var n int64
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += int64(len(ss.GetSpans()))
		}
	}
	s.spans.Add(n)
	return exportOK, nil
}

// runOTLP takes OTLP over gRPC until ctx is done, then prints how many
// spans it received.
func runOTLP(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rls-bench otlp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:4317", "`address` to listen on (port 0 picks a free one)")
	if err := parseFlags(fs, args); err != nil {
		return usageExit(stderr, "otlp", err)
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "rls-bench otlp: %v\n", err)
		return exitError
	}
	sink := &spanSink{}
	srv := grpc.NewServer()
	collectortracepb.RegisterTraceServiceServer(srv, sink)
	fmt.Fprintf(stdout, "listening on %s\n", lis.Addr())

	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served:
		fmt.Fprintf(stderr, "rls-bench otlp: serve: %v\n", err)
		return exitError
	case <-ctx.Done():
		srv.GracefulStop()
		<-served
		fmt.Fprintf(stdout, "received %d spans\n", sink.spans.Load())
		return exitOK
	}
}
