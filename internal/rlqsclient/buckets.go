package rlqsclient

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
)

// bucket is one entry of Envoy's bucket cache (quota_bucket_cache.h,
// CachedBucket): its usage since the last report, and the action in force.
type bucket struct {
	id  map[string]string
	key string

	// allowed and denied count requests since the bucket's last report.
	allowed, denied uint64
	lastReport      time.Time

	source Source
	// cached is Envoy's cached_action: the server's action, or the
	// synthesized fallback action; nil in the no-assignment state.
	cached *rlqsv3.RateLimitQuotaResponse_BucketAction
	// limiter is Envoy's token_bucket_limiter, set only for a cached token
	// bucket action.
	limiter *tokenBucket
	// defaultLimiter stands in for the limiter a token bucket
	// no_assignment_behavior needs (see Options.NoAssignment).
	defaultLimiter *tokenBucket
	// expires is when the cached action's (or fallback's) timer fires;
	// zero in the no-assignment state.
	expires time.Time
}

// keyOf is a BucketId's identity in the cache: Envoy hashes the proto,
// whose map serializes in key order, so the same pairs are the same bucket.
func keyOf(id map[string]string) string {
	var sb strings.Builder
	for _, k := range slices.Sorted(maps.Keys(id)) {
		v := id[k]
		sb.WriteString(strconv.Itoa(len(k)))
		sb.WriteByte(':')
		sb.WriteString(k)
		sb.WriteString(strconv.Itoa(len(v)))
		sb.WriteByte(':')
		sb.WriteString(v)
	}
	return sb.String()
}

// strategyOf is the strategy Envoy's filter decides by
// (filter.cc, shouldAllowRequest): the cached action's, else the
// no_assignment_behavior. A cached action without a quota assignment gives
// an empty strategy, which fails open.
func (i *Instance) strategyOf(b *bucket) *typev3.RateLimitStrategy {
	if b.cached == nil {
		return i.noAssignment
	}
	return b.cached.GetQuotaAssignmentAction().GetRateLimitStrategy()
}

// enterDefault puts b in the no-assignment state at t: no cached action,
// no limiter, no timer (global_client_impl.cc, onActionExpirationTimer
// without a fallback, and onFallbackExpirationTimer).
func (i *Instance) enterDefault(b *bucket, t time.Time) {
	b.source = FromNoAssignment
	b.cached = nil
	b.limiter = nil
	b.expires = time.Time{}
	b.defaultLimiter = nil
	if tb, ok := tokenBucketOf(i.noAssignment); ok {
		b.defaultLimiter = tokenBucketFrom(tb, nil, t)
	}
}

// enterFallback puts b in the expired-assignment state at t, as
// onActionExpirationTimer does with a fallback: the fallback strategy is
// cached as an action, a token bucket fallback keeps the expired action's
// limiter when Envoy deems them the same and replaces it otherwise, and
// the fallback's own timer starts.
func (i *Instance) enterFallback(b *bucket, t time.Time) {
	var lim *tokenBucket
	if tb, ok := tokenBucketOf(i.expired); ok {
		lim = b.limiter
		if shouldReplace(b.cached, tb) {
			lim = tokenBucketFrom(tb, b.limiter, t)
		}
	}
	b.cached = &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				RateLimitStrategy: proto.Clone(i.expired).(*typev3.RateLimitStrategy),
			},
		},
	}
	b.source = FromExpired
	b.limiter = lim
	b.defaultLimiter = nil
	b.expires = t.Add(i.expiredTTL)
}

// advance fires, in order, the expiry timers of b due by now, each at its
// own instant: an assignment falls back (or to the default), a fallback to
// the default. Envoy fires them from its event loop; evaluating them here,
// before anything reads b, gives the same result on any clock.
func (i *Instance) advance(b *bucket, now time.Time) {
	for !b.expires.IsZero() && !now.Before(b.expires) {
		t := b.expires
		if b.source == FromExpired || i.expired == nil {
			i.enterDefault(b, t)
		} else {
			i.enterFallback(b, t)
		}
	}
}

// decide is filter.cc's shouldAllowRequest for a cached bucket.
func (i *Instance) decide(b *bucket, now time.Time) bool {
	s := i.strategyOf(b)
	switch st := s.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		// Another enum value leaves the switch and fails open.
		return st.BlanketRule != typev3.RateLimitStrategy_DENY_ALL
	case *typev3.RateLimitStrategy_TokenBucket:
		lim := b.limiter
		if b.cached == nil {
			lim = b.defaultLimiter
		}
		if lim == nil {
			return true // not reached: every token bucket state has a limiter
		}
		return lim.take(now)
	}
	// requests_per_time_unit and no strategy fail open.
	return true
}

// initialAllowed is filter.cc's noAssignmentBehaviorShouldAllow: a new
// bucket's first request is denied only by a blanket DENY_ALL default,
// whatever else the default is (a token bucket is not consulted).
func (i *Instance) initialAllowed() bool {
	st, ok := i.noAssignment.GetStrategy().(*typev3.RateLimitStrategy_BlanketRule_)
	return !ok || st.BlanketRule != typev3.RateLimitStrategy_DENY_ALL
}

// shouldReplace is global_client_impl.cc's shouldReplaceTokenBucket: a new
// limiter unless the cached action holds a token bucket Envoy deems equal.
func shouldReplace(cached *rlqsv3.RateLimitQuotaResponse_BucketAction, tb *typev3.TokenBucket) bool {
	old, ok := tokenBucketOf(cached.GetQuotaAssignmentAction().GetRateLimitStrategy())
	return !ok || !SameTokenBucket(tb, old)
}

// tokenBucketOf returns s's token bucket when s is one. A token bucket
// strategy without its message reads, as in C++, as an all-default one.
func tokenBucketOf(s *typev3.RateLimitStrategy) (*typev3.TokenBucket, bool) {
	st, ok := s.GetStrategy().(*typev3.RateLimitStrategy_TokenBucket)
	if !ok {
		return nil, false
	}
	if st.TokenBucket == nil {
		return &typev3.TokenBucket{}, true
	}
	return st.TokenBucket, true
}
