package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

const defaultPattern = "user=u%d,action=a%d"

// errReported marks errors the flag package has already printed, with the usage.
var errReported = errors.New("bad command line")

// loadConfig is the parsed and checked command line of load.
type loadConfig struct {
	addr       string
	workers    int
	conns      int
	duration   time.Duration
	total      int64 // -n; when > 0 it wins over duration
	warmup     time.Duration
	domain     string
	patterns   []pattern
	keys       int
	pick       keyPick
	seed       uint64
	hits       uint32
	timeout    time.Duration
	format     string
	cpuprofile string
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, " ") }
func (l *stringList) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// loadFlags holds the raw flag values until they are checked.
type loadFlags struct {
	cfg         loadConfig
	n           int64
	hits        uint64
	pick        string
	zipfS       float64
	descriptors stringList
}

func newLoadFlags(stderr io.Writer) (*flag.FlagSet, *loadFlags) {
	f := &loadFlags{}
	fs := flag.NewFlagSet("rls-bench load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &f.cfg
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8081", "server `host:port` (plaintext gRPC)")
	fs.IntVar(&c.workers, "c", 64, "concurrent workers, each with one call in flight")
	fs.IntVar(&c.conns, "conns", 4, "gRPC connections (distinct TCP connections); worker i uses connection i % conns")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long to measure, after the warmup")
	fs.Int64Var(&f.n, "n", 0, "total requests to measure; when set it wins over -duration")
	fs.DurationVar(&c.warmup, "warmup", time.Second, "send requests this long first without counting them")
	fs.StringVar(&c.domain, "domain", "api", "rate-limit domain of the requests")
	fs.Var(&f.descriptors, "descriptor", "descriptor `pattern` key=value,...; %d in a value is the key index;\nrepeat for several descriptors per request (default "+defaultPattern+")")
	fs.IntVar(&c.keys, "keys", 10000, "distinct key indexes, 0 to keys-1; each request picks one as -pick says")
	fs.StringVar(&f.pick, "pick", pickUniform, "how requests pick their key index: uniform (at random), turn (0, 1, ..., keys-1, 0, ...\nover all workers together: each key once per -keys requests) or zipf (Zipf-distributed, index 0 the hottest)")
	fs.Float64Var(&f.zipfS, "zipf-s", defaultZipfS, "exponent `s` of -pick zipf, greater than 1: key index k is picked in proportion to (1+k)^-s")
	fs.Uint64Var(&c.seed, "seed", 1, "random seed (with the worker number) so runs are repeatable")
	fs.Uint64Var(&f.hits, "hits", 0, "hits_addend of the requests (0: not set, i.e. 1)")
	fs.DurationVar(&c.timeout, "timeout", time.Second, "deadline of each call")
	fs.StringVar(&c.format, "format", "text", "report format: text, json or tsv")
	fs.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile of this tool to `file`")
	return fs, f
}

// parseLoadArgs parses and checks the flags of load.
func parseLoadArgs(args []string, stderr io.Writer) (loadConfig, error) {
	fs, f := newLoadFlags(stderr)
	if err := parseFlags(fs, args); err != nil {
		return loadConfig{}, err
	}
	c := f.cfg
	c.total = f.n
	switch {
	case c.addr == "":
		return c, errors.New("-addr must not be empty")
	case c.workers < 1:
		return c, fmt.Errorf("-c must be at least 1, got %d", c.workers)
	case c.conns < 1:
		return c, fmt.Errorf("-conns must be at least 1, got %d", c.conns)
	case f.n < 0:
		return c, fmt.Errorf("-n must not be negative, got %d", f.n)
	case f.n == 0 && c.duration <= 0:
		return c, fmt.Errorf("-duration must be positive, got %v", c.duration)
	case c.warmup < 0:
		return c, fmt.Errorf("-warmup must not be negative, got %v", c.warmup)
	case c.keys < 1:
		return c, fmt.Errorf("-keys must be at least 1, got %d", c.keys)
	case f.hits > math.MaxUint32:
		return c, fmt.Errorf("-hits must fit in 32 bits, got %d", f.hits)
	case c.timeout <= 0:
		return c, fmt.Errorf("-timeout must be positive, got %v", c.timeout)
	case c.format != "text" && c.format != "json" && c.format != "tsv":
		return c, fmt.Errorf("-format must be text, json or tsv, got %q", c.format)
	}
	c.hits = uint32(f.hits)
	zipfSet := false
	fs.Visit(func(fl *flag.Flag) { zipfSet = zipfSet || fl.Name == "zipf-s" })
	pick, err := parsePick(f.pick, f.zipfS, zipfSet)
	if err != nil {
		return c, err
	}
	c.pick = pick
	// More connections than workers would sit idle.
	c.conns = min(c.conns, c.workers)
	if len(f.descriptors) == 0 {
		f.descriptors = stringList{defaultPattern}
	}
	for _, s := range f.descriptors {
		p, err := parsePattern(s)
		if err != nil {
			return c, fmt.Errorf("-descriptor: %w", err)
		}
		c.patterns = append(c.patterns, p)
	}
	return c, nil
}

func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseLoadArgs(args, stderr)
	return runMeasured("load", stdout, stderr, err, cfg.cpuprofile, func() (func(io.Writer) error, string, error) {
		res, err := load(ctx, cfg)
		if err != nil {
			return nil, "", err
		}
		failure := ""
		switch {
		case res.requests == 0:
			failure = "no request was measured"
		case res.errorCount() == res.requests:
			failure = fmt.Sprintf("every call failed; first error: %v", res.firstErr)
		}
		return func(w io.Writer) error { return writeReport(w, cfg, res) }, failure, nil
	})
}

// parseFlags parses args into fs. -h gives flag.ErrHelp; a bad flag, which
// fs has printed with its usage, wraps errReported; an argument left over
// is an error still to print.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", errReported, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// usageExit is the exit code of a command line that parseFlags or a
// subcommand's checks refused (0 for -h), printing the error unless the
// flag set did.
func usageExit(stderr io.Writer, name string, err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if !errors.Is(err, errReported) {
		fmt.Fprintf(stderr, "rls-bench %s: %v\n", name, err)
	}
	return exitUsage
}

// runMeasured is what the measuring subcommands share: a bad command line
// exits 2, a CPU profile spans the measurement, and the report is written
// even when the run then counts as failed (failure not empty), so the
// figures that tell why are there.
func runMeasured(name string, stdout, stderr io.Writer, parseErr error, profile string,
	measure func() (report func(io.Writer) error, failure string, err error)) int {
	if parseErr != nil {
		return usageExit(stderr, name, parseErr)
	}
	if profile != "" {
		stop, err := startProfile(profile)
		if err != nil {
			fmt.Fprintf(stderr, "rls-bench %s: cpu profile: %v\n", name, err)
			return exitError
		}
		defer stop()
	}
	report, failure, err := measure()
	if err != nil {
		fmt.Fprintf(stderr, "rls-bench %s: %v\n", name, err)
		return exitError
	}
	if err := report(stdout); err != nil {
		fmt.Fprintf(stderr, "rls-bench %s: write report: %v\n", name, err)
		return exitError
	}
	if failure != "" {
		fmt.Fprintf(stderr, "rls-bench %s: %s\n", name, failure)
		return exitError
	}
	return exitOK
}

// Phases of a run, read by the workers before each call.
const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

// workerStats is what one worker measured; merged once at the end so the
// hot loop shares nothing but the phase, the -n ticket counter and, with
// -pick turn, the key counter.
type workerStats struct {
	latencies          []time.Duration
	sent               int64 // every call, warmup included
	ok, over, unknown  int64
	errs               map[codes.Code]int64
	firstErr           error
	firstErrAtUnixNano int64
}

// load runs the workers and returns what they measured. Cancelling ctx stops
// it early; calls in flight finish normally.
func load(ctx context.Context, cfg loadConfig) (*result, error) {
	// Built before the clock starts: with -keys 1000000 and the default
	// pattern, about half a second and 400 MB of heap.
	reqs := buildRequests(cfg.domain, cfg.patterns, cfg.keys, cfg.hits)
	cpuStart := cpuTime()

	// Each grpc.NewClient is its own ClientConn, hence its own TCP connection.
	clients := make([]rlsv3.RateLimitServiceClient, cfg.conns)
	for i := range clients {
		conn, err := grpc.NewClient(cfg.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("connect to %s: %w", cfg.addr, err)
		}
		defer conn.Close()
		conn.Connect() // dial now rather than on the first call
		clients[i] = rlsv3.NewRateLimitServiceClient(conn)
	}

	var phase atomic.Int32
	var tickets atomic.Int64 // -n mode: calls claimed while measuring
	var turn atomic.Uint64   // -pick turn: requests that have picked a key
	stats := make([]*workerStats, cfg.workers)
	var wg sync.WaitGroup
	start := time.Now()
	if cfg.warmup == 0 {
		phase.Store(phaseMeasure)
	}
	for w := range cfg.workers {
		st := &workerStats{errs: map[codes.Code]int64{}}
		if cfg.total > 0 {
			st.latencies = make([]time.Duration, 0, cfg.total/int64(cfg.workers)+1)
		}
		stats[w] = st
		// Seeded by -seed and the worker number: repeatable, distinct streams.
		pick := cfg.pick.picker(cfg.keys, rand.New(rand.NewPCG(cfg.seed, uint64(w))), &turn)
		client := clients[w%cfg.conns]
		wg.Go(func() {
			work(client, reqs, pick, cfg, &phase, &tickets, st)
		})
	}

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	if cfg.warmup > 0 {
		select {
		case <-time.After(cfg.warmup):
		case <-ctx.Done():
		case <-done:
		}
		start = time.Now()
		phase.CompareAndSwap(phaseWarmup, phaseMeasure)
	}
	var stopAfter <-chan time.Time
	if cfg.total == 0 {
		stopAfter = time.After(cfg.duration)
	}
	select {
	case <-stopAfter:
	case <-ctx.Done():
	case <-done:
	}
	phase.Store(phaseStop)
	<-done
	r := mergeStats(stats, time.Since(start))
	r.cpu = cpuTime() - cpuStart
	return r, nil
}

// work is one worker's loop: one call in flight at a time.
func work(client rlsv3.RateLimitServiceClient, reqs []*rlsv3.RateLimitRequest, pick func() int,
	cfg loadConfig, phase *atomic.Int32, tickets *atomic.Int64, st *workerStats) {
	for {
		p := phase.Load()
		if p == phaseStop {
			return
		}
		measured := p == phaseMeasure
		if measured && cfg.total > 0 && tickets.Add(1) > cfg.total {
			return
		}
		req := reqs[pick()]

		t0 := time.Now()
		// Background, not the run's ctx: stopping must not cancel calls in flight.
		callCtx, cancel := context.WithDeadline(context.Background(), t0.Add(cfg.timeout))
		resp, err := client.ShouldRateLimit(callCtx, req)
		lat := time.Since(t0)
		cancel()
		st.sent++

		if err != nil && st.firstErr == nil {
			st.firstErr, st.firstErrAtUnixNano = err, t0.UnixNano()
		}
		if !measured {
			continue
		}
		st.latencies = append(st.latencies, lat)
		switch {
		case err != nil:
			st.errs[status.Code(err)]++
		case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
			st.ok++
		case resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
			st.over++
		default:
			st.unknown++
		}
	}
}

// startProfile starts a CPU profile of this tool into path; stop ends it.
func startProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// cpuTime is the CPU time this process has used, user and system: what the
// load itself costs the machine it shares with the server.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
