package limit

import (
	"math/bits"
	"slices"
	"time"
)

// State is what a store keeps for one bucket. The zero State is an empty
// bucket, whatever its algorithm.
type State struct {
	// Counter is the number of requests in a leaky bucket, or in a fixed
	// window; for a sliding window, the count in its window when the state
	// was made.
	Counter int64
	// Timestamp is the Unix time in microseconds of a leaky bucket's last
	// drip, or of its first request after it was empty; of the start of a
	// fixed window; of the start of a sliding window's newest sub-window.
	Timestamp int64
	// Counts are a sliding window's counts: Counts[k] is the sub-window k
	// back from the newest. Nil for the other algorithms.
	Counts []int64
}

// Result is the outcome of one decision for one bucket.
type Result struct {
	// Admitted reports whether the bucket had room for the hits. A peek
	// (0 hits) is admitted unless the bucket is over its size; a refund
	// (negative hits) always is.
	Admitted bool
	// State is the bucket after the decision: dripped to now, and charged
	// with the hits when they were admitted.
	State State
	// Remaining is Size minus the counter after the decision; 0 when the
	// hits were not admitted.
	Remaining int64
	// Clear is the time until the bucket is empty.
	Clear time.Duration
	// Reset is, when the hits were not admitted, the time until enough has
	// leaked for them to fit. Hits larger than the bucket never fit; Reset is
	// then the time to empty the bucket plus one drip.
	Reset time.Duration
	// TTL is how long a store must keep State: until the bucket is empty, plus
	// one drip. 0 means the bucket is empty and need not be kept.
	TTL time.Duration
}

// Decide decides whether hits more requests fit in one bucket, by its
// limit's algorithm, and charges them when they do: the decision of a
// request with this one bucket.
//
// For a leaky bucket it drips the bucket in state s to now and admits when
// counter + hits <= Size. Hits of 0 check without charging; negative hits
// give requests back (the counter does not go below 0). Time going
// backwards drips nothing. Windows follow package window.
//
// Decide is pure: the same arguments always give the same Result. It
// allocates nothing for a leaky bucket or a fixed window (a sliding window
// charged with s.Counts nil gets new counts; otherwise s.Counts is charged
// in place). Limit fields out of range are read as their nearest valid
// value (see Limit.Validate).
func Decide(s State, l Limit, now time.Time, hits int64) Result {
	us := now.UnixMicro()
	r := decideOne(s, l, us, hits)
	if r.Admitted && hits != 0 {
		charge(&r, l, us, hits)
	}
	return r
}

// decide is Decide on a clamped limit, with now in Unix microseconds. Every
// step below has its line in the Redis script.
func decide(s State, l Limit, now, hits int64) Result {
	rate := int64(l.DripRate / time.Microsecond)
	counter, ts := min(max(s.Counter, 0), maxValue), min(max(s.Timestamp, -maxValue), maxValue)
	hits = min(max(hits, -maxValue), maxValue)
	since := elapsed(ts, now)

	// 1. Drip: whole drips since the last one leave the bucket. If time went
	// backwards (since < 0), nothing leaks until it has caught up.
	if counter > 0 && since > 0 {
		drips := since / rate
		if drips >= ceilDiv(counter, l.DripSize) {
			counter = 0
		} else if drips > 0 {
			counter -= drips * l.DripSize // < counter: no overflow
			ts += drips * rate            // <= now: no overflow
			since -= drips * rate
		}
	}
	if counter == 0 {
		// An empty bucket starts leaking from its next request, not before.
		ts, since = now, 0
	}

	// 2. Check, and charge what fits.
	var r Result
	switch {
	case hits < 0:
		r.Admitted = true
		counter += hits // counter >= 0: no overflow
		if counter <= 0 {
			counter, ts, since = 0, now, 0
		}
	case hits <= l.Size-counter:
		r.Admitted = true
		counter += hits
	}
	r.State = State{Counter: counter, Timestamp: ts}

	// 3. Report, in microseconds until converted.
	clear := drainTime(counter, l.DripSize, rate, since)
	if r.Admitted && counter < l.Size {
		r.Remaining = l.Size - counter
	}
	if !r.Admitted {
		reset := addSat(clear, rate)
		if hits <= l.Size {
			need := hits - (l.Size - counter) // > 0: the hits did not fit
			reset = drainTime(need, l.DripSize, rate, since)
		}
		r.Reset = micros(reset)
	}
	r.Clear = micros(clear)
	if counter > 0 {
		r.TTL = micros(addSat(clear, rate))
	}
	return r
}

// maxValue bounds every count and every time in microseconds (2^53, some
// 285 years): values beyond saturate to it. Below it, every value and every
// product the algorithm takes is exact in a double, so the Redis script,
// whose numbers are doubles, reaches the same results bit for bit.
const maxValue = 1 << 53

// elapsed returns now - ts in microseconds, within [-maxValue, maxValue]:
// negative when time went backwards, saturated for a corrupt timestamp.
func elapsed(ts, now int64) int64 {
	d := now - ts
	switch {
	case now > ts && (d < 0 || d > maxValue):
		return maxValue
	case now < ts && (d > 0 || d < -maxValue):
		return -maxValue
	}
	return d
}

// drainTime returns how long, in microseconds, until n requests have leaked
// from a bucket whose last drip was since microseconds ago. After time went
// backwards since is negative, and the wait longer by as much.
func drainTime(n, dripSize, rate, since int64) int64 {
	if n <= 0 {
		return 0
	}
	return min(mulSat(ceilDiv(n, dripSize), rate)-since, maxValue) // since < rate: > 0
}

// micros converts microseconds, at most maxValue, to a Duration.
func micros(us int64) time.Duration {
	return time.Duration(us) * time.Microsecond
}

// mulSat returns a*b for a, b >= 0, or maxValue if that is more.
func mulSat(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > maxValue {
		return maxValue
	}
	return int64(lo)
}

// addSat returns a+b for a, b in [0, maxValue], or maxValue if that is more.
func addSat(a, b int64) int64 {
	return min(a+b, maxValue)
}

// Equal reports whether s and o are the same state (nil and empty counts
// alike).
func (s State) Equal(o State) bool {
	return s.Counter == o.Counter && s.Timestamp == o.Timestamp && slices.Equal(s.Counts, o.Counts)
}

// Equal reports whether r and o are the same result.
func (r Result) Equal(o Result) bool {
	return r.Admitted == o.Admitted && r.Remaining == o.Remaining && r.Clear == o.Clear &&
		r.Reset == o.Reset && r.TTL == o.TTL && r.State.Equal(o.State)
}
