package xdsconfig

import (
	"math"
	"time"
)

// Backoff is how long the client waits before connecting again after the
// stream failed n times in a row: Min times Factor to the power n-1, at
// most Max; with Jitter, a uniformly random wait between Min and that.
// This is the schedule envoyproxy/ratelimit's xDS client follows (its
// XDS_CLIENT_BACKOFF_* settings, jpillora/backoff's arithmetic), so a
// Factor below 1 keeps every wait at Min, and a Min not below Max makes
// every wait Max. Its zero value waits 500ms, doubling to 30s, without
// jitter; a zero or negative field takes that default.
type Backoff struct {
	Min, Max time.Duration
	Factor   float64
	Jitter   bool
}

// Defaults of the zero Backoff.
const (
	DefaultBackoffMin    = 500 * time.Millisecond
	DefaultBackoffMax    = 30 * time.Second
	DefaultBackoffFactor = 2
)

// Wait returns the wait after the failures-th failure in a row (1 for the
// first), with random in [0, 1) drawing the jitter.
func (b Backoff) Wait(failures int, random float64) time.Duration {
	lo, hi, factor := b.Min, b.Max, b.Factor
	if lo <= 0 {
		lo = DefaultBackoffMin
	}
	if hi <= 0 {
		hi = DefaultBackoffMax
	}
	if factor <= 0 {
		factor = DefaultBackoffFactor
	}
	if lo >= hi {
		return hi
	}
	d := float64(lo) * math.Pow(factor, float64(max(failures-1, 0)))
	if b.Jitter {
		d = random*(d-float64(lo)) + float64(lo)
	}
	switch {
	case d >= float64(hi) || math.IsNaN(d): // also beyond int64
		return hi
	case d <= float64(lo):
		return lo
	}
	return time.Duration(d)
}
