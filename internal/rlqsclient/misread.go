package rlqsclient

import (
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
)

// MisreadKind names a way Envoy's client drops or misreads a bucket action.
type MisreadKind string

// The kinds of Misread. Dropped kinds leave the bucket as it was (its
// assignment and that assignment's expiry included); the others are applied,
// but not as the RLQS protocol documents them.
const (
	// MissingBucketID: the action has no bucket_id, or an empty one. Dropped.
	MissingBucketID MisreadKind = "missing_bucket_id"
	// UnknownBucket: no cached bucket has that BucketId (never seen, or
	// abandoned and not requested since). Dropped.
	UnknownBucket MisreadKind = "unknown_bucket"
	// RequestsPerTimeUnit: the strategy is requests_per_time_unit, which
	// Envoy does not support. Dropped.
	RequestsPerTimeUnit MisreadKind = "requests_per_time_unit"
	// NoStrategy: a quota_assignment_action without a rate_limit_strategy.
	// Dropped.
	NoStrategy MisreadKind = "no_strategy"
	// NoAction: neither quota_assignment_action nor abandon_action. Envoy
	// caches it as the bucket's assignment, which lets every request through
	// and expires at once (to the expired-assignment fallback, if any).
	NoAction MisreadKind = "no_action"
	// SubSecondFillInterval: the fill interval is under one whole second, so
	// Envoy divides by zero: the token bucket never runs out (unless its
	// max_tokens is 0).
	SubSecondFillInterval MisreadKind = "sub_second_fill_interval"
	// FillIntervalTruncated: the fill interval has a fraction of a second,
	// which Envoy drops (1.5 s is read as 1 s: a faster refill).
	FillIntervalTruncated MisreadKind = "fill_interval_truncated"
	// FillSecondsIgnored: the token bucket differs from the cached one only
	// in the seconds of its fill interval; Envoy compares the nanos alone, so
	// it keeps the old limiter and its old rate.
	FillSecondsIgnored MisreadKind = "fill_seconds_ignored"
	// TokensPerFillUnset: tokens_per_fill is documented to default to 1;
	// Envoy reads 0, and refills one token a year.
	TokensPerFillUnset MisreadKind = "tokens_per_fill_unset"
	// TTLUnset: an unset assignment_time_to_live is documented as no expiry;
	// Envoy reads 0 s and expires the assignment at once.
	TTLUnset MisreadKind = "ttl_unset"
	// TTLTruncated: the TTL has a fraction of a second, which Envoy drops
	// (1.9 s lasts 1 s, 0.5 s expires at once).
	TTLTruncated MisreadKind = "ttl_truncated"
	// UnknownBlanketRule: a blanket_rule that is neither ALLOW_ALL nor
	// DENY_ALL; Envoy's filter lets every request through.
	UnknownBlanketRule MisreadKind = "unknown_blanket_rule"
)

// Misread is one bucket action that Envoy's client drops or misreads.
type Misread struct {
	// At is when the response carrying the action was processed.
	At time.Time
	// Bucket is the action's BucketId, nil when it has none.
	Bucket map[string]string
	Kind   MisreadKind
	// Dropped is set when Envoy ignores the action altogether.
	Dropped bool
	// Why says what Envoy does instead, with the values involved.
	Why string
	// Action is a copy of the action as received.
	Action *rlqsv3.RateLimitQuotaResponse_BucketAction
}
