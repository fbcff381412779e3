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
// Envoys filled the bucket.) Charged is called on every RLS call the store
// decided: it costs an atomic load when no stream subscribes to any
// bucket, and a map read per bucket otherwise. It is safe for concurrent
// use.
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

// Charged counts the hits one RLS call asked of each of its buckets.
func (u *Usage) Charged(buckets []limit.Bucket, _ []limit.Result) {
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

// watch starts counting key's hits.
func (u *Usage) watch(key string, now time.Time) {
	v, loaded := u.keys.LoadOrStore(key, &usageCount{watchers: 1, since: now})
	if !loaded {
		u.watched.Add(1)
		return
	}
	c := v.(*usageCount)
	c.mu.Lock()
	c.watchers++
	c.mu.Unlock()
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

// rate returns the hits per second RLS calls charged key lately, and when
// the last was (zero if none).
func (u *Usage) rate(key string, now time.Time) (float64, time.Time) {
	v, ok := u.keys.Load(key)
	if !ok {
		return 0, time.Time{}
	}
	c := v.(*usageCount)
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := now.Sub(c.since); d >= usageWindow {
		c.rate, c.hits, c.since = float64(c.hits)/d.Seconds(), 0, now
	}
	return c.rate, c.active
}
