package memory

import (
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// BucketOverhead is what a bucket counts, in bytes, beside its key's
// length: its map slot and the slots left free around it. A slot is the
// key's string header (16), the entry (24) and a control byte: 41 bytes,
// 48 once a 1024-slot table's 41 KB of groups are rounded up to whole
// pages. Go's swiss tables are 7/16 to 7/8 full while they fill (55 to
// 110 bytes a bucket), and less once evictions have left tombstones that
// split them (about 130). TestBucketOverhead holds the figure within 35%
// of the heap measured both ways.
const BucketOverhead = 88

// cost is what a bucket with key counts against MaxBytes.
func cost(key string) int64 { return int64(len(key)) + BucketOverhead }

// WindowOverhead is what a sliding window counts, in bytes, beside its
// key, BucketOverhead and 8 bytes per sub-window: its slot in a shard's
// map of counts and the counts' slice header and allocation rounding.
// TestWindowBytes holds it against the measured heap.
const WindowOverhead = 96

// countsCost is what a sliding window's counts count against MaxBytes.
func countsCost(counts []int64) int64 {
	if counts == nil {
		return 0
	}
	return WindowOverhead + 8*int64(cap(counts))
}

// delete removes a bucket, if there, and its bytes.
func (sh *shard) delete(key string) {
	if _, ok := sh.m[key]; ok {
		sh.remove(key)
	}
}

// remove removes a bucket known to be there, and its bytes.
func (sh *shard) remove(key string) {
	delete(sh.m, key)
	sh.bytes -= cost(key)
	if c, ok := sh.counts[key]; ok {
		delete(sh.counts, key)
		sh.bytes -= countsCost(c)
	}
}

// saveCounts keeps a kept sliding window's counts (nil for other buckets),
// and their bytes.
func (sh *shard) saveCounts(key string, counts []int64) {
	old, had := sh.counts[key]
	switch {
	case counts == nil && !had:
		return
	case counts == nil:
		delete(sh.counts, key)
	default:
		if sh.counts == nil {
			sh.counts = make(map[string][]int64)
		}
		sh.counts[key] = counts
	}
	sh.bytes += countsCost(counts) - countsCost(old)
}

// save stores one decided bucket in its locked shard. request names the
// buckets of the request being saved, which eviction must not pick.
func (s *Store) save(sh *shard, key string, r limit.Result, now int64, request []limit.Bucket) {
	if r.TTL <= 0 {
		sh.delete(key) // empty: nothing to remember
		return
	}
	e := entry{counter: r.State.Counter, timestamp: r.State.Timestamp, expires: now + r.TTL.Microseconds()}
	if _, ok := sh.m[key]; ok {
		sh.m[key] = e
		sh.saveCounts(key, r.State.Counts)
		return
	}
	c := cost(key) + countsCost(r.State.Counts)
	if c > s.perShardBytes {
		// Larger than the shard's whole share of MaxBytes: the request was
		// decided, but the bucket is not kept, as if evicted at once, rather
		// than grow the store past its bound. minShardBytes makes this rare.
		s.evictions.Add(1)
		return
	}
	for len(sh.m) >= s.perShard || sh.bytes+c > s.perShardBytes {
		if !s.evict(sh, now, request) {
			// Only buckets of this request are held, and they stay: this
			// one is not kept, as if evicted at once.
			s.evictions.Add(1)
			return
		}
	}
	// The key may share memory with a longer one; keep only its own bytes.
	key = strings.Clone(key)
	sh.m[key] = e
	sh.bytes += cost(key)
	sh.saveCounts(key, r.State.Counts)
}

// evict removes, of a few sampled buckets not in the current request, the
// one that expires first: expired buckets go before live ones, and among live
// ones the nearest to empty loses the least. It reports whether it removed
// one.
func (s *Store) evict(sh *shard, now int64, request []limit.Bucket) bool {
	var (
		victim  string
		expires int64
		found   bool
		sampled int
	)
	for k, e := range sh.m {
		if inRequest(k, request) {
			continue
		}
		if !found || e.expires < expires {
			victim, expires, found = k, e.expires, true
		}
		if sampled++; sampled == evictionSamples || e.expires <= now {
			break
		}
	}
	if found {
		sh.remove(victim)
		if expires > now {
			s.evictions.Add(1)
		}
	}
	return found
}

func inRequest(key string, request []limit.Bucket) bool {
	for _, b := range request {
		if b.Key == key {
			return true
		}
	}
	return false
}

// Len returns the number of buckets held, expired ones not yet swept
// included.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Bytes returns the bytes the buckets held count against MaxBytes (each
// key's length plus BucketOverhead), expired ones not yet swept included;
// 0 for an empty store.
func (s *Store) Bytes() int64 {
	var n int64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.bytes
		sh.mu.Unlock()
	}
	return n
}

// Evictions returns how many live buckets were dropped to make room since
// the store was created, counting those not kept at all: a key larger than
// a shard's share of MaxBytes, or a shard held entirely by the request's
// own buckets.
func (s *Store) Evictions() uint64 { return s.evictions.Load() }

// Sweep removes the buckets that have expired at now, one shard at a time,
// and returns how many it removed.
func (s *Store) Sweep(now time.Time) int {
	us := now.UnixMicro()
	removed := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.expires <= us {
				sh.remove(k)
				removed++
			}
		}
		sh.mu.Unlock()
	}
	return removed
}

func (s *Store) sweepEvery(interval time.Duration, clock func() time.Time) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep(clock())
		}
	}
}
