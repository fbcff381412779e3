package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// The RLQS workload (rls-bench rlqs): N emulated Envoys, each on its own
// stream, report all of their M buckets every interval, as Envoy's
// rate_limit_quota filter does. RLQS work grows with buckets × instances
// per interval, not with requests: the figures are per bucket report and
// per report message, and per request governed (the requests the Envoys
// decided locally and reported).
//
// The Envoys here are lean (rlqsEnvoy), not internal/rlqsclient: that
// emulator decides each request on its own, under a lock, to replay
// Envoy's token buckets and timers exactly, so governing R requests per
// bucket report would take N × M × R calls per interval (a million a
// second at 50 × 200 × 100) on the CPUs the service is measured on. These
// send the same messages (every bucket, its counts since the last report,
// the whole seconds since then) from counts drawn per interval, and apply
// the assignments they are sent to those counts.

// rlqsConfig is the parsed and checked command line of rlqs.
type rlqsConfig struct {
	addr      string   // as given: host:port, or several, comma-separated
	addrs     []string // its addresses
	reopen    time.Duration
	instances int
	buckets   int
	interval  time.Duration
	duration  time.Duration
	warmup    time.Duration
	grace     time.Duration
	domain    string
	pattern   pattern
	disjoint  bool
	requests  float64 // mean requests per bucket report
	conns     int
	seed      uint64
	pid       int    // the service's process, for its CPU; 0: not measured
	redis     string // host:port of the Redis it uses, for its calls and CPU
	format    string
	profile   string
}

type rlqsFlags struct {
	cfg     rlqsConfig
	pattern string
}

func newRLQSFlags(stderr io.Writer) (*flag.FlagSet, *rlqsFlags) {
	f := &rlqsFlags{}
	fs := flag.NewFlagSet("rls-bench rlqs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &f.cfg
	fs.StringVar(&c.addr, "target", "127.0.0.1:8081", "server `host:port` serving RLQS (plaintext gRPC); several, comma-separated, are replicas an Envoy cluster spreads its Envoys over: Envoy i goes to the i-th first (modulo their number), and to the next that answers once that one is gone")
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8081", "the same as -target")
	fs.DurationVar(&c.reopen, "reopen", 0, "when a stream ends before the run, open a new one and report on it within this (at a random moment), as a fleet that reconnects at once; 0: at the Envoy's next report, as Envoy does")
	fs.IntVar(&c.instances, "instances", 50, "emulated Envoys, each with its own stream")
	fs.IntVar(&c.buckets, "buckets", 200, "buckets each Envoy reports in every report")
	fs.DurationVar(&c.interval, "interval", time.Second, "report interval of each Envoy (Envoy's own is 5s)")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long to measure, after the warmup")
	fs.DurationVar(&c.warmup, "warmup", 0, "report this long first without counting (default three intervals: a demand spans three reports)")
	fs.DurationVar(&c.grace, "grace", 5*time.Second, "after the run, how long to wait for the answers still due")
	fs.StringVar(&c.domain, "domain", "api", "the domain of the reports")
	fs.StringVar(&f.pattern, "bucket", defaultPattern, "BucketId `pattern` key=value,...; %d in a value is the bucket's index")
	fs.BoolVar(&c.disjoint, "disjoint", false, "give each Envoy buckets of its own (default: every Envoy reports the same M buckets, as a fleet behind one balancer sees the same users)")
	fs.Float64Var(&c.requests, "requests", 100, "requests each bucket report covers, on average (each draws from 0.5 to 1.5 times it)")
	fs.IntVar(&c.conns, "conns", 0, "gRPC connections; Envoy i uses connection i % conns (0: one per Envoy, as each Envoy has its own)")
	fs.Uint64Var(&c.seed, "seed", 1, "random seed of the counts, so runs repeat")
	fs.IntVar(&c.pid, "pid", 0, "the service's process id: report its CPU per bucket report, read from /proc (Linux)")
	fs.StringVar(&c.redis, "redis", "", "`host:port` of the service's Redis: report its commands per report message and its CPU per bucket report (INFO)")
	fs.StringVar(&c.format, "format", "text", "report format: text, json or tsv")
	fs.StringVar(&c.profile, "cpuprofile", "", "write a CPU profile of this tool to `file`")
	return fs, f
}

// parseRLQSArgs parses and checks the flags of rlqs.
func parseRLQSArgs(args []string, stderr io.Writer) (rlqsConfig, error) {
	fs, f := newRLQSFlags(stderr)
	if err := parseFlags(fs, args); err != nil {
		return rlqsConfig{}, err
	}
	c := f.cfg
	switch {
	case c.addr == "":
		return c, errors.New("-target must not be empty")
	case c.reopen < 0:
		return c, fmt.Errorf("-reopen must not be negative, got %v", c.reopen)
	case c.instances < 1:
		return c, fmt.Errorf("-instances must be at least 1, got %d", c.instances)
	case c.buckets < 1:
		return c, fmt.Errorf("-buckets must be at least 1, got %d", c.buckets)
	case c.interval < 10*time.Millisecond:
		return c, fmt.Errorf("-interval must be at least 10ms, got %v", c.interval)
	case c.duration <= 0:
		return c, fmt.Errorf("-duration must be positive, got %v", c.duration)
	case c.warmup < 0:
		return c, fmt.Errorf("-warmup must not be negative, got %v", c.warmup)
	case c.grace < 0:
		return c, fmt.Errorf("-grace must not be negative, got %v", c.grace)
	case !(c.requests >= 0) || math.IsInf(c.requests, 1):
		return c, fmt.Errorf("-requests must be a number at least 0, got %g", c.requests)
	case c.conns < 0:
		return c, fmt.Errorf("-conns must not be negative, got %d", c.conns)
	case c.pid < 0:
		return c, fmt.Errorf("-pid must not be negative, got %d", c.pid)
	case c.format != "text" && c.format != "json" && c.format != "tsv":
		return c, fmt.Errorf("-format must be text, json or tsv, got %q", c.format)
	}
	warmupSet := false
	fs.Visit(func(fl *flag.Flag) { warmupSet = warmupSet || fl.Name == "warmup" })
	if !warmupSet {
		c.warmup = 3 * c.interval
	}
	for _, a := range strings.Split(c.addr, ",") {
		if a = strings.TrimSpace(a); a == "" {
			return c, fmt.Errorf("-target %q: an empty address", c.addr)
		}
		c.addrs = append(c.addrs, a)
	}
	if c.conns == 0 || c.conns > c.instances {
		c.conns = c.instances
	}
	p, err := parsePattern(f.pattern)
	if err != nil {
		return c, fmt.Errorf("-bucket: %w", err)
	}
	seen := map[string]bool{}
	for _, e := range p.entries {
		if seen[e.key] {
			// A BucketId is a map: a key twice would be one pair.
			return c, fmt.Errorf("-bucket %q: key %q twice", f.pattern, e.key)
		}
		seen[e.key] = true
	}
	c.pattern = p
	return c, nil
}

func runRLQS(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseRLQSArgs(args, stderr)
	return runMeasured("rlqs", stdout, stderr, err, cfg.profile, func() (func(io.Writer) error, string, error) {
		res, err := rlqsLoad(ctx, cfg)
		if err != nil {
			return nil, "", err
		}
		failure := ""
		switch {
		case res.messages == 0:
			failure = "no report was sent while measuring"
		case res.answered == 0:
			failure = fmt.Sprintf("no report was answered; first error: %v", res.firstErr)
		}
		return func(w io.Writer) error { return writeRLQSReport(w, cfg, res) }, failure, nil
	})
}

// rlqsLoad runs the Envoys: a warmup, the measured span (between two
// readings of the CPU and Redis counters), then a grace for the answers
// due. Cancelling ctx ends the measured span early.
func rlqsLoad(ctx context.Context, cfg rlqsConfig) (*rlqsResult, error) {
	conns := make([]*grpc.ClientConn, cfg.conns)
	for i := range conns {
		conn, err := dialReplicas(cfg.addrs, i)
		if err != nil {
			return nil, fmt.Errorf("connect to %s: %w", cfg.addr, err)
		}
		defer conn.Close()
		conn.Connect()
		conns[i] = conn
	}
	// A counter that cannot be read fails the run before it starts.
	if _, err := readCounters(cfg); err != nil {
		return nil, err
	}

	var shared []bucketID
	if !cfg.disjoint {
		shared = bucketIDs(cfg.pattern, 0, cfg.buckets)
	}
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	start := time.Now()
	envoys := make([]*rlqsEnvoy, cfg.instances)
	done := make(chan struct{}, cfg.instances)
	for i := range envoys {
		ids := shared
		if ids == nil {
			ids = bucketIDs(cfg.pattern, i*cfg.buckets, cfg.buckets)
		}
		e := newRLQSEnvoy(cfg, i, ids, conns[i%len(conns)])
		envoys[i] = e
		// Envoys start at even steps of the interval, as a fleet's timers
		// fall: not all at once.
		first := start.Add(cfg.interval * time.Duration(i) / time.Duration(cfg.instances))
		go func() { e.run(runCtx, first); done <- struct{}{} }()
	}
	// finish ends the Envoys: no more reports, grace for the answers due,
	// then the streams end.
	finish := func(grace time.Duration) {
		for _, e := range envoys {
			e.stopTicking()
		}
		waitAnswers(envoys, grace)
		stop()
		for range envoys {
			<-done
		}
	}

	select {
	case <-time.After(cfg.warmup):
	case <-ctx.Done():
		finish(0)
		return nil, ctx.Err()
	}
	before, err := readCounters(cfg)
	if err != nil {
		finish(0)
		return nil, err
	}
	t0 := time.Now()
	for _, e := range envoys {
		e.measure(true)
	}
	select {
	case <-time.After(cfg.duration):
	case <-ctx.Done():
	}
	for _, e := range envoys {
		e.measure(false)
	}
	elapsed := time.Since(t0)
	after, err := readCounters(cfg)
	finish(cfg.grace)
	if err != nil {
		return nil, err
	}
	r := mergeRLQS(envoys, elapsed)
	r.usage = after.minus(before)
	return r, nil
}

// dialReplicas connects as an Envoy cluster of addrs does: to the i-th
// (modulo their number) first, and once it is gone to the next that
// answers (pick_first over them in that order).
func dialReplicas(addrs []string, i int) (*grpc.ClientConn, error) {
	if len(addrs) == 1 {
		return grpc.NewClient(addrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	r := manual.NewBuilderWithScheme("replicas")
	var state resolver.State
	for j := range addrs {
		state.Addresses = append(state.Addresses, resolver.Address{Addr: addrs[(i+j)%len(addrs)]})
	}
	r.InitialState(state)
	return grpc.NewClient(r.Scheme()+":///replicas", grpc.WithResolvers(r), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond,
			Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}, MinConnectTimeout: time.Second}))
}

// waitAnswers waits until every measured report has its answer, or grace
// has passed.
func waitAnswers(envoys []*rlqsEnvoy, grace time.Duration) {
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		due := 0
		for _, e := range envoys {
			due += e.pending()
		}
		if due == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
