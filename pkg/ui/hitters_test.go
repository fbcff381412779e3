package ui

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// TestHittersExactWithinCapacity: with no more buckets than counters, each
// count is exact, most refused first.
func TestHittersExactWithinCapacity(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	h := NewHitters(64)
	for k := range 64 {
		for range k + 1 {
			h.Add(t0, "api", "user", fmt.Sprintf("api|user=u%02d", k), 0, time.Second)
		}
	}
	top := h.Top(t0, 64)
	if len(top) != 64 {
		t.Fatalf("%d buckets, want 64", len(top))
	}
	for i, hit := range top {
		k := 63 - i
		if want := fmt.Sprintf("api|user=u%02d", k); hit.Key != want || hit.Refused != int64(k+1) || hit.Error != 0 {
			t.Errorf("place %d: %s refused %d (error %d), want %s %d exactly", i, hit.Key, hit.Refused, hit.Error, want, k+1)
		}
	}
	if got := h.Top(t0, 3); len(got) != 3 || got[0].Refused != 64 {
		t.Errorf("Top 3: %+v", got)
	}
}

// TestHittersSteps: refusals count in their slice; a slice is forgotten
// once WindowSeconds have passed; the last refusal's remaining and reset
// stand.
func TestHittersSteps(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0) // a slice's start
	h := NewHitters(4)
	steps := []struct {
		at        time.Duration
		add       bool
		remaining int64
		want      int64 // a's refusals in the window at at
		resetAt   time.Duration
	}{
		{0, true, 3, 1, time.Second},
		{9 * time.Second, true, 2, 2, 10 * time.Second},
		{10 * time.Second, true, 1, 3, 11 * time.Second},  // the next slice
		{59 * time.Second, false, 1, 3, 11 * time.Second}, // all six slices
		{60 * time.Second, false, 1, 1, 11 * time.Second}, // the first forgotten
		{70 * time.Second, false, 0, 0, 0},                // all forgotten
		{75 * time.Second, true, 7, 1, 76 * time.Second},  // its slice anew
	}
	for i, s := range steps {
		now := t0.Add(s.at)
		if s.add {
			h.Add(now, "api", "user", "a", s.remaining, time.Second)
		}
		top := h.Top(now, 5)
		var got int64
		var hit Hit
		if len(top) > 0 {
			hit = top[0]
			got = hit.Refused
		}
		if got != s.want {
			t.Errorf("step %d: %d refusals, want %d", i, got, s.want)
			continue
		}
		if got > 0 && (hit.Remaining != s.remaining || !hit.ResetAt.Equal(t0.Add(s.resetAt))) {
			t.Errorf("step %d: remaining %d reset at %v, want %d at %v", i, hit.Remaining, hit.ResetAt.Sub(t0), s.remaining, s.resetAt)
		}
	}
}

// TestHittersHeavyFound: past the capacity, a bucket refused often stays,
// its count never under its refusals.
func TestHittersHeavyFound(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	h := NewHitters(16)
	const n = 10000
	for i := range n {
		h.Add(t0, "api", "user", fmt.Sprintf("cold%d", i), 0, 0)
		if i%10 == 0 {
			h.Add(t0, "api", "user", "hot", 0, 0)
		}
	}
	top := h.Top(t0, 1)
	if len(top) != 1 || top[0].Key != "hot" || top[0].Refused < n/10 || top[0].Refused-top[0].Error > n/10 {
		t.Errorf("top %+v, want hot with at least %d refusals, at most its error more", top, n/10)
	}
}

// TestHittersBoundedMemory: a million distinct buckets take no more
// memory than its counters, over slices that come and go.
func TestHittersBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("a million refusals")
	}
	t0 := time.Unix(1_700_000_000, 0)
	h := NewHitters(DefaultCapacity)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	keys := func(from, to int) {
		for i := from; i < to; i++ {
			h.Add(t0.Add(time.Duration(i)*100*time.Microsecond), "api", "user", fmt.Sprintf("api|user=%d", i), 0, time.Second)
		}
	}
	keys(0, 10000)
	before := heap()
	keys(10000, 1_000_000)
	after := heap()
	for i := range h.shards {
		for j := range h.shards[i].slices {
			if s := &h.shards[i].slices[j]; len(s.entries) > DefaultCapacity || len(s.index) > DefaultCapacity {
				t.Errorf("shard %d, slice %d: %d counters, %d indexed", i, j, len(s.entries), len(s.index))
			}
		}
	}
	if grown := int64(after) - int64(before); grown > 1<<20 {
		t.Errorf("the summary grew by %d bytes over a million buckets", grown)
	}
	runtime.KeepAlive(h)
}

// BenchmarkHittersChurn is Add with far more buckets than counters, each
// new to its slice: the summary's most expensive case.
func BenchmarkHittersChurn(b *testing.B) {
	t0 := time.Unix(1_700_000_000, 0)
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = fmt.Sprintf("api|user=u%d|action=a%d", i, i%10)
	}
	h := NewHitters(DefaultCapacity)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		h.Add(t0, "api", "user", keys[i%len(keys)], 0, time.Second)
		i++
	}
}
