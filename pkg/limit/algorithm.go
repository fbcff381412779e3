package limit

import (
	"fmt"
	"slices"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
	"github.com/envoy-rls/envoy-rls/pkg/window"
)

// Algorithm is how a Limit counts. The zero Algorithm is the leaky bucket,
// so a Limit written with only its bucket fields is one.
type Algorithm uint8

const (
	// LeakyBucket holds at most Size requests and leaks DripSize of them
	// every DripRate.
	LeakyBucket Algorithm = iota
	// SlidingWindow admits at most Size hits in any Window, counted in
	// sub-windows of Resolution (package window).
	SlidingWindow
	// FixedWindow admits at most Size hits in each Window, windows aligned
	// on the Unix epoch: envoyproxy/ratelimit's counting.
	FixedWindow
)

// Algorithms lists every algorithm.
var Algorithms = []Algorithm{LeakyBucket, SlidingWindow, FixedWindow}

var algorithmNames = [...]string{LeakyBucket: "leaky_bucket", SlidingWindow: "sliding_window", FixedWindow: "fixed_window"}

// String returns the algorithm's name as the config writes it, e.g.
// "sliding_window".
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

// ParseAlgorithm parses an algorithm's config name.
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range Algorithms {
		if s == algorithmNames[a] {
			return a, nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q (want leaky_bucket, sliding_window or fixed_window)", s)
}

// Leaky returns l as a leaky bucket; l.Algorithm must be LeakyBucket for
// it to mean anything.
func (l Limit) Leaky() leaky.Bucket {
	return leaky.Bucket{Size: l.Size, DripRate: l.DripRate, DripSize: l.DripSize}
}

// Sliding returns l as a sliding window, its fields moved into their valid
// range (so that a decision never divides by zero); l.Algorithm must be
// SlidingWindow for it to mean anything.
func (l Limit) Sliding() window.Sliding {
	w := window.Sliding{Limit: min(max(l.Size, 0), window.MaxLimit), Window: clampWindow(l.Window), Resolution: l.Resolution}
	if w.Resolution == 0 {
		w.Resolution = w.Window / 10
	}
	w.Resolution = clampWindow(w.Resolution.Truncate(time.Microsecond))
	if w.Resolution > w.Window {
		w.Resolution = w.Window
	}
	// A whole number of sub-windows, at most MaxSubWindows.
	if n := w.Window / w.Resolution; n > window.MaxSubWindows {
		w.Resolution = (w.Window + window.MaxSubWindows - 1) / window.MaxSubWindows
		w.Resolution = (w.Resolution + time.Microsecond - 1).Truncate(time.Microsecond)
	}
	w.Window = w.Window / w.Resolution * w.Resolution
	return w
}

// Fixed returns l as a fixed window, its fields moved into their valid
// range; l.Algorithm must be FixedWindow for it to mean anything.
func (l Limit) Fixed() window.Fixed {
	return window.Fixed{Limit: min(max(l.Size, 0), window.MaxLimit), Window: clampWindow(l.Window)}
}

func clampWindow(d time.Duration) time.Duration {
	return min(max(d.Truncate(time.Microsecond), time.Microsecond), window.MaxWindow)
}

// decideOne decides one bucket at now without the all-or-nothing rule: for
// a leaky bucket the hits are charged if they fit; a window's State is left
// as it was (charge adds the hits).
func decideOne(s State, l Limit, now time.Time, hits int64) Result {
	switch l.Algorithm {
	case SlidingWindow:
		w := l.Sliding()
		res := w.Resolution.Microseconds()
		r := w.Decide(window.SlidingState{Newest: floorDiv(s.Timestamp, res), Counts: s.Counts}, now, hits)
		return fromWindow(r, s)
	case FixedWindow:
		if l.IsCalendar() {
			return decideCalendar(s, l, now, hits)
		}
		w := l.Fixed()
		win := w.Window.Microseconds()
		r := w.Decide(window.FixedState{Index: floorDiv(s.Timestamp, win), Count: s.Counter}, now, hits)
		return fromWindow(r, s)
	}
	r := l.Leaky().Decide(leaky.State{Counter: s.Counter, Timestamp: s.Timestamp}, now, hits)
	return Result{Admitted: r.Admitted, State: State{Counter: r.State.Counter, Timestamp: r.State.Timestamp},
		Remaining: r.Remaining, Clear: r.Clear, Reset: r.Reset, TTL: r.TTL}
}

// charge adds a window's admitted hits to its State (a leaky bucket's
// decision has charged them already). A sliding window's counts are changed
// in place.
func charge(r *Result, l Limit, now time.Time, hits int64) {
	switch l.Algorithm {
	case SlidingWindow:
		w := l.Sliding()
		res := w.Resolution.Microseconds()
		st := window.SlidingState{Newest: floorDiv(r.State.Timestamp, res), Counts: r.State.Counts}
		w.Charge(&st, now, hits)
		r.State = State{Counter: sum(st.Counts), Timestamp: st.Newest * res, Counts: st.Counts}
	case FixedWindow:
		if l.IsCalendar() {
			chargeCalendar(r, l, now, hits)
			return
		}
		w := l.Fixed()
		win := w.Window.Microseconds()
		st := window.FixedState{Index: floorDiv(r.State.Timestamp, win), Count: r.State.Counter}
		w.Charge(&st, now, hits)
		r.State = State{Counter: st.Count, Timestamp: st.Index * win}
	}
}

// force charges hits that did not fit to a bucket that charges always,
// past its limit, and reports the bucket as it then stands: not admitted,
// nothing remaining, and the time until it is back within its limit.
func force(s State, l Limit, now time.Time, hits int64) Result {
	switch l.Algorithm {
	case SlidingWindow, FixedWindow:
		r := Result{State: s}
		charge(&r, l, now, hits)
		s = r.State
	default:
		st := l.Leaky().Charge(leaky.State{Counter: s.Counter, Timestamp: s.Timestamp}, now, hits)
		s = State{Counter: st.Counter, Timestamp: st.Timestamp}
	}
	r := decideOne(s, l, now, 0)
	r.Admitted, r.Remaining = false, 0
	return r
}

// Uncharge takes hits back from a window's state, from the (sub-)window
// they were charged to at the instant at, if the state still counts it:
// the undo of a charge another slot's rejection calls off. A sliding
// window's counts are copied, not changed. A leaky bucket is returned as
// it is: its undo compares states instead.
func Uncharge(s State, l Limit, at time.Time, hits int64) State {
	switch l.Algorithm {
	case SlidingWindow:
		res := l.Sliding().Resolution.Microseconds()
		back := floorDiv(s.Timestamp, res) - floorDiv(at.UnixMicro(), res)
		if back < 0 || back >= int64(len(s.Counts)) {
			return s
		}
		counts := slices.Clone(s.Counts)
		counts[back] -= min(counts[back], hits)
		return State{Counter: s.Counter - (s.Counts[back] - counts[back]), Timestamp: s.Timestamp, Counts: counts}
	case FixedWindow:
		if s.Counter == 0 {
			return s
		}
		if l.IsCalendar() {
			// A charge leaves the state starting where its period does.
			if s.Timestamp != l.FixedPeriod(at.UnixMicro()).Start {
				return s
			}
		} else if win := l.Fixed().Window.Microseconds(); floorDiv(s.Timestamp, win) != floorDiv(at.UnixMicro(), win) {
			return s
		}
		if c := s.Counter - hits; c > 0 {
			return State{Counter: c, Timestamp: s.Timestamp}
		}
		return State{}
	}
	return s
}

func fromWindow(r window.Result, s State) Result {
	return Result{Admitted: r.Admitted, State: s, Remaining: r.Remaining, Clear: r.Clear, Reset: r.Reset, TTL: r.TTL}
}

func sum(counts []int64) (n int64) {
	for _, c := range counts {
		n += c
	}
	return n
}

// floorDiv is a/b rounded towards minus infinity, for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
