package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/envoy-rls/envoy-rls/internal/rawgrpc"
)

// nullServer answers OK at once: what is left of a request's cost is gRPC's.
// It serves RLQS too (nullrlqs.go).
type nullServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

// serviceGCPercent is the GOGC envoy-rls runs with unless GOGC is set
// (gcPercent in cmd/envoy-rls): the ceiling runs with it too, so that the
// two differ only in the service's own work.
const serviceGCPercent = 400

// okResponse is shared by all calls: gRPC only reads it to marshal it.
var okResponse = &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}

func (nullServer) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return okResponse, nil
}

type nullFlags struct {
	listen, debug string
}

func newNullFlags(stderr io.Writer) (*flag.FlagSet, *nullFlags) {
	fs := flag.NewFlagSet("rls-bench null", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := &nullFlags{}
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8081", "`address` to listen on (port 0 picks a free one)")
	fs.StringVar(&f.debug, "debug-listen", "", "`address` to serve /metrics (the Go runtime's, under envoy-rls's names) and /debug/pprof/ on, to compare the memory it holds with envoy-rls's; empty: none")
	return fs, f
}

// runNull serves until ctx is done, then stops gracefully.
func runNull(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, f := newNullFlags(stderr)
	if err := parseFlags(fs, args); err != nil {
		return usageExit(stderr, "null", err)
	}
	if f.debug != "" {
		dl, err := net.Listen("tcp", f.debug)
		if err != nil {
			fmt.Fprintf(stderr, "rls-bench null: %v\n", err)
			return exitError
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.Handler())
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		go http.Serve(dl, mux)
	}
	lis, err := net.Listen("tcp", f.listen)
	if err != nil {
		fmt.Fprintf(stderr, "rls-bench null: %v\n", err)
		return exitError
	}
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(serviceGCPercent)
	}
	srv := grpc.NewServer(rawgrpc.ServerOption())
	rlsv3.RegisterRateLimitServiceServer(srv, nullServer{})
	registerNullRLQS(srv)
	// Print the real address, so "-listen 127.0.0.1:0" is usable by scripts.
	fmt.Fprintf(stdout, "listening on %s\n", lis.Addr())

	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served:
		fmt.Fprintf(stderr, "rls-bench null: serve: %v\n", err)
		return exitError
	case <-ctx.Done():
		srv.GracefulStop()
		<-served
		return exitOK
	}
}
