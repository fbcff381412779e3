package window

import (
	"fmt"
	"time"
)

// MaxSubWindows is the most sub-windows a sliding window may have: a
// bucket's state holds one count for each.
const MaxSubWindows = 1000

// MaxLimit is the largest limit a window may have, as leaky.MaxSize: every
// sum stays far from overflow and exact in a double (the Redis script).
const MaxLimit = 1 << 40

// MaxWindow is the longest window: 100 years of 365 days, as the longest
// rate_limit period. Now plus a window stays below 2^53 microseconds, so
// that every time the decisions take is exact in a double.
const MaxWindow = 100 * 365 * 24 * time.Hour

// Sliding is a sliding-window limit: at most Limit hits in any Window.
// Time is cut into sub-windows of Resolution, aligned on multiples of
// Resolution since the Unix epoch; a request at now counts the hits of the
// sub-window holding now and of the Window/Resolution - 1 before it.
//
// Resolution trades precision for state: a hit leaves the count at the end
// of its sub-window's Window, up to Resolution later than exactly Window
// after it. The zero Resolution means Window/10.
type Sliding struct {
	// Limit is the most hits in a window; 0 admits nothing.
	Limit int64
	// Window is the length of the window: a whole number of Resolutions.
	Window time.Duration
	// Resolution is the length of a sub-window: a whole number of
	// microseconds; 0 means Window/10.
	Resolution time.Duration
}

// resolution returns the sub-window length, the default filled in.
func (l Sliding) resolution() time.Duration {
	if l.Resolution == 0 {
		return l.Window / 10
	}
	return l.Resolution
}

// SubWindows returns Window/Resolution: the counts a state holds.
func (l Sliding) SubWindows() int {
	r := l.resolution()
	if r <= 0 {
		return 0
	}
	return int(l.Window / r)
}

// Validate reports the first field of l that is out of range.
func (l Sliding) Validate() error {
	r := l.resolution()
	switch {
	case l.Limit < 0 || l.Limit > MaxLimit:
		return fmt.Errorf("limit must be 0 to %d, got %d", int64(MaxLimit), l.Limit)
	case l.Window <= 0 || l.Window > MaxWindow:
		return fmt.Errorf("window must be above 0 and at most %s, got %s", MaxWindow, l.Window)
	case r < time.Microsecond || r%time.Microsecond != 0:
		return fmt.Errorf("resolution must be a whole number of microseconds, at least 1us, got %s", r)
	case l.Window%r != 0:
		return fmt.Errorf("resolution %s does not divide the window %s", r, l.Window)
	case l.Window/r > MaxSubWindows:
		return fmt.Errorf("window %s has %d sub-windows of %s: at most %d allowed", l.Window, l.Window/r, r, MaxSubWindows)
	}
	return nil
}

// SlidingState is a sliding window's counts. Counts[k] holds the hits of
// the sub-window Newest-k (sub-windows numbered from the Unix epoch), for
// k below SubWindows; older ones have left the window. The zero value is
// an empty window.
type SlidingState struct {
	Newest int64
	Counts []int64
}

// Decide decides whether hits more fit in the window at now: count + hits
// <= Limit, where count sums the sub-windows in the window. It changes
// nothing: Charge adds the hits, if the caller (a request whose every
// bucket admits) says so. A peek (0 hits) is admitted unless the window is
// over its limit; a refund (negative hits) always is. Time going backwards
// counts as the newest sub-window's time: nothing leaves until it has
// caught up.
//
// Decide is pure and allocates nothing; l must be valid.
func (l Sliding) Decide(s SlidingState, now time.Time, hits int64) Result {
	res := l.resolution().Microseconds()
	n := int64(l.SubWindows())
	us := now.UnixMicro()
	cur := max(floorDiv(us, res), s.Newest)
	shift := cur - s.Newest // sub-windows that passed since the newest count
	var count int64
	for k := int64(0); k+shift < n && k < int64(len(s.Counts)); k++ {
		count += s.Counts[k]
	}
	r, after := admit(l.Limit, count, hits)
	// A sub-window k back from cur leaves the window when cur+n-k begins.
	leaves := func(k int64) time.Duration { return time.Duration((cur+n-k)*res-us) * time.Microsecond }
	if r.Admitted && hits > 0 {
		r.Clear = leaves(0) // the current sub-window now holds hits
	} else {
		for k := int64(0); k+shift < n && k < int64(len(s.Counts)); k++ {
			if after > 0 && s.Counts[k] > 0 {
				r.Clear = leaves(k + shift)
				break
			}
		}
	}
	if !r.Admitted {
		r.Reset = l.Window // hits over the limit never fit: a whole window
		if hits <= l.Limit {
			need := count + hits - l.Limit // hits that must leave first
			for k := n - 1 - shift; k >= 0; k-- {
				if k < int64(len(s.Counts)) {
					need -= s.Counts[k]
				}
				if need <= 0 {
					r.Reset = leaves(k + shift)
					break
				}
			}
		}
	}
	r.TTL = r.Clear
	return r
}

// Count returns the hits the window counts at now: more than Limit when a
// limit that charges always went past it.
func (l Sliding) Count(s SlidingState, now time.Time) int64 {
	n := int64(l.SubWindows())
	shift := max(floorDiv(now.UnixMicro(), l.resolution().Microseconds()), s.Newest) - s.Newest
	var count int64
	for k := int64(0); k+shift < n && k < int64(len(s.Counts)); k++ {
		count += s.Counts[k]
	}
	return count
}

// Charge adds hits to the window at now, as Decide admitted them or past
// the limit (a limit that charges always): to the sub-window holding now
// (or, were time to go back, the newest), whose count saturates at
// MaxLimit. A refund takes hits back from the newest sub-windows first,
// none going below 0.
// s.Counts is resized to SubWindows.
func (l Sliding) Charge(s *SlidingState, now time.Time, hits int64) {
	res := l.resolution().Microseconds()
	n := l.SubWindows()
	cur := max(floorDiv(now.UnixMicro(), res), s.Newest)
	if len(s.Counts) != n {
		counts := make([]int64, n)
		copy(counts, s.Counts)
		s.Counts = counts
	}
	if shift := cur - s.Newest; shift >= int64(n) {
		clear(s.Counts)
	} else if shift > 0 {
		copy(s.Counts[shift:], s.Counts[:int64(n)-shift])
		clear(s.Counts[:shift])
	}
	s.Newest = cur
	if hits >= 0 {
		s.Counts[0] = min(s.Counts[0]+min(hits, MaxLimit), MaxLimit)
		return
	}
	hits = max(hits, -MaxLimit*MaxSubWindows) // no more than the counts can hold; -hits cannot overflow
	for k := range s.Counts {
		take := min(s.Counts[k], -hits)
		s.Counts[k] -= take
		if hits += take; hits == 0 {
			return
		}
	}
}

// floorDiv is a/b rounded towards minus infinity, for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
