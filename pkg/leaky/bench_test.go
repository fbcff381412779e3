package leaky

import (
	"testing"
	"time"
)

func BenchmarkDecide(b *testing.B) {
	l := Limit{Size: 100, DripRate: 10 * time.Millisecond, DripSize: 1}
	s := State{}
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		s = Decide(s, l, now, 1).State
	}
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
