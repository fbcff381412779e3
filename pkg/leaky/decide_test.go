package leaky

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const ms = time.Millisecond

// step is one call of Bucket.Decide at t0+at, carrying the state from the step
// before. Fields of want that are zero are still compared.
type step struct {
	at   time.Duration
	hits int64
	want want
}

type want struct {
	admitted  bool
	counter   int64
	remaining int64
	clear     time.Duration
	reset     time.Duration
	ttl       time.Duration
}

func runSteps(t *testing.T, b Bucket, start State, steps []step) {
	t.Helper()
	s := start
	for i, st := range steps {
		r := b.Decide(s, t0.Add(st.at), st.hits)
		got := want{r.Admitted, r.State.Counter, r.Remaining, r.Clear, r.Reset, r.TTL}
		if got != st.want {
			t.Fatalf("step %d (t0+%s, hits %d): got %+v, want %+v", i, st.at, st.hits, got, st.want)
		}
		s = r.State
	}
}

func TestDecideDripsOnePerRate(t *testing.T) {
	b := Bucket{Size: 3, DripRate: time.Second, DripSize: 1}
	runSteps(t, b, State{}, []step{
		{0, 1, want{true, 1, 2, 1000 * ms, 0, 2000 * ms}},
		{0, 1, want{true, 2, 1, 2000 * ms, 0, 3000 * ms}},
		{0, 1, want{true, 3, 0, 3000 * ms, 0, 4000 * ms}},
		{0, 1, want{false, 3, 0, 3000 * ms, 1000 * ms, 4000 * ms}},
		{999 * ms, 1, want{false, 3, 0, 2001 * ms, 1 * ms, 3001 * ms}},
		{1000 * ms, 1, want{true, 3, 0, 3000 * ms, 0, 4000 * ms}},
		{1500 * ms, 1, want{false, 3, 0, 2500 * ms, 500 * ms, 3500 * ms}},
		{1500 * ms, 0, want{true, 3, 0, 2500 * ms, 0, 3500 * ms}}, // a peek at a full bucket passes
		{3999 * ms, 0, want{true, 1, 2, 1 * ms, 0, 1001 * ms}},
		{4000 * ms, 0, want{true, 0, 3, 0, 0, 0}}, // empty: nothing to keep
		{60 * time.Second, 2, want{true, 2, 1, 2000 * ms, 0, 3000 * ms}},
	})
}

func TestDecideDripSizeAboveOne(t *testing.T) {
	b := Bucket{Size: 10, DripRate: time.Second, DripSize: 4}
	runSteps(t, b, State{}, []step{
		{0, 10, want{true, 10, 0, 3000 * ms, 0, 4000 * ms}}, // 3 drips of 4 empty 10
		{999 * ms, 1, want{false, 10, 0, 2001 * ms, 1 * ms, 3001 * ms}},
		{1000 * ms, 0, want{true, 6, 4, 2000 * ms, 0, 3000 * ms}},
		{1200 * ms, 5, want{false, 6, 0, 1800 * ms, 800 * ms, 2800 * ms}}, // needs 1 more: one drip
		{1200 * ms, 4, want{true, 10, 0, 2800 * ms, 0, 3800 * ms}},
		{2000 * ms, 9, want{false, 6, 0, 2000 * ms, 2000 * ms, 3000 * ms}}, // needs 5: two drips
		{4000 * ms, 9, want{true, 9, 1, 3000 * ms, 0, 4000 * ms}},
	})
}

func TestDecideHitsAboveOne(t *testing.T) {
	b := Bucket{Size: 5, DripRate: 200 * ms, DripSize: 1}
	runSteps(t, b, State{}, []step{
		{0, 3, want{true, 3, 2, 600 * ms, 0, 800 * ms}},
		{0, 3, want{false, 3, 0, 600 * ms, 200 * ms, 800 * ms}},
		{100 * ms, 3, want{false, 3, 0, 500 * ms, 100 * ms, 700 * ms}},
		{200 * ms, 3, want{true, 5, 0, 1000 * ms, 0, 1200 * ms}},
		// More hits than the bucket holds never fit: Reset is a full drain
		// plus one drip, and nothing is charged.
		{200 * ms, 6, want{false, 5, 0, 1000 * ms, 1200 * ms, 1200 * ms}},
		{10 * time.Second, 6, want{false, 0, 0, 0, 200 * ms, 0}},
	})
}

func TestDecideSizeZeroRejectsEverything(t *testing.T) {
	b := Bucket{Size: 0, DripRate: time.Minute, DripSize: 1}
	runSteps(t, b, State{}, []step{
		{0, 1, want{false, 0, 0, 0, time.Minute, 0}},
		{time.Hour, 1, want{false, 0, 0, 0, time.Minute, 0}},
		{time.Hour, 0, want{true, 0, 0, 0, 0, 0}}, // a peek is not a request
	})
}

func TestDecideTimeGoingBackwards(t *testing.T) {
	b := Bucket{Size: 2, DripRate: time.Second, DripSize: 1}
	runSteps(t, b, State{}, []step{
		{10 * time.Second, 2, want{true, 2, 0, 2000 * ms, 0, 3000 * ms}},
		// The clock steps back 5s: nothing leaks, nothing is gained, and
		// every wait is 5s longer, until the clock has caught up.
		{5 * time.Second, 1, want{false, 2, 0, 7000 * ms, 6000 * ms, 8000 * ms}},
		{5 * time.Second, 0, want{true, 2, 0, 7000 * ms, 0, 8000 * ms}},
		{10500 * ms, 1, want{false, 2, 0, 1500 * ms, 500 * ms, 2500 * ms}},
		// Back in step: leaking resumes from the last drip at 10s.
		{11 * time.Second, 1, want{true, 2, 0, 2000 * ms, 0, 3000 * ms}},
	})
}

func TestDecideRefund(t *testing.T) {
	b := Bucket{Size: 5, DripRate: time.Second, DripSize: 1}
	runSteps(t, b, State{}, []step{
		{0, 5, want{true, 5, 0, 5000 * ms, 0, 6000 * ms}},
		{500 * ms, -2, want{true, 3, 2, 2500 * ms, 0, 3500 * ms}},
		{500 * ms, -9, want{true, 0, 5, 0, 0, 0}},
		{600 * ms, 1, want{true, 1, 4, 1000 * ms, 0, 2000 * ms}}, // leaks from 600ms, not 0
	})
}

func TestDecideLargeValuesDoNotOverflow(t *testing.T) {
	huge := Bucket{Size: MaxSize, DripRate: 100 * 365 * 24 * time.Hour, DripSize: 1}
	cases := []struct {
		name string
		s    State
		b    Bucket
		hits int64
	}{
		{"corrupt state", State{Counter: math.MaxInt64, Timestamp: math.MinInt64}, Bucket{Size: 5, DripRate: time.Second, DripSize: 1}, 1},
		{"counter from the future", State{Counter: math.MaxInt64, Timestamp: math.MaxInt64}, huge, 1},
		{"max hits", State{}, huge, math.MaxInt64},
		{"min hits", State{Counter: 3, Timestamp: t0.UnixMicro()}, huge, math.MinInt64},
		{"full huge bucket", State{}, huge, MaxSize},
		{"over huge bucket", State{Counter: MaxSize, Timestamp: t0.UnixMicro()}, huge, MaxSize},
		{"huge drip size", State{Counter: math.MaxInt64 - 1, Timestamp: 0}, Bucket{Size: MaxSize, DripRate: time.Microsecond, DripSize: MaxSize}, 1},
	}
	for _, c := range cases {
		r := c.b.Decide(c.s, t0, c.hits)
		if r.State.Counter < 0 || r.Remaining < 0 || r.Clear < 0 || r.Reset < 0 || r.TTL < 0 {
			t.Errorf("%s: negative field in %+v", c.name, r)
		}
		if !r.Admitted && r.Reset <= 0 {
			t.Errorf("%s: rejected without a positive reset: %+v", c.name, r)
		}
		if r.State.Counter > 0 && r.TTL < r.Clear {
			t.Errorf("%s: TTL %s shorter than clear %s", c.name, r.TTL, r.Clear)
		}
	}
	// A gap of 56 years drains any bucket.
	r := Bucket{Size: 5, DripRate: time.Second, DripSize: 1}.Decide(State{Counter: 4, Timestamp: 0}, t0, 1)
	if !r.Admitted || r.State.Counter != 1 || r.State.Timestamp != t0.UnixMicro() {
		t.Errorf("long gap: got %+v, want an admitted bucket restarted at t0", r)
	}
	// The full huge bucket is admitted and reports a clear time saturated
	// at 2^53 microseconds.
	r = huge.Decide(State{}, t0, MaxSize)
	if !r.Admitted || r.Clear != time.Duration(1<<53)*time.Microsecond || r.TTL != r.Clear {
		t.Errorf("full huge bucket: got %+v, want admitted with a saturated clear", r)
	}
}

func TestDecideReadsInvalidBucketsAsNearestValid(t *testing.T) {
	// Zero Bucket: size 0, drips every microsecond: rejects everything.
	r := Bucket{}.Decide(State{}, t0, 1)
	if r.Admitted || r.Reset != time.Microsecond {
		t.Errorf("zero bucket: got %+v, want rejected with a 1us reset", r)
	}
	r = Bucket{Size: -4, DripRate: -time.Second, DripSize: -1}.Decide(State{}, t0, 1)
	if r.Admitted {
		t.Errorf("negative bucket: got %+v, want rejected", r)
	}
}

// TestCharge: hits that do not fit are added all the same, past the size;
// the bucket then reports over its size until the debt has leaked away.
func TestCharge(t *testing.T) {
	b := Bucket{Size: 10, DripRate: time.Second, DripSize: 1}
	s := b.Charge(State{}, t0, 6)
	if s != (State{Counter: 6, Timestamp: t0.UnixMicro()}) {
		t.Fatalf("into an empty bucket: %+v", s)
	}
	s = b.Charge(s, t0.Add(500*ms), 6) // nothing leaked yet: 12
	runSteps(t, b, s, []step{
		{500 * ms, 0, want{false, 12, 0, 11500 * ms, 1500 * ms, 12500 * ms}},
		{2 * time.Second, 0, want{true, 10, 0, 10 * time.Second, 0, 11 * time.Second}}, // back within
		{2 * time.Second, 1, want{false, 10, 0, 10 * time.Second, 1 * time.Second, 11 * time.Second}},
	})
	if got := b.Charge(State{Counter: 3, Timestamp: t0.UnixMicro()}, t0.Add(time.Hour), 2); got.Counter != 2 || got.Timestamp != t0.Add(time.Hour).UnixMicro() {
		t.Errorf("after a long idle: %+v, want 2 from the charge's instant", got)
	}
	for _, hits := range []int64{MaxSize, math.MaxInt64} {
		if got := b.Charge(State{Counter: 7, Timestamp: t0.UnixMicro()}, t0, hits); got.Counter != MaxSize {
			t.Errorf("%d hits: counter %d, want saturated at %d", hits, got.Counter, int64(MaxSize))
		}
	}
	if got := b.Charge(State{Counter: 7, Timestamp: t0.UnixMicro()}, t0, math.MinInt64); got.Counter != 0 {
		t.Errorf("a huge refund: counter %d, want 0", got.Counter)
	}
}
