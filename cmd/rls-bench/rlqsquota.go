package main

import (
	"math"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/envoy-rls/envoy-rls/internal/rlqsclient"
)

// quota is what an Envoy's assignment lets through of one bucket's
// requests. Requests are counted per report, not decided one by one, so a
// token bucket is applied to an interval's requests at once: those its
// tokens cover are allowed, the others denied.
type quota struct {
	kind   string // "" (none yet: allowed, Envoy's default), or an assignment's kind
	max    float64
	rate   float64 // tokens a second, as Envoy reads the fill (+Inf or NaN: never runs out)
	tokens float64
	tb     *typev3.TokenBucket // the assignment, which Envoy compares to keep its limiter
}

// The kinds of bucket actions, as the service's metrics name them.
const (
	kindTokenBucket = "token_bucket"
	kindAllowAll    = "allow_all"
	kindDenyAll     = "deny_all"
	kindAbandon     = "abandon"
	kindOther       = "other"
)

// decide splits n requests that came in over secs seconds into allowed
// and denied.
func (q *quota) decide(n uint64, secs float64) (allowed, denied uint64) {
	switch q.kind {
	case kindDenyAll:
		return 0, n
	case kindTokenBucket:
		if math.IsInf(q.rate, 0) || math.IsNaN(q.rate) {
			return n, 0 // a fill interval under a second: Envoy's bucket never runs out
		}
		q.tokens = math.Min(q.max, q.tokens+secs*q.rate)
		a := min(n, uint64(math.Max(q.tokens, 0)))
		q.tokens -= float64(a)
		return a, n - a
	}
	return n, 0
}

// apply sets the quota from a bucket action and returns the action's kind.
// A token bucket Envoy deems unchanged keeps its tokens; a new one starts
// full, or with the old one's share of tokens (Envoy 1.33 on).
func (q *quota) apply(a *rlqsv3.RateLimitQuotaResponse_BucketAction) string {
	if _, ok := a.GetBucketAction().(*rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_); ok {
		*q = quota{}
		return kindAbandon
	}
	switch st := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		switch st.BlanketRule {
		case typev3.RateLimitStrategy_ALLOW_ALL:
			*q = quota{kind: kindAllowAll}
			return kindAllowAll
		case typev3.RateLimitStrategy_DENY_ALL:
			*q = quota{kind: kindDenyAll}
			return kindDenyAll
		}
	case *typev3.RateLimitStrategy_TokenBucket:
		tb := st.TokenBucket
		if q.kind == kindTokenBucket && rlqsclient.SameTokenBucket(tb, q.tb) {
			return kindTokenBucket
		}
		n := quota{kind: kindTokenBucket, max: float64(tb.GetMaxTokens()), rate: rlqsclient.FillRate(tb), tb: tb}
		n.tokens = n.max
		if q.kind == kindTokenBucket {
			n.tokens = rlqsclient.InitialTokens(tb.GetMaxTokens(), q.tokens, q.max)
		}
		*q = n
		return kindTokenBucket
	}
	*q = quota{}
	return kindOther
}
