package rlqs

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// Usage counts the hits RLS calls ask of the buckets RLQS streams
// subscribe to, admitted or not: their demand, so that each replica's RLS
// calls take their part of a limit's division as an Envoy's reports do.
// (Counting what they were admitted would shrink their part whenever the
// Envoys filled the bucket, and a call refused without the store, by the
// over-limit cache, would never be counted: the division would never give
// it room.) Asked is called on every RLS call that reaches a bucket: it
// costs an atomic load when no stream subscribes to any bucket, and a map
// read per bucket otherwise. It is safe for concurrent use.
type Usage struct {
	watched atomic.Int64 // keys watched
	keys    sync.Map     // key: *usageCount
}

type usageCount struct {
	mu       sync.Mutex
	watchers int
	hits     int64     // since since
	since    time.Time // when hits started counting
	rate     float64   // per second, as last measured
	active   time.Time // the last hit
}

// usageWindow is the shortest time a rate is measured over.
const usageWindow = time.Second

// Asked counts the hits one RLS call asks of each of its buckets.
func (u *Usage) Asked(buckets []limit.Bucket) {
	if u == nil || u.watched.Load() == 0 {
		return
	}
	var now time.Time // read once, at the first watched bucket
	for _, b := range buckets {
		if b.Hits <= 0 {
			continue
		}
		if v, ok := u.keys.Load(b.Key); ok {
			if now.IsZero() {
				now = time.Now()
			}
			c := v.(*usageCount)
			c.mu.Lock()
			c.hits += b.Hits
			c.active = now
			c.mu.Unlock()
		}
	}
}

// watch starts counting key's hits, and returns the count.
func (u *Usage) watch(key string, now time.Time) *usageCount {
	v, loaded := u.keys.LoadOrStore(key, &usageCount{watchers: 1, since: now})
	c := v.(*usageCount)
	if !loaded {
		u.watched.Add(1)
		return c
	}
	c.mu.Lock()
	c.watchers++
	c.mu.Unlock()
	return c
}

// unwatch stops counting key's hits once no stream watches it.
func (u *Usage) unwatch(key string) {
	v, ok := u.keys.Load(key)
	if !ok {
		return
	}
	c := v.(*usageCount)
	c.mu.Lock()
	c.watchers--
	gone := c.watchers <= 0
	c.mu.Unlock()
	if gone {
		u.keys.Delete(key)
		u.watched.Add(-1)
	}
}

// perSecond returns the hits per second RLS calls asked of the count's key
// lately, and when the last was (zero if none).
func (c *usageCount) perSecond(now time.Time) (float64, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := now.Sub(c.since); d >= usageWindow {
		c.rate, c.hits, c.since = float64(c.hits)/d.Seconds(), 0, now
	}
	return c.rate, c.active
}
