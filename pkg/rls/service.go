package rls

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/leaky"
)

// Store keeps the buckets. Apply decides every bucket of one request
// atomically with the all-or-nothing rule of leaky.DecideAll: results[i] is
// the outcome for buckets[i]. now is the service's clock; a store with a
// clock of its own (Redis) may use that instead. An error means nothing was
// decided.
type Store interface {
	Apply(ctx context.Context, now time.Time, buckets []leaky.Bucket, results []leaky.Result) error
}

// Headers selects the response headers the service adds.
type Headers int

const (
	// LeakyHeaders adds X-RateLimit-Remaining and X-RateLimit-Clear, and on
	// OVER_LIMIT X-RateLimit-Reset and Retry-After.
	LeakyHeaders Headers = iota
	// NoHeaders adds none, for when Envoy makes its own from the statuses
	// (enable_x_ratelimit_headers).
	NoHeaders
)

// Options configure a Service.
type Options struct {
	// Store keeps the buckets; required.
	Store Store
	// Config is the loaded configuration; nil answers OK to everything
	// until SetConfig.
	Config *descriptors.Config
	// Clock reads the time once per request; default time.Now.
	Clock func() time.Time
	// Logger receives store errors (at most one a second) and, at debug
	// level, shadow limits that would have rejected; default slog.Default().
	Logger *slog.Logger
	// Headers selects the response headers; default LeakyHeaders.
	Headers Headers
}

// Service is the envoy.service.ratelimit.v3.RateLimitService. It is safe
// for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	store   Store
	config  atomic.Pointer[descriptors.Config]
	clock   func() time.Time
	log     *slog.Logger
	headers Headers
	errLog  throttle
	work    sync.Pool
}

// New returns a Service.
func New(opts Options) (*Service, error) {
	if opts.Store == nil {
		return nil, errors.New("rls: a store is required")
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Service{store: opts.Store, clock: opts.Clock, log: opts.Logger, headers: opts.Headers}
	s.work.New = func() any { return new(work) }
	if opts.Config != nil {
		s.SetConfig(opts.Config)
	}
	return s, nil
}

// SetConfig replaces the configuration. Calls in flight finish with the
// configuration they started with.
func (s *Service) SetConfig(c *descriptors.Config) { s.config.Store(c) }

// Config returns the configuration in force, or nil.
func (s *Service) Config() *descriptors.Config { return s.config.Load() }

// ShouldRateLimit decides a request: OK, or OVER_LIMIT if any descriptor is
// over a limit, with one status per descriptor and the response headers.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := s.decide(ctx, req)
	if err != nil {
		return nil, grpcStatus(err)
	}
	return resp, nil
}

// work is the scratch space of one request, reused across requests.
type work struct {
	entries  []descriptors.Entry
	levels   []descriptors.Level
	starts   []int // levels of descriptor i: levels[starts[i]:starts[i+1]]
	bucketOf []int // bucket index of each level
	buckets  []leaky.Bucket
	results  []leaky.Result
}

func (w *work) reset() {
	clear(w.levels) // drop references to keys and rules
	clear(w.buckets)
	w.entries, w.levels, w.starts = w.entries[:0], w.levels[:0], w.starts[:0]
	w.bucketOf, w.buckets, w.results = w.bucketOf[:0], w.buckets[:0], w.results[:0]
}

func (s *Service) decide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var domain *descriptors.Domain
	if cfg := s.config.Load(); cfg != nil {
		domain = cfg.Domain(req.GetDomain())
	}
	if domain == nil {
		return allOK(len(req.GetDescriptors())), nil
	}

	w := s.work.Get().(*work)
	defer func() { w.reset(); s.work.Put(w) }()
	w.starts = append(w.starts, 0)
	for _, d := range req.GetDescriptors() {
		var override *descriptors.Rule
		if o := d.GetLimit(); o != nil {
			override = overrideRule(o)
		}
		w.entries = entriesOf(d, w.entries[:0])
		first := len(w.levels)
		w.levels = domain.Resolve(w.entries, override, w.levels)
		hits := hitsOf(req, d)
		for _, l := range w.levels[first:] {
			w.bucketOf = append(w.bucketOf, w.addBucket(l, hits))
		}
		w.starts = append(w.starts, len(w.levels))
	}
	if len(w.buckets) == 0 {
		return allOK(len(req.GetDescriptors())), nil
	}

	w.results = slices.Grow(w.results, len(w.buckets))[:len(w.buckets)]
	if err := s.store.Apply(ctx, s.clock(), w.buckets, w.results); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s.errLog.do(func(suppressed int) {
			s.log.Error("rate-limit store failed", "err", err, "domain", req.GetDomain(), "suppressed", suppressed)
		})
		return nil, &storeError{err: err}
	}
	return s.respond(domain, w), nil
}

// addBucket returns the index of the level's bucket in w.buckets, adding
// it, or adding the hits to it when another descriptor of the request
// already uses it, so a bucket is charged once with all its hits.
func (w *work) addBucket(l descriptors.Level, hits int64) int {
	for i := range w.buckets {
		if w.buckets[i].Key == l.Key {
			w.buckets[i].Hits = addHits(w.buckets[i].Hits, hits)
			return i
		}
	}
	w.buckets = append(w.buckets, leaky.Bucket{Key: l.Key, Limit: l.Rule.Limit, Hits: hits, Shadow: l.Rule.Shadow})
	return len(w.buckets) - 1
}

// addHits adds without overflowing.
func addHits(a, b int64) int64 {
	switch {
	case b > 0 && a > math.MaxInt64-b:
		return math.MaxInt64
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}

// throttle runs a function at most once a second, telling it how many calls
// it skipped, so a failing store cannot flood the log.
type throttle struct {
	last       atomic.Int64 // Unix nanoseconds of the last run
	suppressed atomic.Int64
}

func (t *throttle) do(f func(suppressed int)) {
	now := time.Now().UnixNano()
	last := t.last.Load()
	if now-last < int64(time.Second) || !t.last.CompareAndSwap(last, now) {
		t.suppressed.Add(1)
		return
	}
	f(int(t.suppressed.Swap(0)))
}
