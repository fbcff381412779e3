package ui

import (
	"cmp"
	"hash/maphash"
	"slices"
	"sync"
	"time"
)

// The window of Hitters: SliceSeconds per slice, Slices of them. A slice
// starts empty, so a bucket leaves the summary within a minute of its last
// refusal.
const (
	SliceSeconds = 10
	Slices       = 6
	// WindowSeconds is the time Hitters.Top counts over.
	WindowSeconds = SliceSeconds * Slices
)

// DefaultCapacity is the counters of a Hitters slice by default.
const DefaultCapacity = 256

// Hitters is a heavy-hitters summary of refused buckets over the last
// WindowSeconds: in each slice of SliceSeconds, a space-saving summary of
// a fixed number of counters (Metwally, Agrawal and El Abbadi, 2005).
// A bucket counted in a slice that has no more than its capacity of
// buckets is counted exactly; past it, a new bucket takes the counter of
// the least counted one and its count, plus one: a count is then at most
// its error (Hit.Error) too high, and every bucket refused more than
// 1/capacity of a slice's refusals is in the summary. Its memory is
// bounded by its capacity, whatever the number of buckets. It is safe for
// concurrent use.
//
// A bucket is summarized in one of hitterShards shards, by its key's hash,
// each with its own lock and capacity counters per slice: refusals of
// different buckets seldom wait for one another, and no shard holds more
// than a slice's capacity.
type Hitters struct {
	capacity int
	seed     maphash.Seed
	shards   [hitterShards]hitterShard
}

// hitterShards is the shards of a Hitters.
const hitterShards = 4

type hitterShard struct {
	mu     sync.Mutex
	slices [Slices]hitterSlice
	_      [64]byte // its own cache line for mu
}

// hitterSlice is one slice's space-saving summary: its counters, a
// min-heap of them by count, and an index by bucket key.
type hitterSlice struct {
	n       int64 // the slice's number: unix second / SliceSeconds
	entries []hitter
	heap    []int32 // indexes into entries, the least counted first
	index   map[string]int32
}

type hitter struct {
	domain, label, key string
	count, err         int64
	remaining          int64
	at                 time.Time // the last refusal
	resetAt            time.Time // when the bucket admits again, as then
	pos                int32     // in heap
}

// NewHitters returns a summary of capacity counters per slice
// (DefaultCapacity when capacity < 1).
func NewHitters(capacity int) *Hitters {
	if capacity < 1 {
		capacity = DefaultCapacity
	}
	h := &Hitters{capacity: capacity, seed: maphash.MakeSeed()}
	for i := range h.shards {
		for j := range h.shards[i].slices {
			h.shards[i].slices[j] = hitterSlice{n: -1, entries: make([]hitter, 0, capacity), heap: make([]int32, 0, capacity), index: make(map[string]int32, capacity)}
		}
	}
	return h
}

// Add counts one refusal at now of the bucket key, of the limit label of
// domain, with what remained and the time until it admits again.
func (h *Hitters) Add(now time.Time, domain, label, key string, remaining int64, reset time.Duration) {
	n := sliceOf(now)
	sh := &h.shards[maphash.String(h.seed, key)%hitterShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s := &sh.slices[n%Slices]
	if s.n != n {
		s.n, s.entries, s.heap = n, s.entries[:0], s.heap[:0]
		clear(s.index)
	}
	i, ok := s.index[key]
	switch {
	case ok:
		s.entries[i].count++
	case len(s.entries) < h.capacity:
		i = int32(len(s.entries))
		s.entries = append(s.entries, hitter{key: key, count: 1, pos: int32(len(s.heap))})
		s.heap = append(s.heap, i)
		s.index[key] = i
		s.up(int(s.entries[i].pos))
	default: // the least counted gives its counter
		i = s.heap[0]
		e := &s.entries[i]
		delete(s.index, e.key)
		*e = hitter{key: key, count: e.count + 1, err: e.count, pos: 0}
		s.index[key] = i
	}
	e := &s.entries[i]
	e.domain, e.label, e.remaining, e.at, e.resetAt = domain, label, remaining, now, now.Add(reset)
	s.down(int(e.pos))
}

func sliceOf(t time.Time) int64 {
	sec := t.Unix()
	if sec < 0 {
		return 0
	}
	return sec / SliceSeconds
}

func (s *hitterSlice) less(a, b int) bool {
	return s.entries[s.heap[a]].count < s.entries[s.heap[b]].count
}

func (s *hitterSlice) swap(a, b int) {
	s.heap[a], s.heap[b] = s.heap[b], s.heap[a]
	s.entries[s.heap[a]].pos = int32(a)
	s.entries[s.heap[b]].pos = int32(b)
}

func (s *hitterSlice) up(j int) {
	for j > 0 {
		p := (j - 1) / 2
		if !s.less(j, p) {
			return
		}
		s.swap(j, p)
		j = p
	}
}

func (s *hitterSlice) down(j int) {
	for {
		l := 2*j + 1
		if l >= len(s.heap) {
			return
		}
		m := l
		if r := l + 1; r < len(s.heap) && s.less(r, l) {
			m = r
		}
		if !s.less(m, j) {
			return
		}
		s.swap(j, m)
		j = m
	}
}

// Hit is a bucket of the summary: its refusals in the window (at most
// Error too many), and, as at its last refusal, what remained and when it
// admits again.
type Hit struct {
	Domain, Label, Key string
	Refused, Error     int64
	Remaining          int64
	ResetAt            time.Time
}

// Top returns the n buckets refused most in the WindowSeconds up to now
// (its slice and the Slices-1 before), most refused first (then by key).
func (h *Hitters) Top(now time.Time, n int) []Hit {
	cur := sliceOf(now)
	byKey := map[string]*Hit{}
	last := map[string]time.Time{}
	for i := range h.shards {
		h.shards[i].top(cur, byKey, last)
	}
	out := make([]Hit, 0, len(byKey))
	for _, t := range byKey {
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b Hit) int { return cmp.Or(cmp.Compare(b.Refused, a.Refused), cmp.Compare(a.Key, b.Key)) })
	if len(out) > n {
		out = out[:max(n, 0)]
	}
	return out
}

// top adds the shard's buckets of the window ending with slice cur to
// byKey, with the time of each one's last refusal in last.
func (sh *hitterShard) top(cur int64, byKey map[string]*Hit, last map[string]time.Time) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i := range sh.slices {
		s := &sh.slices[i]
		if s.n > cur || s.n <= cur-Slices {
			continue
		}
		for _, e := range s.entries {
			t := byKey[e.key]
			if t == nil {
				t = &Hit{Domain: e.domain, Label: e.label, Key: e.key}
				byKey[e.key] = t
			}
			t.Refused += e.count
			t.Error += e.err
			if e.at.After(last[e.key]) {
				last[e.key] = e.at
				t.Domain, t.Label, t.Remaining, t.ResetAt = e.domain, e.label, e.remaining, e.resetAt
			}
		}
	}
}
