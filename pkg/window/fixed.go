package window

import (
	"fmt"
	"time"
)

// Fixed is a fixed-window limit, as envoyproxy/ratelimit counts: at most
// Limit hits in each Window, windows aligned on multiples of Window since
// the Unix epoch. At a window's end the count starts again from 0, so up
// to twice Limit can pass around one edge.
type Fixed struct {
	// Limit is the most hits in a window; 0 admits nothing.
	Limit int64
	// Window is the length of a window: a whole number of microseconds.
	Window time.Duration
}

// Validate reports the first field of l that is out of range.
func (l Fixed) Validate() error {
	switch {
	case l.Limit < 0 || l.Limit > MaxLimit:
		return fmt.Errorf("limit must be 0 to %d, got %d", int64(MaxLimit), l.Limit)
	case l.Window < time.Microsecond || l.Window > MaxWindow || l.Window%time.Microsecond != 0:
		return fmt.Errorf("window must be a whole number of microseconds from 1us to %s, got %s", MaxWindow, l.Window)
	}
	return nil
}

// FixedState is a fixed window's count: Count hits in window Index
// (windows numbered from the Unix epoch). The zero value is empty.
type FixedState struct {
	Index int64
	Count int64
}

// Decide decides whether hits more fit in the window holding now: count +
// hits <= Limit. It changes nothing; Charge adds the hits. Peeks, refunds
// and time going backwards are as for Sliding.Decide. Reset and Clear are
// the time to the window's end. Decide is pure; l must be valid.
func (l Fixed) Decide(s FixedState, now time.Time, hits int64) Result {
	win := l.Window.Microseconds()
	us := now.UnixMicro()
	cur := max(floorDiv(us, win), s.Index)
	var count int64
	if cur == s.Index {
		count = s.Count
	}
	r, after := admit(l.Limit, count, hits)
	end := time.Duration((cur+1)*win-us) * time.Microsecond
	if after > 0 {
		r.Clear = end
	}
	if !r.Admitted {
		r.Reset = end // hits over the limit never fit; the window's end is still when it starts again
	}
	r.TTL = r.Clear
	return r
}

// Count returns the hits the window holding now counts: more than Limit
// when a limit that charges always went past it.
func (l Fixed) Count(s FixedState, now time.Time) int64 {
	if max(floorDiv(now.UnixMicro(), l.Window.Microseconds()), s.Index) != s.Index {
		return 0
	}
	return s.Count
}

// Charge adds hits to the window holding now, as Decide admitted them or
// past the limit (a limit that charges always); the count saturates at
// MaxLimit, and a refund never takes it below 0.
func (l Fixed) Charge(s *FixedState, now time.Time, hits int64) {
	cur := max(floorDiv(now.UnixMicro(), l.Window.Microseconds()), s.Index)
	if cur != s.Index {
		s.Index, s.Count = cur, 0
	}
	s.Count = min(max(s.Count+min(max(hits, -MaxLimit), MaxLimit), 0), MaxLimit)
}
