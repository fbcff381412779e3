// Command rls-bench drives any Envoy RLS v3 server
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) and reports
// throughput, latency percentiles and response codes; and emulates Envoys
// reporting to an RLQS server (envoy.service.rate_limit_quota.v3), whose
// work is per bucket report rather than per request.
//
//	rls-bench load [flags]          send requests and report
//	rls-bench rlqs [flags]          emulate Envoys reporting to an RLQS server and report its cost
//	rls-bench regions [flags]       run regions' exchanges on their Redis and report what they cost
//	rls-bench null [-listen ADDR]   serve RLS v3 answering OK at once: the gRPC ceiling
//	rls-bench otlp [-listen ADDR]   take OTLP traces over gRPC, count their spans, keep none
//	rls-bench plot -in TSV [-o SVG] draw req/s and p99 against concurrency
//	rls-bench bars -in TSV [-o SVG] draw req/s per workload and target as bars
//	rls-bench help                  print usage
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the run failed (e.g. every call failed)
	exitUsage = 2 // bad command line
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole command with its outside world passed in, so tests can
// run it in-process. SIGINT/SIGTERM cancel the context: load stops early and
// reports what it measured, null stops gracefully.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runContext(ctx, args, stdout, stderr)
}

func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stdout)
		return exitOK
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "load":
		return runLoad(ctx, args, stdout, stderr)
	case "rlqs":
		return runRLQS(ctx, args, stdout, stderr)
	case "regions":
		return runRegions(ctx, args, stdout, stderr)
	case "null":
		return runNull(ctx, args, stdout, stderr)
	case "otlp":
		return runOTLP(ctx, args, stdout, stderr)
	case "plot":
		return runPlot(args, stdout, stderr)
	case "bars":
		return runBars(args, stdout, stderr)
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	default:
		fmt.Fprintf(stderr, "rls-bench: unknown command %q\n\n", cmd)
		usage(stderr)
		return exitUsage
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  rls-bench load [flags]          drive an RLS v3 server and report req/s, latency and codes
  rls-bench rlqs [flags]          emulate Envoys reporting their RLQS buckets every interval; report
                                  bucket reports/s, answer latency and, with -pid and -redis, the cost
  rls-bench regions -redis URL,URL,URL [flags]
                                  run each region's exchange (package region) on its Redis, feeding
                                  every replica -buckets buckets an interval; report the exchanges' CPU
                                  on the service and on each Redis, their bytes and wall time
  rls-bench null [-listen ADDR]   serve RLS v3 answering OK at once, and RLQS answering every bucket
                                  with one token bucket at once (the gRPC-only ceilings)
  rls-bench otlp [-listen ADDR]   take OTLP traces over gRPC and count their spans (to measure tracing)
  rls-bench plot -in TSV [-o SVG] draw req/s and p99 against concurrency, from load runs (scripts/plot-concurrency.sh)
  rls-bench bars -in TSV [-o SVG] draw the median req/s of each target on each workload as bars (scripts/bench.sh's runs)
  rls-bench help                  print this text

Flags of load:
`)
	fs, _ := newLoadFlags(io.Discard)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprint(w, `
Flags of rlqs:
`)
	rfs, _ := newRLQSFlags(io.Discard)
	rfs.SetOutput(w)
	rfs.PrintDefaults()
	fmt.Fprint(w, `
Flags of regions:
`)
	gfs, _ := newRegionsFlags(io.Discard)
	gfs.SetOutput(w)
	gfs.PrintDefaults()
	fmt.Fprint(w, `
Flags of null:
`)
	nfs, _ := newNullFlags(io.Discard)
	nfs.SetOutput(w)
	nfs.PrintDefaults()
}
