package rlqsclient

import (
	"math"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// minFillRate is the slowest rate Envoy's token bucket refills at (one
// token a year): a rate of 0 is raised to it.
const minFillRate = 1.0 / (365 * 24 * 60 * 60)

// tokenBucket is the limiter Envoy's filter holds for a bucket with a
// token bucket assignment: it refills continuously at rate tokens a second
// up to max, and a request takes one whole token or is denied. rate is
// what Envoy computed, so +Inf or NaN when it divided by a zero-second
// fill interval: Envoy's bucket then always reads full (min of max and a
// non-finite product).
type tokenBucket struct {
	max    float64
	rate   float64
	tokens float64 // at at
	at     time.Time
}

// newTokenBucket returns a bucket of max tokens refilling at rate, holding
// initial tokens at now. The rate is taken by absolute value and raised to
// minFillRate as Envoy does; a NaN stays NaN there too.
func newTokenBucket(max uint32, rate, initial float64, now time.Time) *tokenBucket {
	r := math.Abs(rate)
	if r < minFillRate {
		r = minFillRate
	}
	b := &tokenBucket{max: float64(max), rate: r, at: now}
	b.tokens = math.Min(b.max, initial)
	return b
}

// finite reports whether the bucket refills at a finite rate.
func (b *tokenBucket) finite() bool {
	return !math.IsInf(b.rate, 0) && !math.IsNaN(b.rate)
}

// available returns the tokens in the bucket at now.
func (b *tokenBucket) available(now time.Time) float64 {
	if !b.finite() {
		return b.max
	}
	dt := now.Sub(b.at).Seconds()
	if dt < 0 {
		dt = 0
	}
	return math.Min(b.max, b.tokens+dt*b.rate)
}

// take consumes one token at now, or reports false without changing the
// bucket when less than one is there.
func (b *tokenBucket) take(now time.Time) bool {
	t := b.available(now)
	if t < 1 {
		return false
	}
	if b.finite() {
		b.tokens = t - 1
		b.at = now
	}
	return true
}

// wholeSeconds is a duration truncated toward zero to whole seconds, as
// absl::ToInt64Seconds reads Envoy's fill intervals.
func wholeSeconds(d *durationpb.Duration) int64 {
	s := d.GetSeconds() + int64(d.GetNanos())/1e9
	r := int64(d.GetNanos()) % 1e9
	switch {
	case s > 0 && r < 0:
		s--
	case s < 0 && r > 0:
		s++
	}
	return s
}

// FillRate is the rate Envoy reads from tb: tokens_per_fill (0 when unset)
// over the fill interval in whole seconds, as a float division, so +Inf or
// NaN for an interval under one second.
func FillRate(tb *typev3.TokenBucket) float64 {
	return float64(tb.GetTokensPerFill().GetValue()) / float64(wholeSeconds(tb.GetFillInterval()))
}

// tokenBucketFrom builds the limiter for tb at now, as Envoy does when it
// replaces a bucket's limiter: full when there was none, else as
// InitialTokens says.
func tokenBucketFrom(tb *typev3.TokenBucket, old *tokenBucket, now time.Time) *tokenBucket {
	max := tb.GetMaxTokens()
	initial := float64(max)
	if old != nil {
		initial = InitialTokens(max, old.available(now), old.max)
	}
	return newTokenBucket(max, FillRate(tb), initial, now)
}

// InitialTokens is what Envoy (1.33 on) fills a replacing limiter of max
// tokens with: the share of its max that the old one held (oldTokens of
// oldMax), truncated to whole tokens.
func InitialTokens(max uint32, oldTokens, oldMax float64) float64 {
	share := oldTokens / oldMax
	if math.IsNaN(share) {
		// An old max of 0: the NaN converts to a huge count in Envoy's
		// C++, which fills the new bucket.
		return float64(max)
	}
	return math.Trunc(float64(max) * share)
}

// SameTokenBucket is Envoy's test for keeping a limiter: the same
// max_tokens, tokens_per_fill and fill_interval nanos. The seconds of the
// fill interval are not compared.
func SameTokenBucket(a, b *typev3.TokenBucket) bool {
	return a.GetMaxTokens() == b.GetMaxTokens() &&
		a.GetTokensPerFill().GetValue() == b.GetTokensPerFill().GetValue() &&
		a.GetFillInterval().GetNanos() == b.GetFillInterval().GetNanos()
}
