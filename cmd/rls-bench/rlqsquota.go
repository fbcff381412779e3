package main

import (
	"math"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// quota is what an Envoy's assignment lets through of one bucket's
// requests. Requests are counted per report, not decided one by one, so a
// token bucket is applied to an interval's requests at once: those its
// tokens cover are allowed, the others denied.
type quota struct {
	kind   string // "" (none yet: allowed, Envoy's default), or an assignment's kind
	max    float64
	rate   float64 // tokens a second, as Envoy reads the fill: whole seconds
	tokens float64
	// What Envoy compares to keep a token bucket (and its tokens).
	maxTokens, perFill uint32
	fillNanos          int32
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
		if math.IsInf(q.rate, 1) {
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
		perFill, nanos := tb.GetTokensPerFill().GetValue(), tb.GetFillInterval().GetNanos()
		if q.kind == kindTokenBucket && q.maxTokens == tb.GetMaxTokens() && q.perFill == perFill && q.fillNanos == nanos {
			return kindTokenBucket
		}
		n := quota{kind: kindTokenBucket, max: float64(tb.GetMaxTokens()), maxTokens: tb.GetMaxTokens(), perFill: perFill, fillNanos: nanos,
			rate: math.Inf(1)}
		if secs := tb.GetFillInterval().GetSeconds(); secs > 0 {
			n.rate = float64(perFill) / float64(secs)
		}
		n.tokens = n.max
		if q.kind == kindTokenBucket && q.max > 0 {
			n.tokens = math.Trunc(n.max * q.tokens / q.max)
		}
		*q = n
		return kindTokenBucket
	}
	*q = quota{}
	return kindOther
}
