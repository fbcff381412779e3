package rlqs

import (
	"math"
	"math/bits"
)

// Kind is what an assignment tells an Envoy to do.
type Kind uint8

const (
	// TokenBucket admits as a token bucket does: MaxTokens at once, then
	// TokensPerFill every FillInterval seconds.
	TokenBucket Kind = iota
	// AllowAll admits every request (blanket_rule ALLOW_ALL).
	AllowAll
	// DenyAll refuses every request (blanket_rule DENY_ALL).
	DenyAll
)

func (k Kind) String() string {
	switch k {
	case AllowAll:
		return "allow_all"
	case DenyAll:
		return "deny_all"
	}
	return "token_bucket"
}

// Assignment is what one Envoy is told for one bucket. Envoy's client
// reads whole seconds only (of the TTL and of the fill interval) and takes
// a TTL of 0 as expired at once, so every field here is what it will read.
// A token bucket it is sent anew replaces the one it holds, refilled: in
// full (before Envoy 1.33), or in proportion to what the old one held.
type Assignment struct {
	Kind Kind
	// MaxTokens, TokensPerFill and FillInterval (whole seconds, at least
	// 1) are a token bucket's.
	MaxTokens     uint32
	TokensPerFill uint32
	FillInterval  int64
	// TTL is how long the assignment holds, in whole seconds.
	TTL int64
}

// SameBucket reports whether b is the same bucket as a: the same kind and
// parameters. Envoy keeps its token bucket (and the tokens in it) when
// sent the same; a change replaces it, refilled.
func (a Assignment) SameBucket(b Assignment) bool {
	if a.Kind != b.Kind {
		return false
	}
	return a.Kind != TokenBucket || (a.MaxTokens == b.MaxTokens && a.TokensPerFill == b.TokensPerFill && a.FillInterval == b.FillInterval)
}

// Rate is the requests per second a token bucket assignment admits.
func (a Assignment) Rate() float64 {
	if a.Kind != TokenBucket || a.FillInterval <= 0 {
		return 0
	}
	return float64(a.TokensPerFill) / float64(a.FillInterval)
}

// fillPrecision is how many tokens a limit's whole rate comes to per fill
// interval, at least: the interval is long enough that a small share is
// still a whole number of tokens. Envoy refills continuously, at
// tokens_per_fill / fill_interval, so a long interval brings no bursts.
const fillPrecision = 1000

// maxFillInterval caps the fill interval, in seconds.
const maxFillInterval = 3600

// FillInterval returns the whole seconds a limit of rate (requests per
// second) has its token buckets refill over: one value per limit, so
// that a share that moves changes the tokens, never the interval alone
// (Envoy compares only the sub-second part of an interval when it
// decides whether a bucket changed: a new interval alone would keep the
// old bucket, and its old rate).
func FillInterval(rate float64) int64 {
	if !(rate > 0) {
		return maxFillInterval
	}
	f := math.Ceil(fillPrecision / rate)
	return int64(min(max(f, 1), maxFillInterval))
}

// quantize rounds n down to its four most significant bits, at most
// 12.5% less: shares that move by little give the same tokens, so that
// Envoys are not sent new buckets (each refilled full) for noise.
func quantize(n uint64) uint64 {
	if l := bits.Len64(n); l > 4 {
		shift := l - 4
		return n >> shift << shift
	}
	return n
}

// raiseAt is how much more than the tokens in force a share must come
// to before a raise is sent, beside its tokens coming to another quantum:
// a change replaces the Envoy's bucket (refilled in full by Envoy before
// 1.33), so a share that hovers at a quantum's edge is not sent back and
// forth. A cut is sent at once, so that shares never add up to more than
// the limit.
const raiseAt = 1.05

// Next returns the token bucket to send for a share (requests per
// second) over fill seconds, given the one in force (prev): unchanged if
// the share moved by little, else the share's tokens, quantized down, with
// burst (at least 1) as its size. The tokens sent never come to more than
// the share: unchanged only when prev's are at most the share's. Next is
// pure.
func Next(prev Assignment, share float64, burst int64, fill int64) Assignment {
	want := uint64(0)
	if share > 0 {
		want = quantize(uint64(math.Min(math.Floor(share*float64(fill)), math.MaxUint32)))
	}
	if prev.Kind == TokenBucket && prev.FillInterval == fill && prev.MaxTokens > 0 {
		held := uint64(prev.TokensPerFill)
		exact := share * float64(fill)
		if held == want || (held < want && exact < float64(held)*raiseAt && held > 0) {
			return prev // moved by little, and what is held is no more than the share
		}
	}
	a := Assignment{Kind: TokenBucket, MaxTokens: uint32(min(max(burst, 1), math.MaxUint32)),
		TokensPerFill: uint32(want), FillInterval: fill}
	if prev.Kind == TokenBucket && prev.FillInterval != fill && prev.MaxTokens == a.MaxTokens && prev.TokensPerFill == a.TokensPerFill {
		// Envoy compares only the sub-second part of a fill interval: a
		// new interval alone would keep the old bucket at its old rate.
		// A token less (or more) makes it a new one.
		if a.MaxTokens > 1 {
			a.MaxTokens--
		} else {
			a.MaxTokens++
		}
	}
	return a
}
