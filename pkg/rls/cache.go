package rls

import (
	"hash/maphash"
	"strings"
	"sync"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// overLimitCache remembers, for a while, the buckets the store found over
// their limit, so that calls for them are rejected without asking the store.
//
// This is exact for every algorithm: when the store says a bucket or a
// window lacks room for n hits until reset, nothing but time makes room
// (other replicas can only fill it), so every call for n or more hits
// before then would be rejected too. The entry runs from the time read before the store was
// asked, so it ends no later than the store's answer. Refunds make room
// without time: a refund through this replica drops the entry; refunds
// through others are not seen here (docs/operations.md, "Local over-limit
// cache"). A new config starts a new cache, since its limits may be larger.
type overLimitCache struct {
	seed          maphash.Seed
	perShard      int   // entries
	perShardBytes int64 // 0: no byte bound
	shards        [cacheShards]cacheShard
}

const cacheShards = 16

// cacheEntryOverhead is what an entry costs beside its key's bytes: the
// map slot (key header, entry, control byte, free slots) and the key's
// allocation rounding; TestCacheEntryOverhead measures about 73.
const cacheEntryOverhead = 80

type cacheShard struct {
	mu    sync.Mutex
	m     map[string]cacheEntry
	bytes int64 // keys and overhead held
}

type cacheEntry struct {
	hits  int64     // hits known not to fit
	reset time.Time // until then they do not fit
	clear time.Time // the bucket is empty by then (for the figures)
}

// newOverLimitCache returns a cache of at most size entries and, if
// maxBytes > 0, at most maxBytes of keys and overhead.
func newOverLimitCache(size int, maxBytes int64) *overLimitCache {
	c := &overLimitCache{seed: maphash.MakeSeed(), perShard: max(1, size/cacheShards), perShardBytes: maxBytes / cacheShards}
	for i := range c.shards {
		c.shards[i].m = map[string]cacheEntry{}
	}
	return c
}

func (c *overLimitCache) shard(key string) *cacheShard {
	return &c.shards[maphash.String(c.seed, key)%cacheShards]
}

// get returns the entry that says hits do not fit in the bucket at now.
// Only an entry for the same hits answers: the reset it holds is for those
// hits, and more would need longer.
func (c *overLimitCache) get(key string, hits int64, now time.Time) (cacheEntry, bool) {
	sh := c.shard(key)
	sh.mu.Lock()
	e, ok := sh.m[key]
	if ok && !now.Before(e.reset) {
		sh.delete(key)
		ok = false
	}
	sh.mu.Unlock()
	return e, ok && hits == e.hits
}

func (c *overLimitCache) put(key string, e cacheEntry) {
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old, ok := sh.m[key]
	if ok && old.hits == e.hits && !old.reset.Before(e.reset) {
		return // the entry held says more
	}
	if ok {
		sh.m[key] = e
		return
	}
	cost := entryCost(key)
	if c.perShardBytes > 0 && cost > c.perShardBytes {
		return // a key larger than the whole budget: not worth remembering
	}
	for len(sh.m) > 0 && (len(sh.m) >= c.perShard || (c.perShardBytes > 0 && sh.bytes+cost > c.perShardBytes)) {
		sh.evict()
	}
	// The key may share memory with a longer string: keep its own bytes.
	sh.m[strings.Clone(key)] = e
	sh.bytes += cost
}

// evict drops, of a few entries, the one that ends first.
func (sh *cacheShard) evict() {
	var victim string
	var first time.Time
	n := 0
	for k, v := range sh.m {
		if n == 0 || v.reset.Before(first) {
			victim, first = k, v.reset
		}
		if n++; n == 4 {
			break
		}
	}
	sh.delete(victim)
}

func (sh *cacheShard) delete(key string) {
	if _, ok := sh.m[key]; ok {
		delete(sh.m, key)
		sh.bytes -= entryCost(key)
	}
}

func entryCost(key string) int64 { return int64(len(key)) + cacheEntryOverhead }

// bytes returns the keys and overhead the cache holds.
func (c *overLimitCache) bytes() int64 {
	var n int64
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += sh.bytes
		sh.mu.Unlock()
	}
	return n
}

// clear drops every entry.
func (c *overLimitCache) clear() {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		clear(sh.m)
		sh.bytes = 0
		sh.mu.Unlock()
	}
}

func (c *overLimitCache) remove(key string) {
	sh := c.shard(key)
	sh.mu.Lock()
	sh.delete(key)
	sh.mu.Unlock()
}

// fromCache rejects the request if the over-limit cache knows one of its
// buckets lacks room for its hits. The buckets it knows are answered from
// it; the others are marked skipped. A request that checks a bucket without
// charging it always asks the store, which alone has its figures, and so
// does one that charges a limit that charges always: its charge must be
// recorded, and a debt's end is the store's to tell.
func fromCache(cache *overLimitCache, w *work, now time.Time) bool {
	if cache == nil {
		return false
	}
	for _, b := range w.buckets {
		if (b.Hits == 0 && !b.Shadow) || (b.Always && b.Hits != 0) {
			return false // a check, or a charge that must be recorded
		}
	}
	hit := false
	for i, b := range w.buckets {
		w.skipped[i] = true
		if b.Shadow || b.Hits <= 0 {
			continue
		}
		if e, ok := cache.get(b.Key, b.Hits, now); ok {
			hit, w.skipped[i] = true, false
			w.results[i] = limit.Result{Reset: e.reset.Sub(now), Clear: max(0, e.clear.Sub(now))}
		}
	}
	if !hit {
		clear(w.skipped)
	}
	return hit
}

// remember caches the buckets the store found over their limit, from now,
// read before the store was asked, and forgets the buckets given hits back.
func remember(cache *overLimitCache, w *work, now time.Time) {
	if cache == nil {
		return
	}
	for i, b := range w.buckets {
		r := &w.results[i]
		switch {
		case b.Hits < 0:
			cache.remove(b.Key)
		case !r.Admitted && !b.Shadow && !b.Always && b.Hits > 0 && r.Reset > 0:
			cache.put(b.Key, cacheEntry{hits: b.Hits, reset: now.Add(r.Reset), clear: now.Add(r.Clear)})
		}
	}
}
