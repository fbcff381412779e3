package memory

import (
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// BucketOverhead is what a bucket counts, in bytes, beside its key's
// length: its map slot and the slots left free around it. A slot is the
// key's string header (16), the entry (32, its limit's number for the
// snapshots included) and a control byte: 49 bytes. Go's swiss tables are
// 7/16 to 7/8 full while they fill (56 to 112 bytes a bucket), and less
// once evictions have left tombstones that split them (about 145).
// TestBucketOverhead holds the figure within 35% of the heap measured both
// ways.
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
	sh.dirty = true
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
func (s *Store) save(sh *shard, b limit.Bucket, r limit.Result, now int64, request []limit.Bucket) {
	if r.TTL <= 0 {
		sh.delete(b.Key) // empty: nothing to remember
		return
	}
	sh.dirty = true
	e := entry{counter: r.State.Counter, timestamp: r.State.Timestamp, expires: now + r.TTL.Microseconds()}
	if old, ok := sh.m[b.Key]; ok {
		e.limit = old.limit
		if e.limit == 0 || sh.limits[e.limit-1] != b.Limit {
			e.limit = sh.limitID(b.Limit)
		}
		sh.m[b.Key] = e
		sh.saveCounts(b.Key, r.State.Counts)
		return
	}
	e.limit = sh.limitID(b.Limit)
	// The key may share memory with a longer one; keep only its own bytes.
	s.add(sh, b.Key, e, r.State.Counts, now, request, strings.Clone)
}

// add keeps a bucket the shard does not hold, making room for it (save's,
// and a snapshot's as it is read). own gives the key to keep, once it is
// known to be kept.
func (s *Store) add(sh *shard, key string, e entry, counts []int64, now int64, request []limit.Bucket, own func(string) string) {
	c := cost(key) + countsCost(counts)
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
	key = own(key)
	sh.m[key] = e
	sh.bytes += cost(key)
	sh.saveCounts(key, counts)
}

// maxShardLimits bounds the limits a shard tells apart for its snapshots,
// against a flood of distinct limits sent by Envoy; beyond it, buckets
// are saved without their limit (reconciled by their key alone).
const maxShardLimits = 256

// limitID returns the index, from 1, of l in the shard's limits, adding
// it; 0 once the shard knows maxShardLimits others.
func (sh *shard) limitID(l limit.Limit) uint32 {
	if sh.limitIDs != nil {
		if id, ok := sh.limitIDs[l]; ok {
			return id
		}
	} else {
		for i := range sh.limits {
			if sh.limits[i] == l {
				return uint32(i + 1)
			}
		}
	}
	if len(sh.limits) >= maxShardLimits {
		return 0
	}
	sh.limits = append(sh.limits, l)
	id := uint32(len(sh.limits))
	switch {
	case sh.limitIDs != nil:
		sh.limitIDs[l] = id
	case len(sh.limits) > 8: // past a few, a map beats comparing each
		sh.limitIDs = make(map[limit.Limit]uint32, len(sh.limits))
		for i, l := range sh.limits {
			sh.limitIDs[l] = uint32(i + 1)
		}
	}
	return id
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
