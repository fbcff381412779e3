package limit

import (
	"slices"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
	"github.com/envoy-rls/envoy-rls/pkg/window"
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

// Result is the outcome of one decision for one bucket, whatever its
// algorithm: what package leaky or package window reports, with the State
// a store saves.
type Result struct {
	// Admitted reports whether the hits fit. A peek (0 hits) fits unless
	// the bucket is already past its limit; a refund (negative hits)
	// always does.
	Admitted bool
	// State is the bucket after the decision, charged when admitted.
	State State
	// Remaining is how many more hits would fit after the decision; 0 when
	// the hits did not fit.
	Remaining int64
	// Clear is the time until the bucket counts nothing.
	Clear time.Duration
	// Reset is, when the hits did not fit, the time until they would;
	// hits over the limit never fit, and Reset is then the algorithm's
	// longest wait (see package leaky and package window).
	Reset time.Duration
	// TTL is how long a store must keep State; 0 means it need not be kept.
	TTL time.Duration
}

// Decide decides whether hits more requests fit in one bucket, by its
// limit's algorithm, and charges them when they do: the decision of a
// request with this one bucket.
//
// A leaky bucket is decided by package leaky, the windows by package
// window. Hits of 0 check without charging; negative hits give requests
// back.
//
// Decide is pure: the same arguments always give the same Result. It
// allocates nothing for a leaky bucket or a fixed window (a sliding window
// charged with s.Counts nil gets new counts; otherwise s.Counts is charged
// in place). Limit fields out of range are read as their nearest valid
// value (see Limit.Validate).
func Decide(s State, l Limit, now time.Time, hits int64) Result {
	r := decideOne(s, l, now, hits)
	if r.Admitted && hits != 0 {
		charge(&r, l, now, hits)
	}
	return r
}

// Count returns what a bucket in state s counts at now: a leaky bucket's
// level once dripped, a window's hits in its window. It is more than
// l.Size when a limit that charges always went past it (its debt), or a
// reload shrank the limit.
func Count(s State, l Limit, now time.Time) int64 {
	switch l.Algorithm {
	case SlidingWindow:
		w := l.Sliding()
		return w.Count(window.SlidingState{Newest: floorDiv(s.Timestamp, w.Resolution.Microseconds()), Counts: s.Counts}, now)
	case FixedWindow:
		if l.IsCalendar() {
			return l.CalendarWindow().Count(calendarState(s), now)
		}
		w := l.Fixed()
		return w.Count(window.FixedState{Index: floorDiv(s.Timestamp, w.Window.Microseconds()), Count: s.Counter}, now)
	}
	return l.Leaky().Decide(leaky.State{Counter: s.Counter, Timestamp: s.Timestamp}, now, 0).State.Counter
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
