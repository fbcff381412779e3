package rlqsclient

import (
	"fmt"
	"maps"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// maxTTL bounds a TTL so that adding it to a time cannot overflow; Envoy
// would hold such an assignment for centuries anyway.
const maxTTL = 100 * 365 * 24 * time.Hour

// onResponse applies a response's bucket actions in order, as
// global_client_impl.cc's onQuotaResponseImpl does. i.mu is held.
func (i *Instance) onResponse(resp *rlqsv3.RateLimitQuotaResponse, now time.Time) {
	i.stats.ResponsesReceived++
	for _, a := range resp.GetBucketAction() {
		i.apply(a, now)
	}
}

// apply applies one bucket action at now.
func (i *Instance) apply(a *rlqsv3.RateLimitQuotaResponse_BucketAction, now time.Time) {
	id := a.GetBucketId().GetBucket()
	if len(id) == 0 {
		i.misread(now, a, MissingBucketID, true, "the action has no bucket_id: Envoy logs an error and skips it")
		return
	}
	key := keyOf(id)
	b := i.buckets[key]
	if b == nil {
		i.misread(now, a, UnknownBucket, true, "no cached bucket has this id (never requested, or abandoned since): skipped")
		return
	}
	// Timers due before this response fire first in Envoy's event loop.
	i.advance(b, now)
	switch act := a.GetBucketAction().(type) {
	case *rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_:
		i.abandon(b)
		i.stats.ActionsApplied++
		return
	case *rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_:
		lim, ok := i.limiterFor(b, a, act.QuotaAssignmentAction.GetRateLimitStrategy(), now)
		if !ok {
			return
		}
		i.readTTL(now, a)
		b.limiter = lim
		b.expires = now.Add(ttlOf(act.QuotaAssignmentAction))
	default:
		// Neither oneof: Envoy caches the action anyway, with no limiter,
		// and starts its timer from the (absent) assignment's TTL of 0.
		i.misread(now, a, NoAction, false, "neither quota_assignment_action nor abandon_action: cached as an assignment that allows every request and expires at once")
		b.limiter = nil
		b.expires = now
	}
	b.cached = proto.Clone(a).(*rlqsv3.RateLimitQuotaResponse_BucketAction)
	b.source = FromServer
	b.defaultLimiter = nil
	i.stats.ActionsApplied++
}

// limiterFor is the limiter b gets from a quota assignment of strategy s,
// and whether Envoy applies the action at all.
func (i *Instance) limiterFor(b *bucket, a *rlqsv3.RateLimitQuotaResponse_BucketAction, s *typev3.RateLimitStrategy, now time.Time) (*tokenBucket, bool) {
	switch st := s.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		if r := st.BlanketRule; r != typev3.RateLimitStrategy_ALLOW_ALL && r != typev3.RateLimitStrategy_DENY_ALL {
			i.misread(now, a, UnknownBlanketRule, false, fmt.Sprintf("blanket_rule %d: Envoy's filter allows every request", r))
		}
		return nil, true
	case *typev3.RateLimitStrategy_TokenBucket:
		tb, _ := tokenBucketOf(s)
		i.readTokenBucket(now, a, tb)
		if shouldReplace(b.cached, tb) {
			return tokenBucketFrom(tb, b.limiter, now), true
		}
		old, _ := tokenBucketOf(b.cached.GetQuotaAssignmentAction().GetRateLimitStrategy())
		if o, n := old.GetFillInterval().GetSeconds(), tb.GetFillInterval().GetSeconds(); o != n {
			i.misread(now, a, FillSecondsIgnored, false, fmt.Sprintf(
				"fill_interval seconds changed from %d to %d with the same nanos: Envoy compares only the nanos and keeps the old token bucket, its tokens and its rate", o, n))
		}
		return b.limiter, true
	case *typev3.RateLimitStrategy_RequestsPerTimeUnit_:
		i.misread(now, a, RequestsPerTimeUnit, true, "requests_per_time_unit is not supported by Envoy: skipped")
		return nil, false
	}
	i.misread(now, a, NoStrategy, true, "quota_assignment_action without a rate_limit_strategy: skipped")
	return nil, false
}

// readTokenBucket records how Envoy misreads tb's fill.
func (i *Instance) readTokenBucket(now time.Time, a *rlqsv3.RateLimitQuotaResponse_BucketAction, tb *typev3.TokenBucket) {
	if tb.GetTokensPerFill() == nil {
		i.misread(now, a, TokensPerFillUnset, false, "tokens_per_fill unset: documented as 1, Envoy reads 0 and refills one token a year")
	}
	fi := tb.GetFillInterval()
	secs := wholeSeconds(fi)
	switch {
	case secs == 0:
		i.misread(now, a, SubSecondFillInterval, false, fmt.Sprintf(
			"fill_interval %v is 0 whole seconds: Envoy divides by zero and the bucket never runs out", fi.AsDuration()))
	case fi.GetNanos() != 0:
		i.misread(now, a, FillIntervalTruncated, false, fmt.Sprintf(
			"fill_interval %v read as %ds: %d tokens every %ds", fi.AsDuration(), secs, tb.GetTokensPerFill().GetValue(), secs))
	}
}

// readTTL records how Envoy misreads the assignment's TTL.
func (i *Instance) readTTL(now time.Time, a *rlqsv3.RateLimitQuotaResponse_BucketAction) {
	ttl := a.GetQuotaAssignmentAction().GetAssignmentTimeToLive()
	switch {
	case ttl == nil:
		i.misread(now, a, TTLUnset, false, "assignment_time_to_live unset: documented as no expiry, Envoy expires the assignment at once")
	case ttl.GetNanos() != 0:
		i.misread(now, a, TTLTruncated, false, fmt.Sprintf("assignment_time_to_live %v read as %ds", ttl.AsDuration(), ttl.GetSeconds()))
	}
}

// ttlOf is how long Envoy keeps an assignment: the seconds of its TTL
// alone (startActionExpirationTimer), 0 when unset.
func ttlOf(qa *rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction) time.Duration {
	return secondsTTL(qa.GetAssignmentTimeToLive())
}

// secondsTTL is the whole seconds of d as a timer duration: a negative
// one fires at once.
func secondsTTL(d *durationpb.Duration) time.Duration {
	s := d.GetSeconds()
	if s <= 0 {
		return 0
	}
	if s > int64(maxTTL/time.Second) {
		return maxTTL
	}
	return time.Duration(s) * time.Second
}

// abandon erases b from the cache; its usage since the last report is
// never reported.
func (i *Instance) abandon(b *bucket) {
	t := i.totals[b.key]
	t.Abandoned++
	t.LostAllowed += b.allowed
	t.LostDenied += b.denied
	delete(i.buckets, b.key)
	for n, x := range i.order {
		if x == b {
			i.order = append(i.order[:n], i.order[n+1:]...)
			break
		}
	}
}

// misread records one dropped or misread action.
func (i *Instance) misread(now time.Time, a *rlqsv3.RateLimitQuotaResponse_BucketAction, kind MisreadKind, dropped bool, why string) {
	var id map[string]string
	if m := a.GetBucketId().GetBucket(); m != nil {
		id = maps.Clone(m)
	}
	if dropped {
		i.stats.ActionsDropped++
	}
	i.misreads = append(i.misreads, Misread{
		At: now, Bucket: id, Kind: kind, Dropped: dropped, Why: why,
		Action: proto.Clone(a).(*rlqsv3.RateLimitQuotaResponse_BucketAction),
	})
}
