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
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/leaky"
)

// Store keeps the buckets. Apply decides every bucket of one request
// atomically with the all-or-nothing rule of leaky.DecideAll: results[i] is
// the outcome for buckets[i]. now is the service's clock; a store with a
// clock of its own (Redis) may use that instead. An error means nothing was
// decided. The keys of one call are distinct, and there are never more
// than MaxDescriptors × MaxEntries of them (caps.buckets): a request that
// would reach more is refused before the store is asked.
type Store interface {
	Apply(ctx context.Context, now time.Time, buckets []leaky.Bucket, results []leaky.Result) error
}

// Headers selects the response headers the service adds.
type Headers int

const (
	// LeakyHeaders adds X-RateLimit-Remaining and X-RateLimit-Clear, and on
	// OVER_LIMIT X-RateLimit-Reset and Retry-After.
	LeakyHeaders Headers = iota
	// NoHeaders adds none.
	NoHeaders
	// EnvoyHeaders adds only what Envoy's enable_x_ratelimit_headers
	// (DRAFT_VERSION_03) does not make from the statuses: X-RateLimit-Clear,
	// and Retry-After on OVER_LIMIT.
	EnvoyHeaders
)

// FailureMode says how the service answers while the store fails.
type FailureMode int

const (
	// FailUnavailable answers gRPC Unavailable, so that Envoy's
	// failure_mode_deny decides.
	FailUnavailable FailureMode = iota
	// FailAllow answers OK: every request passes while the store fails.
	FailAllow
	// FailDeny answers OVER_LIMIT for every descriptor that has a limit.
	FailDeny
)

// String returns the mode's flag value.
func (m FailureMode) String() string {
	switch m {
	case FailAllow:
		return "allow"
	case FailDeny:
		return "deny"
	}
	return "unavailable"
}

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
	// Observer receives what metrics count; default none.
	Observer Observer
	// FailureMode says how to answer while the store fails; default
	// FailUnavailable.
	FailureMode FailureMode
	// StoreTimeout caps every store call, which also ends DeadlineMargin
	// before the call's own deadline, so that the failure mode still
	// answers in time when the store hangs; 0 for neither, for stores that
	// never wait (memory) or that keep their own time (the local fallback,
	// which splits the time left between Redis and its local decision).
	StoreTimeout time.Duration
	// DeadlineMargin is the time kept back from a call's remaining time,
	// when StoreTimeout is set, for answering by the failure mode after the
	// store call ends; 0 means the default: a quarter of the time left,
	// at least 1 ms and at most 10 ms (5 ms of Envoy's 20).
	DeadlineMargin time.Duration
	// Shadow puts every limit in shadow mode: decided, charged and counted,
	// but never rejecting.
	Shadow bool
	// OverLimitCacheSize bounds the local over-limit cache, which rejects
	// calls for buckets the store found over their limit, until they have
	// room, without asking the store; 0 turns it off.
	OverLimitCacheSize int
	// OverLimitCacheBytes bounds the cache's memory too, counting each
	// entry's key and overhead; 0 for no bound beyond OverLimitCacheSize.
	OverLimitCacheBytes int64
	// MaxDescriptors, MaxEntries (per descriptor) and MaxEntryBytes (per
	// key or value, and the domain) cap a request: a larger one is
	// InvalidArgument, before any work. 0 means the Default* cap.
	MaxDescriptors, MaxEntries, MaxEntryBytes int
}

// Service is the envoy.service.ratelimit.v3.RateLimitService. It is safe
// for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	store        Store
	config       atomic.Pointer[generation]
	caps         caps
	cacheSize    int
	cacheBytes   int64
	clock        func() time.Time
	log          *slog.Logger
	headers      Headers
	observer     Observer
	failureMode  FailureMode
	storeTimeout time.Duration
	margin       time.Duration // 0: deadlineMargin's default
	shadow       bool
	errLog       throttle
	work         sync.Pool
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
	if opts.Observer == nil {
		opts.Observer = noObserver{}
	}
	if opts.StoreTimeout < 0 || opts.DeadlineMargin < 0 || opts.OverLimitCacheSize < 0 || opts.OverLimitCacheBytes < 0 {
		return nil, errors.New("rls: the store timeout, the deadline margin and the cache bounds cannot be negative")
	}
	if opts.MaxDescriptors < 0 || opts.MaxEntries < 0 || opts.MaxEntryBytes < 0 {
		return nil, errors.New("rls: the request caps cannot be negative")
	}
	s := &Service{
		store: opts.Store, clock: opts.Clock, log: opts.Logger, headers: opts.Headers, observer: opts.Observer,
		failureMode: opts.FailureMode, storeTimeout: opts.StoreTimeout, margin: opts.DeadlineMargin, shadow: opts.Shadow,
		cacheSize: opts.OverLimitCacheSize, cacheBytes: opts.OverLimitCacheBytes,
		caps: newCaps(opts.MaxDescriptors, opts.MaxEntries, opts.MaxEntryBytes),
	}
	s.work.New = func() any { return new(work) }
	if opts.Config != nil {
		s.SetConfig(opts.Config)
	}
	return s, nil
}

// generation is a configuration and the over-limit cache of the answers
// given under it: a new configuration starts a new cache, since its limits
// may be larger, and calls still in flight under the old one fill the old.
type generation struct {
	config *descriptors.Config
	cache  *overLimitCache // nil when off
}

// SetConfig replaces the configuration. Calls in flight finish with the
// configuration they started with.
func (s *Service) SetConfig(c *descriptors.Config) {
	g := &generation{config: c}
	if s.cacheSize > 0 {
		g.cache = newOverLimitCache(s.cacheSize, s.cacheBytes)
	}
	s.config.Store(g)
}

// Config returns the configuration in force, or nil.
func (s *Service) Config() *descriptors.Config {
	if g := s.config.Load(); g != nil {
		return g.config
	}
	return nil
}

// ShouldRateLimit decides a request: OK, or OVER_LIMIT if any descriptor is
// over a limit, with one status per descriptor and the response headers.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, domain, err := s.decide(ctx, req)
	if err != nil {
		err = grpcStatus(err)
		s.observer.Call(domain, status.Code(err).String())
		return nil, err
	}
	s.observer.Call(domain, codeName(resp.GetOverallCode()))
	return resp, nil
}

// codeName is c.String() without protobuf's reflection, for every call.
func codeName(c rlsv3.RateLimitResponse_Code) string {
	switch c {
	case rlsv3.RateLimitResponse_OK:
		return "OK"
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		return "OVER_LIMIT"
	}
	return c.String()
}

// work is the scratch space of one request, reused across requests.
type work struct {
	entries  []descriptors.Entry
	levels   []descriptors.Level
	starts   []int // levels of descriptor i: levels[starts[i]:starts[i+1]]
	bucketOf []int // bucket index of each level
	buckets  []leaky.Bucket
	results  []leaky.Result
	skipped  []bool         // buckets not decided: the cache rejected the request first
	index    map[string]int // bucket of each key, once there are more than scanBuckets
}

// scanBuckets is how many buckets addBucket searches one by one; beyond, a
// map keeps the work per request linear in its size.
const scanBuckets = 8

func (w *work) reset() {
	clear(w.levels) // drop references to keys and rules
	clear(w.buckets)
	w.entries, w.levels, w.starts = w.entries[:0], w.levels[:0], w.starts[:0]
	w.bucketOf, w.buckets, w.results, w.skipped = w.bucketOf[:0], w.buckets[:0], w.results[:0], w.skipped[:0]
	clear(w.index)
}

// decide answers a request; domain is its domain if the config has it.
func (s *Service) decide(ctx context.Context, req *rlsv3.RateLimitRequest) (resp *rlsv3.RateLimitResponse, domain string, err error) {
	var d *descriptors.Domain
	g := s.config.Load()
	if err := s.caps.validate(req); err != nil {
		if g != nil && g.config.Domain(req.GetDomain()) != nil {
			domain = req.GetDomain()
		}
		return nil, domain, err
	}
	if g != nil {
		d = g.config.Domain(req.GetDomain())
	}
	if d != nil {
		domain = d.Name
	}
	if err := ctx.Err(); err != nil {
		return nil, domain, err
	}
	if d == nil {
		return allOK(len(req.GetDescriptors())), domain, nil
	}

	w := s.work.Get().(*work)
	defer func() { w.reset(); s.work.Put(w) }()
	w.starts = append(w.starts, 0)
	for _, desc := range req.GetDescriptors() {
		var override *descriptors.Rule
		if o := desc.GetLimit(); o != nil {
			override = overrideRule(o)
		}
		w.entries = entriesOf(desc, w.entries[:0])
		w.levels = d.Resolve(w.entries, override, w.levels)
		w.starts = append(w.starts, len(w.levels))
	}
	var replaced map[string]bool
	if d.HasReplaces() {
		replaced = replacedNames(w.levels)
	}
	for i, desc := range req.GetDescriptors() {
		hits := hitsOf(req, desc)
		for _, l := range w.levels[w.starts[i]:w.starts[i+1]] {
			if replaced[l.Rule.Name] {
				w.bucketOf = append(w.bucketOf, -1) // neither checked nor charged
				continue
			}
			w.bucketOf = append(w.bucketOf, w.addBucket(l, hits, s.shadow))
		}
	}
	if len(w.buckets) == 0 {
		return allOK(len(req.GetDescriptors())), domain, nil
	}
	if err := s.caps.checkBuckets(len(w.buckets)); err != nil {
		return nil, domain, err
	}
	n := len(w.buckets)
	w.results = slices.Grow(w.results, n)[:n]
	w.skipped = slices.Grow(w.skipped, n)[:n]
	clear(w.skipped)

	now := s.clock()
	if fromCache(g.cache, w, now) {
		s.observer.CacheHit()
		return s.respond(d, w), domain, nil
	}
	if err := s.apply(ctx, now, w); err != nil {
		if ctx.Err() != nil {
			return nil, domain, ctx.Err()
		}
		s.errLog.do(func(suppressed int) {
			s.log.Error("rate-limit store failed", "err", err, "domain", domain, "failure_mode", s.failureMode.String(), "suppressed", suppressed)
		})
		if s.failureMode == FailUnavailable {
			return nil, domain, &storeError{err: err}
		}
		s.observer.FailureAnswer(s.failureMode)
		return failureResponse(s.failureMode, w), domain, nil
	}
	remember(g.cache, w, now)
	return s.respond(d, w), domain, nil
}

// apply asks the store, within its budget (storeBudget).
func (s *Service) apply(ctx context.Context, now time.Time, w *work) error {
	if s.storeTimeout > 0 {
		budget := storeBudget(ctx, s.storeTimeout, s.margin)
		if budget <= 0 {
			// Too late to ask and still answer: as if the store had timed out.
			s.observer.Store(0, errNoTimeLeft)
			return errNoTimeLeft
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, budget)
		defer cancel()
	}
	start := time.Now()
	err := s.store.Apply(ctx, now, w.buckets, w.results)
	s.observer.Store(time.Since(start), err)
	return err
}

// storeBudget is how long a store call may take: the timeout, and no more
// than the call has left less a margin (margin, or if 0 deadlineMargin's)
// in which the service can still answer by its failure mode (allow, deny,
// or Unavailable) when the store hangs.
func storeBudget(ctx context.Context, timeout, margin time.Duration) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return timeout
	}
	left := time.Until(dl)
	if margin == 0 {
		margin = deadlineMargin(left)
	}
	return min(timeout, left-margin)
}

// deadlineMargin is the default margin: a quarter of the time left, at
// least 1 ms and at most 10 ms. Building and sending the failure mode's
// answer takes microseconds; the margin is for what delays a goroutine
// once the store call's timer fires: a busy or CPU-throttled process, a
// GC. On a loaded 2-core machine such delays reached several ms
// (TestFailureModesWithHungRedis), so 5 ms of Envoy's 20 ms are kept back;
// the store still gets 15 ms, over ten times a healthy Redis's round trip.
func deadlineMargin(left time.Duration) time.Duration {
	return min(max(left/4, time.Millisecond), 10*time.Millisecond)
}

// fromCache rejects the request if the over-limit cache knows one of its
// buckets lacks room for its hits. The buckets it knows are answered from
// it; the others are marked skipped. A request that checks a bucket without
// charging it always asks the store, which alone has its figures.
func fromCache(cache *overLimitCache, w *work, now time.Time) bool {
	if cache == nil {
		return false
	}
	for _, b := range w.buckets {
		if b.Hits == 0 && !b.Shadow {
			return false
		}
	}
	hit := false
	for i, b := range w.buckets {
		w.skipped[i] = true
		if b.Shadow || b.Hits <= 0 {
			continue
		}
		if e, ok := cache.get(b.Key, b.Hits, now); ok {
			hit, w.skipped[i] = true, false
			w.results[i] = leaky.Result{Reset: e.reset.Sub(now), Clear: max(0, e.clear.Sub(now))}
		}
	}
	if !hit {
		clear(w.skipped)
	}
	return hit
}

// remember caches the buckets the store found over their limit, from now,
// read before the store was asked, and forgets the buckets given hits back.
func remember(cache *overLimitCache, w *work, now time.Time) {
	if cache == nil {
		return
	}
	for i, b := range w.buckets {
		r := &w.results[i]
		switch {
		case b.Hits < 0:
			cache.remove(b.Key)
		case !r.Admitted && !b.Shadow && b.Hits > 0 && r.Reset > 0:
			cache.put(b.Key, cacheEntry{hits: b.Hits, reset: now.Add(r.Reset), clear: now.Add(r.Clear)})
		}
	}
}

// replacedNames returns the names of the limits that limits of the request
// replace (envoyproxy/ratelimit's replaces): those levels are dropped.
func replacedNames(levels []descriptors.Level) map[string]bool {
	var names map[string]bool
	for _, l := range levels {
		for _, name := range l.Rule.Replaces {
			if names == nil {
				names = map[string]bool{}
			}
			names[name] = true
		}
	}
	return names
}

// addBucket returns the index of the level's bucket in w.buckets, adding
// it, or adding the hits to it when another descriptor of the request
// already uses it, so a bucket is charged once with all its hits.
func (w *work) addBucket(l descriptors.Level, hits int64, shadow bool) int {
	if i, ok := w.find(l.Key); ok {
		w.buckets[i].Hits = addHits(w.buckets[i].Hits, hits)
		return i
	}
	w.buckets = append(w.buckets, leaky.Bucket{Key: l.Key, Limit: l.Rule.Limit, Hits: hits, Shadow: l.Rule.Shadow || shadow})
	i := len(w.buckets) - 1
	switch {
	case i == scanBuckets:
		if w.index == nil {
			w.index = make(map[string]int)
		}
		for j, b := range w.buckets {
			w.index[b.Key] = j
		}
	case i > scanBuckets:
		w.index[l.Key] = i
	}
	return i
}

// find returns the index of the bucket with key.
func (w *work) find(key string) (int, bool) {
	if len(w.buckets) > scanBuckets {
		i, ok := w.index[key]
		return i, ok
	}
	for i := range w.buckets {
		if w.buckets[i].Key == key {
			return i, true
		}
	}
	return 0, false
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
