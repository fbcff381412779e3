package window

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 0, 0, time.UTC) // on a minute: every window and sub-window starts here

// step is one decision at t0+at, charged when admitted (as a store whose
// request has this one bucket does), and what it must report.
type step struct {
	at                time.Duration
	hits              int64
	admitted          bool
	remaining         int64
	clear, reset, ttl time.Duration
}

func (s step) check(t *testing.T, i int, r Result) {
	t.Helper()
	got := step{s.at, s.hits, r.Admitted, r.Remaining, r.Clear, r.Reset, r.TTL}
	if got != s {
		t.Errorf("step %d (t0+%s, %d hits):\n got admitted %v remaining %d clear %s reset %s ttl %s\nwant admitted %v remaining %d clear %s reset %s ttl %s",
			i, s.at, s.hits, got.admitted, got.remaining, got.clear, got.reset, got.ttl, s.admitted, s.remaining, s.clear, s.reset, s.ttl)
	}
}

// runSteps runs the steps in order through decide, charging each admitted
// one, as a store whose request has this one bucket does.
func runSteps(t *testing.T, steps []step, decide func(time.Time, int64) Result, charge func(time.Time, int64)) {
	t.Helper()
	for i, st := range steps {
		now := t0.Add(st.at)
		r := decide(now, st.hits)
		st.check(t, i, r)
		if r.Admitted {
			charge(now, st.hits)
		}
	}
}

func TestSlidingSteps(t *testing.T) {
	const sec = time.Second
	l := Sliding{Limit: 5, Window: 10 * sec, Resolution: sec}
	steps := []step{
		{0, 1, true, 4, 10 * sec, 0, 10 * sec},
		{0, 3, true, 1, 10 * sec, 0, 10 * sec},
		{0, 2, false, 0, 10 * sec, 10 * sec, 10 * sec},                                             // 4 + 2 > 5: the oldest (t0's) leave at t0+10s
		{2500 * time.Millisecond, 1, true, 0, 9500 * time.Millisecond, 0, 9500 * time.Millisecond}, // in t0+2s's sub-window, which leaves at t0+12s
		{9500 * time.Millisecond, 1, false, 0, 2500 * time.Millisecond, 500 * time.Millisecond, 2500 * time.Millisecond},
		{9500 * time.Millisecond, 0, true, 0, 2500 * time.Millisecond, 0, 2500 * time.Millisecond}, // a peek at a full window
		{10 * sec, 1, true, 3, 10 * sec, 0, 10 * sec},                                              // t0's 4 have left
		{10 * sec, 9, false, 0, 10 * sec, 10 * sec, 10 * sec},                                      // over the limit: never fits, a window
		{10 * sec, -1, true, 4, 10 * sec, 0, 10 * sec},                                             // a refund, from the newest
		{5 * sec, 1, true, 3, 15 * sec, 0, 15 * sec},                                               // the clock stepped back: counted as t0+10s
		{100 * sec, 0, true, 5, 0, 0, 0},                                                           // long idle: empty
	}
	var s SlidingState
	runSteps(t, steps, func(now time.Time, hits int64) Result { return l.Decide(s, now, hits) },
		func(now time.Time, hits int64) { l.Charge(&s, now, hits) })
}

func TestSlidingResetWalksOldestFirst(t *testing.T) {
	const sec = time.Second
	l := Sliding{Limit: 6, Window: 4 * sec, Resolution: sec}
	var s SlidingState
	for i, hits := range []int64{1, 2, 3} { // sub-windows t0, t0+1s, t0+2s
		l.Charge(&s, t0.Add(time.Duration(i)*sec), hits)
	}
	now := t0.Add(3*sec + 200*time.Millisecond)
	for _, c := range []struct {
		hits  int64
		reset time.Duration
	}{
		{1, 800 * time.Millisecond},  // t0's 1 leaves at t0+4s
		{3, 1800 * time.Millisecond}, // then t0+1s's 2 at t0+5s: 3 more fit
		{6, 2800 * time.Millisecond}, // and t0+2s's 3 at t0+6s
		{7, 4 * sec},                 // never: a window
	} {
		r := l.Decide(s, now, c.hits)
		if r.Admitted || r.Reset != c.reset {
			t.Errorf("%d hits on 6 of 6: admitted %v reset %s, want rejected, reset %s", c.hits, r.Admitted, r.Reset, c.reset)
		}
	}
}

func TestFixedSteps(t *testing.T) {
	const sec = time.Second
	l := Fixed{Limit: 3, Window: 10 * sec}
	steps := []step{
		{0, 2, true, 1, 10 * sec, 0, 10 * sec},
		{4 * sec, 1, true, 0, 6 * sec, 0, 6 * sec},
		{9 * sec, 1, false, 0, sec, sec, sec},
		{9 * sec, 0, true, 0, sec, 0, sec},
		{10 * sec, 3, true, 0, 10 * sec, 0, 10 * sec}, // a new window: the whole limit again (the edge burst)
		{12 * sec, 4, false, 0, 8 * sec, 8 * sec, 8 * sec},
		{12 * sec, -2, true, 2, 8 * sec, 0, 8 * sec},
		{5 * sec, 1, true, 1, 15 * sec, 0, 15 * sec}, // the clock stepped back: still the window of t0+10s
		{30 * sec, 0, true, 3, 0, 0, 0},
	}
	var s FixedState
	runSteps(t, steps, func(now time.Time, hits int64) Result { return l.Decide(s, now, hits) },
		func(now time.Time, hits int64) { l.Charge(&s, now, hits) })
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		l    interface{ Validate() error }
		want string
	}{
		{Sliding{Limit: 5, Window: time.Minute}, ""},
		{Sliding{Limit: 5, Window: time.Minute, Resolution: 7 * time.Second}, "does not divide"},
		{Sliding{Limit: 5, Window: time.Hour, Resolution: time.Second}, "at most 1000 allowed"},
		{Sliding{Limit: -1, Window: time.Minute}, "limit must be"},
		{Sliding{Limit: 1, Window: 0}, "window must be"},
		{Sliding{Limit: 1, Window: 5 * time.Microsecond}, "resolution must be"},
		{Fixed{Limit: 1, Window: time.Minute}, ""},
		{Fixed{Limit: 1, Window: time.Nanosecond}, "window must be"},
	} {
		err := c.l.Validate()
		if got := fmt.Sprint(err); (c.want == "") != (err == nil) || (err != nil && !strings.Contains(got, c.want)) {
			t.Errorf("%+v: %v, want %q", c.l, err, c.want)
		}
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && (s[:len(sub)] == sub || contains(s[1:], sub)))
}

func BenchmarkSlidingDecide(b *testing.B) {
	l := Sliding{Limit: 1000, Window: time.Minute, Resolution: time.Second}
	var s SlidingState
	for i := range 60 {
		l.Charge(&s, t0.Add(time.Duration(i)*time.Second), 10)
	}
	now := t0.Add(60 * time.Second)
	b.ReportAllocs()
	for b.Loop() {
		l.Decide(s, now, 1)
	}
}

func BenchmarkFixedDecide(b *testing.B) {
	l := Fixed{Limit: 1000, Window: time.Minute}
	s := FixedState{Index: t0.UnixMicro() / time.Minute.Microseconds(), Count: 10}
	b.ReportAllocs()
	for b.Loop() {
		l.Decide(s, t0, 1)
	}
}

// model is a sliding window counted the slow way: hits per sub-window in a
// map, summed over the window at every question.
type model struct {
	l    Sliding
	hits map[int64]int64 // sub-window number: hits
}

func (m model) count(sub int64) (n int64) {
	for k := sub - int64(m.l.SubWindows()) + 1; k <= sub; k++ {
		n += m.hits[k]
	}
	return n
}

// TestSlidingMatchesModel runs random sequences through Decide and Charge
// and through the model, and wants the same answers: admitted, remaining,
// and the reset and clear found by walking the sub-window boundaries ahead.
func TestSlidingMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 300 {
		res := time.Duration(1+rng.IntN(5)) * time.Second
		l := Sliding{Limit: int64(rng.IntN(20)), Window: res * time.Duration(1+rng.IntN(8)), Resolution: res}
		m := model{l: l, hits: map[int64]int64{}}
		var s SlidingState
		now := t0.Add(time.Duration(rng.Int64N(int64(time.Minute))))
		for i := range 40 {
			now = now.Add(time.Duration(rng.Int64N(int64(l.Window / 2))))
			hits := int64(rng.IntN(6))
			r := l.Decide(s, now, hits)
			us, resUs := now.UnixMicro(), res.Microseconds()
			cur := us / resUs
			count := m.count(cur)
			want := Result{Admitted: count+hits <= l.Limit}
			after := count
			if want.Admitted {
				after += hits
				m.hits[cur] += hits
			}
			if want.Admitted {
				want.Remaining = max(l.Limit-after, 0)
			}
			n := int64(l.SubWindows())
			for j := int64(1); j <= n && after > 0; j++ { // the first boundary with nothing left
				if m.count(cur+j) == 0 {
					want.Clear = time.Duration((cur+j)*resUs-us) * time.Microsecond
					break
				}
			}
			if !want.Admitted {
				want.Reset = l.Window
				for j := int64(1); j <= n && hits <= l.Limit; j++ {
					if m.count(cur+j)+hits <= l.Limit {
						want.Reset = time.Duration((cur+j)*resUs-us) * time.Microsecond
						break
					}
				}
			}
			want.TTL = want.Clear
			if r != want {
				t.Fatalf("round %d step %d (%+v, t0+%s, %d hits): got %+v, want %+v", round, i, l, now.Sub(t0), hits, r, want)
			}
			if r.Admitted {
				l.Charge(&s, now, hits)
			}
		}
	}
}

// TestChargeSaturates: a charge past the limit (a limit that charges
// always) of any size saturates the count at MaxLimit, never wrapping.
func TestChargeSaturates(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	f := Fixed{Limit: 10, Window: time.Minute}
	fs := FixedState{}
	f.Charge(&fs, now, 7)
	f.Charge(&fs, now, math.MaxInt64)
	if fs.Count != MaxLimit {
		t.Errorf("fixed: count %d, want %d", fs.Count, int64(MaxLimit))
	}
	if r := f.Decide(fs, now, 0); r.Admitted || r.Reset != time.Minute {
		t.Errorf("fixed, over: %+v, want rejected until the window's end", r)
	}
	sl := Sliding{Limit: 10, Window: time.Minute, Resolution: time.Second}
	ss := SlidingState{}
	sl.Charge(&ss, now, math.MaxInt64)
	sl.Charge(&ss, now, math.MaxInt64)
	if ss.Counts[0] != MaxLimit {
		t.Errorf("sliding: count %d, want %d", ss.Counts[0], int64(MaxLimit))
	}
	sl.Charge(&ss, now, math.MinInt64)
	if ss.Counts[0] != 0 {
		t.Errorf("sliding, a huge refund: count %d, want 0", ss.Counts[0])
	}
}
