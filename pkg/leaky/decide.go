package leaky

import (
	"math/bits"
	"time"
)

// State is what a store keeps for one leaky bucket. The zero State is an
// empty bucket.
type State struct {
	// Counter is the number of requests in the bucket.
	Counter int64
	// Timestamp is the Unix time in microseconds of the bucket's last drip,
	// or of its first request after it was empty.
	Timestamp int64
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

// Decide drips the bucket in state s to t, admits the hits when counter
// + hits <= Size, and charges them when it does. Hits of 0 check without
// charging; negative hits give requests back (the counter does not go
// below 0). Time going backwards drips nothing.
//
// Decide is pure: the same arguments always give the same Result, and it
// allocates nothing. Fields of b out of range are read as their nearest
// valid value (see Bucket.Validate). Every step below has its line in the
// Redis script, in microseconds as here.
func (b Bucket) Decide(s State, t time.Time, hits int64) Result {
	b, now := b.Clamped(), t.UnixMicro()
	rate := int64(b.DripRate / time.Microsecond)
	counter, ts := min(max(s.Counter, 0), MaxValue), min(max(s.Timestamp, -MaxValue), MaxValue)
	hits = min(max(hits, -MaxValue), MaxValue)
	since := elapsed(ts, now)

	// 1. Drip: whole drips since the last one leave the bucket. If time went
	// backwards (since < 0), nothing leaks until it has caught up.
	if counter > 0 && since > 0 {
		drips := since / rate
		if drips >= ceilDiv(counter, b.DripSize) {
			counter = 0
		} else if drips > 0 {
			counter -= drips * b.DripSize // < counter: no overflow
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
	case hits <= b.Size-counter:
		r.Admitted = true
		counter += hits
	}
	r.State = State{Counter: counter, Timestamp: ts}

	// 3. Report, in microseconds until converted.
	clear := drainTime(counter, b.DripSize, rate, since)
	if r.Admitted && counter < b.Size {
		r.Remaining = b.Size - counter
	}
	if !r.Admitted {
		reset := addSat(clear, rate)
		if hits <= b.Size {
			need := hits - (b.Size - counter) // > 0: the hits did not fit
			reset = drainTime(need, b.DripSize, rate, since)
		}
		r.Reset = micros(reset)
	}
	r.Clear = micros(clear)
	if counter > 0 {
		r.TTL = micros(addSat(clear, rate))
	}
	return r
}

// Charge adds hits to the bucket whether or not they fit: usage already
// spent, which a limit that charges always records past its size. It
// drips s to t first; the counter saturates at MaxSize (a debt of more is
// kept as MaxSize) and never goes below 0. Decide with 0 hits on the state
// returned reports the bucket: over its size, with the time until it is
// back within, until the debt has leaked away.
//
// Charge is pure and allocates nothing.
func (b Bucket) Charge(s State, t time.Time, hits int64) State {
	st := b.Decide(s, t, 0).State
	st.Counter = min(max(st.Counter+min(max(hits, -MaxSize), MaxSize), 0), MaxSize)
	if st.Counter == 0 {
		st.Timestamp = t.UnixMicro()
	}
	return st
}

// elapsed returns now - ts in microseconds, within [-MaxValue, MaxValue]:
// negative when time went backwards, saturated for a corrupt timestamp.
func elapsed(ts, now int64) int64 {
	d := now - ts
	switch {
	case now > ts && (d < 0 || d > MaxValue):
		return MaxValue
	case now < ts && (d > 0 || d < -MaxValue):
		return -MaxValue
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
	return min(mulSat(ceilDiv(n, dripSize), rate)-since, MaxValue) // since < rate: > 0
}

// micros converts microseconds, at most MaxValue, to a Duration.
func micros(us int64) time.Duration {
	return time.Duration(us) * time.Microsecond
}

// mulSat returns a*b for a, b >= 0, or MaxValue if that is more.
func mulSat(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > MaxValue {
		return MaxValue
	}
	return int64(lo)
}

// addSat returns a+b for a, b in [0, MaxValue], or MaxValue if that is more.
func addSat(a, b int64) int64 {
	return min(a+b, MaxValue)
}

// ceilDiv returns ceil(a/b) for a >= 0, b >= 1, without overflow.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}
