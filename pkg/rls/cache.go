package rls

import (
	"hash/maphash"
	"sync"
	"time"
)

// overLimitCache remembers, for a while, the buckets the store found over
// their limit, so that calls for them are rejected without asking the store.
//
// This is exact for leaky buckets: when the store says a bucket lacks room
// for n hits until reset, nothing but time makes room (other replicas can
// only fill it), so every call for n or more hits before then would be
// rejected too. The entry runs from the time read before the store was
// asked, so it ends no later than the store's answer. Refunds make room
// without time: a refund through this replica drops the entry; refunds
// through others are not seen here (see the README). A new config starts a
// new cache, since its limits may be larger.
type overLimitCache struct {
	seed     maphash.Seed
	perShard int
	shards   [cacheShards]cacheShard
}

const cacheShards = 16

type cacheShard struct {
	mu sync.Mutex
	m  map[string]cacheEntry
}

type cacheEntry struct {
	hits  int64     // hits known not to fit
	reset time.Time // until then they do not fit
	clear time.Time // the bucket is empty by then (for the figures)
}

func newOverLimitCache(size int) *overLimitCache {
	c := &overLimitCache{seed: maphash.MakeSeed(), perShard: max(1, size/cacheShards)}
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
		delete(sh.m, key)
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
	if !ok && len(sh.m) >= c.perShard {
		// Full: of a few entries, drop the one that ends first.
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
		delete(sh.m, victim)
	}
	sh.m[key] = e
}

func (c *overLimitCache) remove(key string) {
	sh := c.shard(key)
	sh.mu.Lock()
	delete(sh.m, key)
	sh.mu.Unlock()
}
