package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/breaker"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/region"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// The regions workload (rls-bench regions): what the exchange between
// regions (package region, docs/regions.md) costs the service and each
// region's Redis when every region uses many buckets every interval.
//
// One process runs, for each region, its replicas' exchanges, each wired
// as envoy-rls wires it (region.New over region.RedisBoard of a Redis
// store opened as envoy-rls opens its own, and one per peer opened as
// -region-peers opens them), and feeds each replica -buckets buckets,
// every one once an interval, through the calls a request makes:
// Exchange.Asked, then the region's Store wrapper's Apply. Under the
// wrapper is a store that admits every bucket at once, not a Redis: a
// region deciding 100,000 requests a second on its Redis would take this
// machine's CPUs, and the decisions are not the exchange's cost. The
// wrapper still counts what each admitted, as it does in the service.
//
// The run feeds the buckets alone (the baseline: what the feeding costs a
// bucket; half before the exchanges run, half after), and with the
// exchanges running, and reads this process's CPU time over each, and
// each Redis's INFO over the second.
// What the process spends over what its feeding costs at the baseline's
// rate is the exchanges'. The exchanges run Exchange.Run's schedule with
// each Publish and Divide timed. After the span, every replica exchanges
// once more, in step (all publish, then all divide), and the claims each
// region then holds of each bucket are read: every bucket must be divided,
// its claims adding up to no more than its limit (or, where the regions
// hold more, as a store that admits everything lets them, than that).
//
// The process collects garbage as envoy-rls does (GOGC 400, and a memory
// limit of 768 MiB, three times the memory store's default bytes, for each
// replica it runs), unless GOGC or GOMEMLIMIT say otherwise.

// regionsConfig is the parsed and checked command line of regions.
type regionsConfig struct {
	urls     []string // a Redis per region
	addrs    []string // their host:port, for INFO
	regions  int
	replicas int
	buckets  int
	interval time.Duration
	silence  time.Duration
	duration time.Duration
	baseline time.Duration
	warmup   time.Duration
	prefix   string
	format   string
	profile  string
}

type regionsFlags struct {
	cfg  regionsConfig
	urls string
}

func newRegionsFlags(stderr io.Writer) (*flag.FlagSet, *regionsFlags) {
	f := &regionsFlags{}
	fs := flag.NewFlagSet("rls-bench regions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &f.cfg
	fs.StringVar(&f.urls, "redis", "", "each region's Redis, `URL,URL,...` (redis://host:port/db, single servers); the run writes the regions' reports there under -prefix")
	fs.IntVar(&c.regions, "regions", 0, "regions; 0: one for each -redis URL, as many as it must name")
	fs.IntVar(&c.replicas, "replicas", 1, "replicas of each region, each with its own exchange and its own connections, each fed every bucket")
	fs.IntVar(&c.buckets, "buckets", 100000, "buckets each replica uses every interval: the same in every region, each once an interval")
	fs.DurationVar(&c.interval, "interval", time.Second, "the exchanges' interval (-region-interval)")
	fs.DurationVar(&c.silence, "silence", time.Minute, "how long a region may be silent (-region-silence)")
	fs.DurationVar(&c.duration, "duration", 20*time.Second, "how long to measure the exchanges, in whole intervals, after the warmup")
	fs.DurationVar(&c.baseline, "baseline", 10*time.Second, "how long to measure the feeding alone, without the exchanges: half before them, half after")
	fs.DurationVar(&c.warmup, "warmup", 0, "how long the exchanges run before they are measured (default five intervals)")
	fs.StringVar(&c.prefix, "prefix", redis.DefaultPrefix, "the Redis key prefix (-redis-key-prefix)")
	fs.StringVar(&c.format, "format", "text", "report format: text or json")
	fs.StringVar(&c.profile, "cpuprofile", "", "write a CPU profile of the measured exchanges to `file`")
	return fs, f
}

// parseRegionsArgs parses and checks the flags of regions.
func parseRegionsArgs(args []string, stderr io.Writer) (regionsConfig, error) {
	fs, f := newRegionsFlags(stderr)
	if err := parseFlags(fs, args); err != nil {
		return regionsConfig{}, err
	}
	c := f.cfg
	for _, u := range splitComma(f.urls) {
		p, err := url.Parse(u)
		if err != nil || p.Scheme != "redis" || p.Host == "" {
			return c, fmt.Errorf("-redis: %q is not a redis://host:port URL", u)
		}
		host := p.Host
		if p.Port() == "" {
			host += ":6379"
		}
		c.urls, c.addrs = append(c.urls, u), append(c.addrs, host)
	}
	if c.regions == 0 {
		c.regions = len(c.urls)
	}
	switch {
	case len(c.urls) == 0:
		return c, errors.New("-redis must name each region's Redis")
	case c.regions < 2:
		return c, fmt.Errorf("-regions must be at least 2, got %d", c.regions)
	case len(c.urls) != c.regions:
		return c, fmt.Errorf("-redis names %d Redis for %d regions: one each", len(c.urls), c.regions)
	case c.replicas < 1:
		return c, fmt.Errorf("-replicas must be at least 1, got %d", c.replicas)
	case c.buckets < 1 || c.buckets > region.MaxReportBuckets:
		return c, fmt.Errorf("-buckets must be from 1 to %d (what a report holds), got %d", region.MaxReportBuckets, c.buckets)
	case c.interval < 10*time.Millisecond:
		return c, fmt.Errorf("-interval must be at least 10ms, got %v", c.interval)
	case c.silence < c.interval:
		return c, fmt.Errorf("-silence (%v) must be at least -interval (%v)", c.silence, c.interval)
	case c.duration < c.interval:
		return c, fmt.Errorf("-duration must be at least an interval, got %v", c.duration)
	case c.baseline <= 0:
		return c, fmt.Errorf("-baseline must be positive, got %v", c.baseline)
	case c.warmup < 0:
		return c, fmt.Errorf("-warmup must not be negative, got %v", c.warmup)
	case c.format != "text" && c.format != "json":
		return c, fmt.Errorf("-format must be text or json, got %q", c.format)
	}
	warmupSet := false
	fs.Visit(func(fl *flag.Flag) { warmupSet = warmupSet || fl.Name == "warmup" })
	if !warmupSet {
		c.warmup = 5 * c.interval
	}
	return c, nil
}

func splitComma(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func runRegions(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseRegionsArgs(args, stderr)
	return runMeasured("regions", stdout, stderr, err, "", func() (func(io.Writer) error, string, error) {
		res, err := regionsLoad(ctx, cfg, stderr)
		if err != nil {
			return nil, "", err
		}
		failure := ""
		switch {
		case res.failed > 0:
			failure = fmt.Sprintf("%d exchanges with a region's Redis failed while measuring", res.failed)
		case res.divided < int64(cfg.buckets)*int64(cfg.regions):
			failure = fmt.Sprintf("%d of the %d buckets' claims were divided", res.divided, int64(cfg.buckets)*int64(cfg.regions))
		case res.over > 0:
			failure = fmt.Sprintf("the regions' claims add up to more than the limit in %d buckets", res.over)
		}
		return func(w io.Writer) error { return writeRegionsReport(w, cfg, res) }, failure, nil
	})
}

// serviceMemoryLimit is the memory limit envoy-rls sets by default: three
// times -memory-max-bytes (cmd/envoy-rls/gc.go).
const serviceMemoryLimit = 3 * 256 << 20

// regionsLimit is every bucket's limit: 10 an interval, as many at once
// (the regions together are asked 6 an interval of each: 1, 2 and 3).
func regionsLimit(interval time.Duration) limit.Limit {
	return limit.Limit{Size: 10, DripRate: interval / 10, DripSize: 1}
}

// admitAll is a store that admits every bucket at once.
type admitAll struct{}

func (admitAll) Apply(_ context.Context, _ time.Time, buckets []limit.Bucket, results []limit.Result) error {
	for i := range buckets {
		results[i] = limit.Result{Admitted: true}
	}
	return nil
}

// countExchanges counts a replica's exchanges with the regions' stores.
type countExchanges struct{ ok, failed atomic.Int64 }

func (c *countExchanges) Exchanged(_ string, err error) {
	if err != nil {
		c.failed.Add(1)
	} else {
		c.ok.Add(1)
	}
}

// benchReplica is one replica of a region: its exchange, its store
// wrapper, its stores and what it measured.
type benchReplica struct {
	region    int
	x         *region.Exchange
	st        *region.Store
	stores    []*redis.Store
	exchanges countExchanges
	buckets   []limit.Bucket // what it is fed, once an interval each
	fed       atomic.Int64

	mu     sync.Mutex
	timing []exchangeTiming
}

// exchangeTiming is one interval's exchange of a replica: the wall time
// of its Publish and of its Divide.
type exchangeTiming struct {
	epoch            int64
	publish, divide  time.Duration
	published, ruled bool // each succeeded
}

// openReplica opens a replica of region i of names: its own Redis as
// envoy-rls opens -redis-url (the default flags), each peer's as
// -region-peers opens them, and its exchange as openRegions makes it.
func openReplica(cfg regionsConfig, names []string, i int, log *slog.Logger) (*benchReplica, error) {
	r := &benchReplica{region: i}
	own, err := redis.New(redis.Options{Mode: redis.ScriptMode, Logger: log, Prefix: cfg.prefix, Pipeline: redis.DefaultPipeline,
		Batch: redis.DefaultBatch, Breaker: redis.Breaker{Trip: breaker.DefaultTrip, Cool: breaker.DefaultCool},
		Connect: &redis.ClientOptions{URL: cfg.urls[i]}})
	if err != nil {
		return nil, fmt.Errorf("region %s: %w", names[i], err)
	}
	r.stores = append(r.stores, own)
	peers := map[string]region.Board{}
	for k, name := range names {
		if k == i {
			continue
		}
		st, err := redis.New(redis.Options{Connect: &redis.ClientOptions{URL: cfg.urls[k]}, Logger: log, Prefix: cfg.prefix})
		if err != nil {
			r.close()
			return nil, fmt.Errorf("region %s: peer %s: %w", names[i], name, err)
		}
		r.stores = append(r.stores, st)
		peers[name] = region.RedisBoard(st)
	}
	r.x, err = region.New(region.Options{Region: names[i], Regions: names, Own: region.RedisBoard(own), Peers: peers,
		Interval: cfg.interval, Silence: cfg.silence, Logger: log, Observer: &r.exchanges})
	if err != nil {
		r.close()
		return nil, err
	}
	r.st = r.x.Wrap(admitAll{})
	// Region i is asked i+1 hits of each bucket an interval: the regions'
	// demands differ, and so do their claims.
	r.buckets = make([]limit.Bucket, cfg.buckets)
	for b := range r.buckets {
		r.buckets[b] = limit.Bucket{Key: bucketKey(b), Limit: regionsLimit(cfg.interval), Hits: int64(i + 1)}
	}
	return r, nil
}

func bucketKey(b int) string { return fmt.Sprintf("api|user_u%d", b) }

func (r *benchReplica) close() {
	for _, s := range r.stores {
		s.Close()
	}
}

// feed calls Asked and Apply for each of its buckets in turn, a request
// each, spread evenly over each interval, until ctx ends.
func (r *benchReplica) feed(ctx context.Context, interval time.Duration) {
	const tick = 10 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	start := time.Now()
	req, res := make([]limit.Bucket, 1), make([]limit.Result, 1)
	var done int64
	next := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		due := int64(float64(len(r.buckets)) * float64(now.Sub(start)) / float64(interval))
		for ; done < due && ctx.Err() == nil; done++ {
			req[0] = r.buckets[next]
			r.x.Asked(req)
			_ = r.st.Apply(ctx, now, req, res)
			if next++; next == len(r.buckets) {
				next = 0
			}
		}
		r.fed.Store(done)
	}
}

// exchange runs Exchange.Run's schedule, timing each Publish and Divide,
// until it has divided epoch last (once last is set) or ctx ends.
func (r *benchReplica) exchange(ctx context.Context, iv time.Duration, last *atomic.Int64) {
	for {
		now := time.Now()
		next := time.Unix(0, (now.UnixNano()/int64(iv)+1)*int64(iv))
		if !sleepCtx(ctx, next.Sub(now)) {
			return
		}
		epoch := next.UnixNano() / int64(iv)
		t0 := time.Now()
		err := r.x.Publish(ctx, epoch-1, next)
		tm := exchangeTiming{epoch: epoch, publish: time.Since(t0), published: err == nil}
		if err == nil {
			if !sleepCtx(ctx, next.Add(iv/2).Sub(time.Now())) {
				return
			}
			t1 := time.Now()
			tm.ruled = r.x.Divide(ctx, epoch, t1) == nil
			tm.divide = time.Since(t1)
		}
		r.mu.Lock()
		r.timing = append(r.timing, tm)
		r.mu.Unlock()
		if l := last.Load(); l > 0 && epoch >= l {
			return
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// regionsResult is what a regions run measured.
type regionsResult struct {
	names []string
	// The baseline: the feeding alone.
	baseElapsed time.Duration
	baseCPU     time.Duration
	baseFed     int64
	// With the exchanges: intervals measured, the span, this process's
	// CPU, what was fed.
	intervals int
	elapsed   time.Duration
	cpu       time.Duration
	fed       int64
	redis     []costs // each region's Redis over the span
	// Each interval's exchange of each replica, in the span.
	publish, divide, both []time.Duration // sorted
	failed                int64           // exchanges with a store that failed in the span
	failedBefore          int64           // those that failed before, in the warmup
	exchanges             int64           // those that succeeded, the whole run
	// The claims at the end: buckets divided (over every region's first
	// replica), buckets whose regions' claims add up to more than the
	// limit, and each region's mean share and size.
	divided, over int64
	meanShare     []float64
	meanSize      []float64
	statuses      []region.Status // the first replica's view
	heap          uint64
}

// regionsLoad runs the replicas: the feeding alone for a warm-up and half
// the baseline, then the exchanges too for their warm-up and the measured
// span; then it stops the exchanges once every replica has divided the
// same interval, measures the other half of the baseline, exchanges once
// more in step and reads the claims.
func regionsLoad(ctx context.Context, cfg regionsConfig, stderr io.Writer) (*regionsResult, error) {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(serviceGCPercent)
	}
	if _, ok := os.LookupEnv("GOMEMLIMIT"); !ok {
		debug.SetMemoryLimit(int64(cfg.regions*cfg.replicas) * serviceMemoryLimit)
	}
	names := make([]string, cfg.regions)
	for i := range names {
		names[i] = fmt.Sprintf("r%d", i+1)
	}
	var reps []*benchReplica
	defer func() {
		for _, r := range reps {
			r.close()
		}
	}()
	for i := range cfg.regions {
		for range cfg.replicas {
			r, err := openReplica(cfg, names, i, log)
			if err != nil {
				return nil, err
			}
			reps = append(reps, r)
		}
	}
	for i, s := range reps[0].stores {
		if err := s.Check(ctx); err != nil {
			return nil, fmt.Errorf("a region's Redis (%d of %d) does not answer: %w", i+1, len(reps[0].stores), err)
		}
	}
	info := func() ([]redisInfo, error) {
		out := make([]redisInfo, len(cfg.addrs))
		for i, a := range cfg.addrs {
			text, err := fetchRedisInfo(a, 2*time.Second)
			if err == nil {
				out[i], err = parseRedisInfo(text)
			}
			if err != nil {
				return nil, fmt.Errorf("INFO of region %s's Redis (%s): %w", names[i], a, err)
			}
		}
		return out, nil
	}
	if _, err := info(); err != nil {
		return nil, err
	}
	fed := func() int64 {
		var n int64
		for _, r := range reps {
			n += r.fed.Load()
		}
		return n
	}

	feedCtx, stopFeeding := context.WithCancel(context.Background())
	var feeding sync.WaitGroup
	defer func() { stopFeeding(); feeding.Wait() }()
	for _, r := range reps {
		feeding.Go(func() { r.feed(feedCtx, cfg.interval) })
	}
	res := &regionsResult{names: names}
	// Every bucket in every replica's table before the baseline.
	if !sleepCtx(ctx, 2*cfg.interval) {
		return nil, ctx.Err()
	}
	// The baseline, half before the exchanges and half after: the
	// machine's other work, which may change meanwhile, weighs on both
	// sides of the span alike.
	baseline := func() bool {
		c0, f0, t0 := cpuTime(), fed(), time.Now()
		ok := sleepCtx(ctx, cfg.baseline/2)
		res.baseCPU += cpuTime() - c0
		res.baseFed += fed() - f0
		res.baseElapsed += time.Since(t0)
		return ok
	}
	if !baseline() {
		return nil, ctx.Err()
	}

	xctx, stopExchanges := context.WithCancel(context.Background())
	defer stopExchanges()
	var last atomic.Int64
	var exchanging sync.WaitGroup
	for _, r := range reps {
		exchanging.Go(func() { r.exchange(xctx, cfg.interval, &last) })
	}
	if !sleepCtx(ctx, cfg.warmup) {
		return nil, ctx.Err()
	}
	// The span is whole intervals, from a little before an interval's
	// start (its Publish) to a little before another's: each interval's
	// Publish and Divide in it once.
	iv := cfg.interval
	n := max(int(cfg.duration/iv), 1)
	first := (time.Now().UnixNano()/int64(iv) + 1) // the first epoch measured
	start := time.Unix(0, first*int64(iv)).Add(-iv / 20)
	if !sleepCtx(ctx, time.Until(start)) {
		return nil, ctx.Err()
	}
	before, err := info()
	if err != nil {
		return nil, err
	}
	stopProfile := func() {}
	if cfg.profile != "" {
		if stopProfile, err = startProfile(cfg.profile); err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
	}
	failed := func() (n int64) {
		for _, r := range reps {
			n += r.exchanges.failed.Load()
		}
		return n
	}
	x1 := failed()
	c1, f1, t1 := cpuTime(), fed(), time.Now()
	end := start.Add(time.Duration(n) * iv)
	sleepCtx(ctx, time.Until(end)) // cancelled: the span is cut short
	res.cpu, res.fed, res.elapsed = cpuTime()-c1, fed()-f1, time.Since(t1)
	stopProfile()
	res.failed, res.failedBefore = failed()-x1, x1
	res.intervals = int(min(int64(n), int64(res.elapsed/iv)+1))
	after, err := info()
	if err != nil {
		return nil, err
	}
	for i := range after {
		res.redis = append(res.redis, reading{redis: after[i], hasRedis: true}.minus(reading{redis: before[i], hasRedis: true}))
	}
	// Every replica divides the next interval and stops, then exchanges
	// once more, all in step (the interval under way), and the claims are
	// read. The feeding goes on alone for the baseline's second half.
	last.Store(time.Now().UnixNano()/int64(iv) + 1)
	exchanging.Wait()
	final := time.Unix(0, (time.Now().UnixNano()/int64(iv)+1)*int64(iv))
	epoch := final.UnixNano() / int64(iv)
	for _, r := range reps {
		if err := r.x.Publish(ctx, epoch-1, final); err != nil {
			return nil, fmt.Errorf("the last exchange, in step: %w", err)
		}
	}
	for _, r := range reps {
		if err := r.x.Divide(ctx, epoch, final.Add(iv/2)); err != nil {
			return nil, fmt.Errorf("the last exchange, in step: %w", err)
		}
	}
	res.checkClaims(cfg, reps)
	res.statuses = reps[0].x.Statuses()
	if !baseline() {
		return nil, ctx.Err()
	}
	stopFeeding()
	feeding.Wait()

	lastMeasured := first + int64(res.intervals) - 1
	for _, r := range reps {
		res.exchanges += r.exchanges.ok.Load()
		for _, tm := range r.timing {
			if tm.epoch < first || tm.epoch > lastMeasured || !tm.published || !tm.ruled {
				continue
			}
			res.publish = append(res.publish, tm.publish)
			res.divide = append(res.divide, tm.divide)
			res.both = append(res.both, tm.publish+tm.divide)
		}
	}
	slices.Sort(res.publish)
	slices.Sort(res.divide)
	slices.Sort(res.both)
	res.heap = heapInUse()
	return res, nil
}

// checkClaims reads each bucket's claims in every region (its first
// replica's): divided, and adding up to no more than the limit.
func (res *regionsResult) checkClaims(cfg regionsConfig, reps []*benchReplica) {
	firsts := make([]*region.Exchange, cfg.regions)
	for _, r := range reps {
		if firsts[r.region] == nil {
			firsts[r.region] = r.x
		}
	}
	l := regionsLimit(cfg.interval)
	res.meanShare, res.meanSize = make([]float64, cfg.regions), make([]float64, cfg.regions)
	for b := range cfg.buckets {
		key := bucketKey(b)
		size, share, held := 0.0, 0.0, 0.0
		for i, x := range firsts {
			v := x.Bucket(key, l)
			if v.Divided {
				res.divided++
			}
			size += v.Size
			share += v.Share
			res.meanShare[i] += v.Share / float64(cfg.buckets)
			res.meanSize[i] += v.Size / float64(cfg.buckets)
			if i == 0 {
				for _, p := range v.Parts {
					held += p.Usage + p.Demand*cfg.interval.Seconds()/2
				}
			}
		}
		// Their sizes add up to no more than the limit's, or than what the
		// regions hold (the store under them admits everything): what they
		// count, and what they may admit until the claims take over (their
		// demand over half an interval, at most).
		if size > max(float64(l.Size), held)+1e-9 || share > 1+1e-9 {
			res.over++
		}
	}
}

// regionsJSON is the report's JSON; the text report says the same.
type regionsJSON struct {
	Regions            int     `json:"regions"`
	Replicas           int     `json:"replicas"`
	Buckets            int     `json:"buckets"`
	IntervalS          float64 `json:"interval_s"`
	Intervals          int     `json:"intervals"`
	Seconds            float64 `json:"seconds"`
	BaselineSeconds    float64 `json:"baseline_seconds"`
	BaselineFedPerS    float64 `json:"baseline_fed_per_s"`
	BaselineCores      float64 `json:"baseline_cores"`
	FeedNsPerBucket    float64 `json:"feed_ns_per_bucket"`
	FedPerS            float64 `json:"fed_per_s"`
	ProcessCores       float64 `json:"process_cores"`
	ExchangeCores      float64 `json:"exchange_cores"`
	RegionCores        float64 `json:"exchange_cores_per_region"`
	ReportBytes        int64   `json:"report_bytes"`
	PublishP50ms       float64 `json:"publish_p50_ms"`
	PublishP99ms       float64 `json:"publish_p99_ms"`
	DivideP50ms        float64 `json:"divide_p50_ms"`
	DivideP99ms        float64 `json:"divide_p99_ms"`
	ExchangeP50ms      float64 `json:"exchange_p50_ms"`
	ExchangeP99ms      float64 `json:"exchange_p99_ms"`
	ExchangeMaxMs      float64 `json:"exchange_max_ms"`
	Redis              []redisJSON
	ExchangesOK        int64     `json:"exchanges_ok"`
	ExchangesFailed    int64     `json:"exchanges_failed"`
	FailedInWarmup     int64     `json:"exchanges_failed_in_warmup"`
	Divided            int64     `json:"buckets_divided"`
	OverLimit          int64     `json:"buckets_over_limit"`
	MeanShare          []float64 `json:"mean_share"`
	MeanSize           []float64 `json:"mean_size"`
	HeapMiB            float64   `json:"heap_mib"`
	ReportedBuckets    []int     `json:"reported_buckets"`
	ReportedDemandPerS []float64 `json:"reported_demand_per_s"`
}

type redisJSON struct {
	Region            string  `json:"region"`
	Cores             float64 `json:"cores"`
	CallsPerInterval  float64 `json:"script_calls_per_interval"`
	InBytesPerInterv  float64 `json:"in_bytes_per_interval"`
	OutBytesPerInterv float64 `json:"out_bytes_per_interval"`
}

func (res *regionsResult) report(cfg regionsConfig) regionsJSON {
	secs := res.elapsed.Seconds()
	feedPer := per(float64(res.baseCPU), float64(res.baseFed)) // ns a bucket fed
	exchange := float64(res.cpu) - feedPer*float64(res.fed)    // ns
	intervals := float64(res.intervals)
	j := regionsJSON{
		Regions: cfg.regions, Replicas: cfg.replicas, Buckets: cfg.buckets, IntervalS: cfg.interval.Seconds(),
		Intervals: res.intervals, Seconds: secs,
		BaselineSeconds: res.baseElapsed.Seconds(), BaselineFedPerS: per(float64(res.baseFed), res.baseElapsed.Seconds()),
		BaselineCores: per(res.baseCPU.Seconds(), res.baseElapsed.Seconds()), FeedNsPerBucket: feedPer,
		FedPerS: per(float64(res.fed), secs), ProcessCores: per(res.cpu.Seconds(), secs),
		ExchangeCores: per(exchange/1e9, secs), RegionCores: per(exchange/1e9, secs) / float64(cfg.regions),
		ReportBytes:  9 + 40*int64(cfg.buckets),
		PublishP50ms: millis(percentile(res.publish, 5000)), PublishP99ms: millis(percentile(res.publish, 9900)),
		DivideP50ms: millis(percentile(res.divide, 5000)), DivideP99ms: millis(percentile(res.divide, 9900)),
		ExchangeP50ms: millis(percentile(res.both, 5000)), ExchangeP99ms: millis(percentile(res.both, 9900)),
		ExchangeMaxMs: millis(maxOf(res.both)),
		ExchangesOK:   res.exchanges, ExchangesFailed: res.failed, FailedInWarmup: res.failedBefore, Divided: res.divided, OverLimit: res.over,
		MeanShare: res.meanShare, MeanSize: res.meanSize, HeapMiB: float64(res.heap) / (1 << 20),
	}
	for i, c := range res.redis {
		var calls int64
		for name, n := range c.redisCalls {
			if slices.Contains(scriptCommands, name) {
				calls += n
			}
		}
		j.Redis = append(j.Redis, redisJSON{Region: res.names[i], Cores: per(c.redisCPU.Seconds(), secs),
			CallsPerInterval: per(float64(calls), intervals), InBytesPerInterv: per(float64(c.redisNetIn), intervals),
			OutBytesPerInterv: per(float64(c.redisNetOut), intervals)})
	}
	for _, s := range res.statuses {
		j.ReportedBuckets = append(j.ReportedBuckets, s.Buckets)
		j.ReportedDemandPerS = append(j.ReportedDemandPerS, s.Demand)
	}
	return j
}

func writeRegionsReport(w io.Writer, cfg regionsConfig, res *regionsResult) error {
	j := res.report(cfg)
	if cfg.format == "json" {
		return json.NewEncoder(w).Encode(j)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	mb := func(b float64) string { return fmt.Sprintf("%.1f MB", b/1e6) }
	fmt.Fprintf(tw, "regions\t%d regions × %d replicas, each replica using %d buckets every %v (region i asked i hits of each), limit %s\n",
		j.Regions, j.Replicas, j.Buckets, cfg.interval, regionsLimit(cfg.interval))
	fmt.Fprintf(tw, "baseline\tfeeding alone %.0f buckets/s for %.1fs: %.3f cores, %.0f ns a bucket (Asked and the store wrapper's Apply)\n",
		j.BaselineFedPerS, j.BaselineSeconds, j.BaselineCores, j.FeedNsPerBucket)
	fmt.Fprintf(tw, "exchanging\tfeeding %.0f buckets/s for %d intervals (%.1fs): process %.3f cores\n", j.FedPerS, j.Intervals, j.Seconds, j.ProcessCores)
	fmt.Fprintf(tw, "service\tthe exchanges %.3f cores, %.3f cores a region (%d replicas)\n", j.ExchangeCores, j.RegionCores, j.Replicas)
	fmt.Fprintf(tw, "wall\ta replica's exchange an interval: publish p50 %s p99 %s; divide p50 %s p99 %s; both p50 %s p99 %s max %s\n",
		fmtMs(j.PublishP50ms), fmtMs(j.PublishP99ms), fmtMs(j.DivideP50ms), fmtMs(j.DivideP99ms), fmtMs(j.ExchangeP50ms), fmtMs(j.ExchangeP99ms), fmtMs(j.ExchangeMaxMs))
	fmt.Fprintf(tw, "report\t%s a replica's report (%d bytes)\n", mb(float64(j.ReportBytes)), j.ReportBytes)
	for _, r := range j.Redis {
		fmt.Fprintf(tw, "Redis %s\tCPU %.3f cores; an interval: %.1f script calls, %s in, %s out\n", r.Region, r.Cores, r.CallsPerInterval,
			mb(r.InBytesPerInterv), mb(r.OutBytesPerInterv))
	}
	var shares []string
	for i, s := range j.MeanShare {
		shares = append(shares, fmt.Sprintf("%s %.3f (size %.2f)", res.names[i], s, j.MeanSize[i]))
	}
	fmt.Fprintf(tw, "claims\tafter a last exchange in step: %d of %d buckets divided over the regions, %d adding up to more than the limit (or what the regions hold); mean share %s\n",
		j.Divided, int64(j.Buckets)*int64(j.Regions), j.OverLimit, strings.Join(shares, ", "))
	var seen []string
	for i, s := range res.statuses {
		seen = append(seen, fmt.Sprintf("%s %s %d buckets %.0f/s", s.Region, s.State, j.ReportedBuckets[i], j.ReportedDemandPerS[i]))
	}
	fmt.Fprintf(tw, "last division\t(r1's first replica) %s\n", strings.Join(seen, "; "))
	fmt.Fprintf(tw, "exchanges\t%d with a region's Redis; %d failed while measuring, %d in the warmup; heap in use %.0f MiB at the end\n",
		j.ExchangesOK, j.ExchangesFailed, j.FailedInWarmup, j.HeapMiB)
	return tw.Flush()
}

// heapInUse is the bytes of heap spans in use.
func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func fmtMs(ms float64) string { return fmtDuration(time.Duration(ms * 1e6)) }
