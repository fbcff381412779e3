package rlqsclient

import (
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
)

// Source is where the action in force for a bucket comes from.
type Source int

const (
	// FromNoAssignment: no assignment, or it expired; the filter's
	// no_assignment_behavior (Options.NoAssignment) decides.
	FromNoAssignment Source = iota
	// FromServer: a bucket action from the RLQS server.
	FromServer
	// FromExpired: the server's assignment expired and the filter's
	// expired_assignment_behavior (Options.Expired) decides until its TTL.
	FromExpired
)

// String names the source as the filter config does.
func (s Source) String() string {
	switch s {
	case FromServer:
		return "server"
	case FromExpired:
		return "expired_assignment_behavior"
	}
	return "no_assignment_behavior"
}

// Rule is how the action in force decides a request.
type Rule int

const (
	// AllowAll admits every request (blanket_rule ALLOW_ALL).
	AllowAll Rule = iota
	// DenyAll refuses every request (blanket_rule DENY_ALL).
	DenyAll
	// TokenBucket admits while the limiter holds a whole token.
	TokenBucket
	// FailOpen admits every request because Envoy's filter cannot apply
	// the strategy: requests_per_time_unit, none, an unknown blanket rule.
	FailOpen
)

// String names the rule.
func (r Rule) String() string {
	switch r {
	case DenyAll:
		return "deny_all"
	case TokenBucket:
		return "token_bucket"
	case FailOpen:
		return "fail_open"
	}
	return "allow_all"
}

// Assignment is what decides a bucket's requests now.
type Assignment struct {
	Source Source
	Rule   Rule
	// Strategy is a copy of the strategy in force, nil when there is none
	// (a cached action without a quota assignment).
	Strategy *typev3.RateLimitStrategy
	// MaxTokens, FillRate and Tokens describe the limiter of a TokenBucket
	// rule: FillRate in tokens a second as Envoy computed it (+Inf or NaN
	// after a sub-second fill interval), Tokens what it holds now.
	MaxTokens float64
	FillRate  float64
	Tokens    float64
	// Expires is when the action in force ends (to the fallback or the
	// default); zero for the no-assignment state, which does not.
	Expires time.Time
}

// view describes b at now; advance has run.
func (i *Instance) view(b *bucket, now time.Time) Assignment {
	a := Assignment{Source: b.source, Expires: b.expires}
	s := i.strategyOf(b)
	if s != nil {
		a.Strategy = proto.Clone(s).(*typev3.RateLimitStrategy)
	}
	switch st := s.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		switch st.BlanketRule {
		case typev3.RateLimitStrategy_ALLOW_ALL:
			a.Rule = AllowAll
		case typev3.RateLimitStrategy_DENY_ALL:
			a.Rule = DenyAll
		default:
			a.Rule = FailOpen
		}
	case *typev3.RateLimitStrategy_TokenBucket:
		a.Rule = TokenBucket
		lim := b.limiter
		if b.cached == nil {
			lim = b.defaultLimiter
		}
		if lim != nil {
			a.MaxTokens, a.FillRate, a.Tokens = lim.max, lim.rate, lim.available(now)
		}
	default:
		a.Rule = FailOpen
	}
	return a
}
