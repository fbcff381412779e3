package rls

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// Store keeps the buckets. Apply decides every bucket of one request
// atomically with the all-or-nothing rule of limit.DecideAll: results[i] is
// the outcome for buckets[i]. now is the service's clock; a store with a
// clock of its own (Redis) may use that instead. An error means nothing was
// decided. The keys of one call are distinct, and there are never more
// than MaxDescriptors × MaxEntries of them (caps.buckets): a request that
// would reach more is refused before the store is asked.
type Store interface {
	Apply(ctx context.Context, now time.Time, buckets []limit.Bucket, results []limit.Result) error
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
	// IETFHeaders adds the IETF httpapi draft's fields (draft -10):
	// RateLimit-Policy and RateLimit, and on OVER_LIMIT Retry-After.
	IETFHeaders
	// EnvoyproxyHeaders adds envoyproxy/ratelimit's headers
	// (LIMIT_RESPONSE_HEADERS_ENABLED): RateLimit-Limit, RateLimit-Remaining
	// and RateLimit-Reset, or the names of Options.ReferenceHeaders, of the
	// descriptor closest to its limit, on every answer.
	EnvoyproxyHeaders
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
	// Tracing, if set, traces every call and store call; nil (the default)
	// traces nothing and costs nothing.
	Tracing *Tracing
	// MaxDescriptors, MaxEntries (per descriptor) and MaxEntryBytes (per
	// key or value, and the domain) cap a request: a larger one is
	// InvalidArgument, before any work. 0 means the Default* cap.
	MaxDescriptors, MaxEntries, MaxEntryBytes int
	// QuotaMode puts every limit in quota mode (envoyproxy/ratelimit's
	// QUOTA_MODE): a descriptor over its limit rejects the request only
	// when every descriptor of it is over; as there, a descriptor that
	// matches no limit counts, and is never over.
	QuotaMode bool
	// DynamicMetadata sends the response's dynamic_metadata as
	// envoyproxy/ratelimit does with RESPONSE_DYNAMIC_METADATA: the domain,
	// the descriptors, the hits and the metadata of the limits that passed.
	DynamicMetadata bool
	// ReferenceHeaders names EnvoyproxyHeaders' headers.
	ReferenceHeaders ReferenceHeaderNames
	// Demand, if set, is told the buckets of every request that reaches
	// one, whatever answers it (the store, the over-limit cache, the
	// failure mode): what RLQS divides a limit by, the RLS calls' part of
	// it.
	Demand Demand
	// Quotas, if set, is what GET /buckets shows of the Rate Limit Quota
	// Service's streams.
	Quotas Quotas
	// Regions, if set, divides every limit among regions (the Store
	// decides under this region's claims): GET /buckets and POST /explain
	// read the buckets under them and show each region's part.
	Regions Regions
}

// Demand is told the hits each request asks of its buckets, admitted or
// not. Asked is called on the request path: it must be quick and safe for
// concurrent use.
type Demand interface {
	Asked(buckets []limit.Bucket)
}

// Service is the envoy.service.ratelimit.v3.RateLimitService. It is safe
// for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	store        Store
	storeName    string // for metrics and traces
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
	quotaMode    bool
	// dynamicMetadata sends the response's dynamic metadata.
	dynamicMetadata bool
	refHeaders      ReferenceHeaderNames
	tracing         *Tracing     // nil: off
	tracer          trace.Tracer // nil: off
	demand          Demand       // nil: none
	quotas          Quotas       // nil: none
	regions         Regions      // nil: none
	errLog          throttle
	work            sync.Pool
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
		store: opts.Store, storeName: storeName(opts.Store), clock: opts.Clock, log: opts.Logger, headers: opts.Headers, observer: opts.Observer,
		failureMode: opts.FailureMode, storeTimeout: opts.StoreTimeout, margin: opts.DeadlineMargin, shadow: opts.Shadow,
		cacheSize: opts.OverLimitCacheSize, cacheBytes: opts.OverLimitCacheBytes,
		caps:      newCaps(opts.MaxDescriptors, opts.MaxEntries, opts.MaxEntryBytes),
		quotaMode: opts.QuotaMode, dynamicMetadata: opts.DynamicMetadata, refHeaders: opts.ReferenceHeaders.withDefaults(),
		demand: opts.Demand, quotas: opts.Quotas, regions: opts.Regions,
	}
	if t := opts.Tracing; t != nil {
		if t.Provider == nil || t.Propagator == nil {
			return nil, errors.New("rls: tracing needs a tracer provider and a propagator")
		}
		s.tracing, s.tracer = t, t.Provider.Tracer(tracerName)
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

// domain returns the named domain of the generation's config, or nil (also
// when there is no config).
func (g *generation) domain(name string) *descriptors.Domain {
	if g == nil {
		return nil
	}
	return g.config.Domain(name)
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
	start := time.Now()
	resp, domain, err := s.decide(ctx, req)
	if err != nil {
		err = grpcStatus(err)
		code := status.Code(err).String()
		s.observer.Call(domain, code, time.Since(start))
		if s.tracer != nil {
			annotateCall(ctx, req, code)
		}
		return nil, err
	}
	code := codeName(resp.GetOverallCode())
	s.observer.Call(domain, code, time.Since(start))
	if s.tracer != nil {
		annotateCall(ctx, req, code)
	}
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

// decide answers a request; domain is its domain if the config has it.
func (s *Service) decide(ctx context.Context, req *rlsv3.RateLimitRequest) (resp *rlsv3.RateLimitResponse, domain string, err error) {
	var w *work
	defer func() {
		if s.log.Enabled(ctx, slog.LevelDebug) {
			s.logCall(ctx, req, resp, err, w)
		}
		// A store call that failed may still be reading the buckets (a
		// batched Redis call decides a request its caller gave up on; the
		// fallback store lets a late call finish): the work is not reused.
		if w != nil && !w.storeFailed {
			w.reset()
			s.work.Put(w)
		}
	}()
	g := s.config.Load()
	d := g.domain(req.GetDomain())
	if d != nil {
		domain = d.Name
	}
	if err := s.caps.validate(req); err != nil {
		return nil, domain, err
	}
	if err := ctx.Err(); err != nil {
		return nil, domain, err
	}
	if d == nil {
		return allOK(len(req.GetDescriptors())), domain, nil
	}

	w = s.work.Get().(*work)
	w.resolve(d, req, modes{s.shadow, s.quotaMode})
	if len(w.buckets) == 0 {
		return s.respond(d, req, w), domain, nil // OK: no limit, or allow-listed
	}
	if err := s.caps.checkBuckets(len(w.buckets)); err != nil {
		return nil, domain, err
	}

	if s.demand != nil {
		// Before anything answers it: a call refused by the cache, the
		// failure mode or a quota still wants its part of the limit.
		s.demand.Asked(w.buckets)
	}
	now := s.clock()
	w.now = now
	if fromCache(g.cache, w, now) {
		s.observer.CacheHit()
		s.peekUnanswered(ctx, now, w)
		return s.respond(d, req, w), domain, nil
	}
	if err := s.apply(ctx, now, w); err != nil {
		w.storeFailed = true
		resp, err := s.storeFailed(ctx, err, domain, w)
		return resp, domain, err
	}
	remember(g.cache, w, now)
	resp = s.respond(d, req, w)
	if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT && s.refundQuotaRejected(ctx, now, w) {
		// The figures as the buckets stay; the observer has been told.
		w.verdicts = w.verdicts[:0]
		resp = s.response(d, req, w, false)
	}
	return resp, domain, nil
}
