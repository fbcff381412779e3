package limit

import (
	"testing"
	"time"
)

func BenchmarkDecide(b *testing.B) {
	benchmarkDecide(b, Limit{Size: 100, DripRate: 10 * time.Millisecond, DripSize: 1})
}

func BenchmarkDecideAll(b *testing.B) {
	user := Limit{Size: 1000, DripRate: time.Millisecond, DripSize: 1}
	trade := Limit{Size: 100, DripRate: 10 * time.Millisecond, DripSize: 1}
	states := []State{{}, {}}
	buckets := []Bucket{{Key: "u", Limit: user, Hits: 1}, {Key: "t", Limit: trade, Hits: 1}}
	results := make([]Result, 2)
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		DecideAll(states, buckets, now, results)
		states[0], states[1] = results[0].State, results[1].State
	}
}

func TestDecideDoesNotAllocate(t *testing.T) {
	l := Limit{Size: 10, DripRate: time.Second, DripSize: 1}
	states := []State{{}, {}}
	buckets := []Bucket{{Limit: l, Hits: 1}, {Limit: l, Hits: 20}}
	results := make([]Result, 2)
	allocs := testing.AllocsPerRun(100, func() {
		_ = Decide(State{Counter: 3}, l, t0, 1)
		DecideAll(states, buckets, t0, results)
	})
	if allocs != 0 {
		t.Errorf("Decide and DecideAll allocate %v times per call, want 0", allocs)
	}
}

// windowLimits are a sliding window of 60 sub-windows and a fixed window.
var (
	slidingLimit = Limit{Algorithm: SlidingWindow, Size: 100000, Window: time.Minute, Resolution: time.Second}
	fixedLimit   = Limit{Algorithm: FixedWindow, Size: 100000, Window: time.Minute}
)

func BenchmarkDecideSliding(b *testing.B)  { benchmarkDecide(b, slidingLimit) }
func BenchmarkDecideFixed(b *testing.B)    { benchmarkDecide(b, fixedLimit) }
func BenchmarkDecideCalendar(b *testing.B) { benchmarkDecide(b, monthly) }

func benchmarkDecide(b *testing.B, l Limit) {
	s := State{}
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		s = Decide(s, l, now, 1).State
	}
}

// BenchmarkDecideAllMixed decides a leaky bucket, a sliding and a fixed
// window together.
func BenchmarkDecideAllMixed(b *testing.B) {
	states := []State{{}, {}, {}}
	buckets := []Bucket{{Key: "b", Limit: Limit{Size: 1000, DripRate: time.Millisecond, DripSize: 1}, Hits: 1},
		{Key: "s", Limit: slidingLimit, Hits: 1}, {Key: "f", Limit: fixedLimit, Hits: 1}}
	results := make([]Result, 3)
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		DecideAll(states, buckets, now, results)
		for i := range states {
			states[i] = results[i].State
		}
	}
}

// TestWindowDecisionsDoNotAllocate: once a sliding window has its counts,
// deciding and charging it, and a fixed window, allocate nothing.
func TestWindowDecisionsDoNotAllocate(t *testing.T) {
	states := []State{Decide(State{}, slidingLimit, t0, 1).State, {}}
	buckets := []Bucket{{Limit: slidingLimit, Hits: 1}, {Limit: fixedLimit, Hits: 1}}
	results := make([]Result, 2)
	now := t0
	allocs := testing.AllocsPerRun(100, func() {
		now = now.Add(100 * time.Millisecond)
		DecideAll(states, buckets, now, results)
		states[0], states[1] = results[0].State, results[1].State
	})
	if allocs != 0 {
		t.Errorf("deciding windows allocates %v times per call, want 0", allocs)
	}
}
