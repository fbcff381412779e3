package limit

import (
	"testing"
	"time"
)

// leaseStep is one call of Lease at t0+at, carrying the state from the
// step before; the units given back were granted at t0+retAt.
type leaseStep struct {
	at, retAt time.Duration
	ret, ask  int64
	granted   int64
	counter   int64 // the state's counter afterwards
}

func runLeaseSteps(t *testing.T, l Limit, steps []leaseStep) {
	t.Helper()
	var s State
	for i, st := range steps {
		g, r := Lease(s, l, t0.Add(st.at), st.ret, t0.Add(st.retAt), st.ask)
		if g != st.granted || r.State.Counter != st.counter {
			t.Fatalf("step %d (t0+%s, ret %d, ask %d): granted %d, counter %d; want %d, %d",
				i, st.at, st.ret, st.ask, g, r.State.Counter, st.granted, st.counter)
		}
		s = r.State
	}
}

func TestLeaseLeakyBucket(t *testing.T) {
	// 10 units, one leaks every second.
	l := Limit{Size: 10, DripRate: time.Second, DripSize: 1}
	runLeaseSteps(t, l, []leaseStep{
		{at: 0, ask: 4, granted: 4, counter: 4},
		{at: 0, ask: 8, granted: 6, counter: 10},               // only the room there is
		{at: 0, ask: 1, granted: 0, counter: 10},               // full
		{at: 2 * time.Second, ask: 5, granted: 2, counter: 10}, // two leaked
		{at: 2 * time.Second, ret: 3, ask: 0, granted: 0, counter: 7},
		{at: 2 * time.Second, ret: 7, ask: 20, granted: 10, counter: 10}, // given back, then taken
		{at: 30 * time.Second, ret: -5, ask: -5, granted: 0, counter: 0}, // negatives count as 0
	})
}

func TestLeaseFixedWindow(t *testing.T) {
	l := Limit{Algorithm: FixedWindow, Size: 10, Window: time.Minute}
	runLeaseSteps(t, l, []leaseStep{
		{at: 0, ask: 6, granted: 6, counter: 6},
		{at: 10 * time.Second, ask: 6, granted: 4, counter: 10},
		{at: 20 * time.Second, ret: 3, retAt: 10 * time.Second, ask: 1, granted: 1, counter: 8},
		// Units of the window before are not taken from this one.
		{at: 70 * time.Second, ret: 5, retAt: 20 * time.Second, ask: 3, granted: 3, counter: 3},
		{at: 80 * time.Second, ret: 3, retAt: 70 * time.Second, ask: 0, granted: 0, counter: 0},
	})
}

func TestLeaseSlidingWindow(t *testing.T) {
	// 10 per minute in 6 sub-windows of 10 s.
	l := Limit{Algorithm: SlidingWindow, Size: 10, Window: time.Minute, Resolution: 10 * time.Second}
	runLeaseSteps(t, l, []leaseStep{
		{at: 0, ask: 7, granted: 7, counter: 7},
		{at: 15 * time.Second, ask: 7, granted: 3, counter: 10},
		// Given back to the sub-window they were charged to.
		{at: 25 * time.Second, ret: 2, retAt: 0, ask: 0, granted: 0, counter: 8},
		{at: 25 * time.Second, ret: 1, retAt: 15 * time.Second, ask: 9, granted: 3, counter: 10},
		// The first sub-window (5 left of 7) has left the window.
		{at: 65 * time.Second, ask: 9, granted: 5, counter: 10},
	})
}

func TestLeaseNeverGrantsMoreThanDecideAdmits(t *testing.T) {
	l := Limit{Size: 5, DripRate: 100 * time.Millisecond, DripSize: 1}
	var s State
	var granted int64
	for i := range 100 {
		g, r := Lease(s, l, t0.Add(time.Duration(i)*10*time.Millisecond), 0, t0, 3)
		granted += g
		s = r.State
	}
	// In one second: the 5 the bucket holds, and the 9 or 10 it leaked.
	if granted < 14 || granted > 15 {
		t.Fatalf("granted %d in a second, want what the bucket admits: 14 or 15", granted)
	}
}
