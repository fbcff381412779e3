package leaky

import (
	"testing"
	"time"
)

func BenchmarkDecide(b *testing.B) {
	bucket := Bucket{Size: 100, DripRate: 10 * time.Millisecond, DripSize: 1}
	s := State{}
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		s = bucket.Decide(s, now, 1).State
	}
}

func TestDecideDoesNotAllocate(t *testing.T) {
	b := Bucket{Size: 10, DripRate: time.Second, DripSize: 1}
	allocs := testing.AllocsPerRun(100, func() {
		_ = b.Decide(State{Counter: 3}, t0, 1)
		_ = b.Decide(State{Counter: 3}, t0, 20)
	})
	if allocs != 0 {
		t.Errorf("Decide allocates %v times per call, want 0", allocs)
	}
}
