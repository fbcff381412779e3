package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/region"
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
