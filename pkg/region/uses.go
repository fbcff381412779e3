package region

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// What a replica counts of each bucket it uses: what it is asked (per
// request, and the standing demands of RLQS streams) and what its
// admissions count, drained at its region's share; the exchange reports
// it every interval.

// use is one bucket as this replica uses it.
type use struct {
	key   uint64 // its key's hash
	gone  bool   // taken out of uses: the exchange loop's
	mu    sync.Mutex
	limit limit.Limit
	rate  float64 // limit's, a second (limit.PerSecond)
	asked int64   // this epoch's hits
	// count is what this replica's admissions count in the bucket, as of
	// at: a leaky bucket's level draining at the region's share, a
	// window's hits in the window from window (Unix microseconds).
	count  float64
	at     time.Time
	window int64
	idle   int64 // epochs without a hit
	// wants are standing demands, hits a second, by source (an RLQS
	// stream): Wants.
	wants map[any]standing
}

// standing is a source's demand of a bucket, until it lapses.
type standing struct {
	perSecond float64
	until     time.Time
}

// maxSources bounds the standing demands one bucket holds: one per RLQS
// stream that reports it on this replica, which -rlqs-max-streams
// bounds already; past this, a new source is not counted.
const maxSources = 1 << 16

// Asked counts the hits a request asks of each of its buckets, admitted
// or not: their demand (rls.Demand). The service calls it for every
// request before anything answers it, the over-limit cache included, so
// that a region refused often still counts what it is asked.
func (x *Exchange) Asked(buckets []limit.Bucket) {
	var now time.Time
	for _, b := range buckets {
		if b.Hits <= 0 || b.Regional {
			continue
		}
		if now.IsZero() {
			now = x.opts.Clock()
		}
		u := x.use(KeyHash(b.Key), b.Limit, now)
		u.mu.Lock()
		u.setLimit(b.Limit)
		u.idle = 0
		u.asked += b.Hits
		u.mu.Unlock()
	}
}

// Wants sets what source asks of the bucket key (limit l), in hits a
// second, until until: the demand of a holder that reports now and then
// rather than calling per request, an RLQS stream. Counted as hits per
// interval, its demand would come in one interval and be gone from the
// next few; a rate holds between its reports. A rate of 0 withdraws it.
func (x *Exchange) Wants(source any, key string, l limit.Limit, perSecond float64, until time.Time) {
	now := x.opts.Clock()
	h := KeyHash(key)
	if perSecond <= 0 || !until.After(now) {
		if v, ok := x.uses.Load(h); ok {
			u := v.(*use)
			u.mu.Lock()
			delete(u.wants, source)
			u.mu.Unlock()
		}
		return
	}
	u := x.use(h, l, now)
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.wants[source]; !ok && len(u.wants) >= maxSources {
		return
	}
	if u.wants == nil {
		u.wants = map[any]standing{}
	}
	u.setLimit(l)
	u.idle = 0
	u.wants[source] = standing{perSecond: want(perSecond), until: until}
}

// wanted is the standing demands' sum at now, the lapsed dropped. Called
// with u.mu held.
func (u *use) wanted(now time.Time) float64 {
	var sum float64
	for src, w := range u.wants {
		if !w.until.After(now) {
			delete(u.wants, src)
			continue
		}
		sum += w.perSecond
	}
	return sum
}

// admitted counts hits key's bucket (limit l) admitted, or charged
// regardless, at now: what this replica counts in it.
func (x *Exchange) admitted(key uint64, l limit.Limit, hits int64, now time.Time) {
	u := x.use(key, l, now)
	share := x.drainShare(x.claims.Load().lookup(key))
	u.mu.Lock()
	defer u.mu.Unlock()
	u.setLimit(l)
	u.idle = 0
	u.advance(now, share)
	u.count += float64(hits)
}

// drainShare is the part of a bucket's rate this replica's count drains
// at: its region's share (an equal part before any claim), over the
// region's replicas. Each counts its own admissions; drained at the
// region's whole rate each, their counts together would be too low and
// the others given room this region still holds. (Drained at a part,
// one replica's count is too high when the others are idle: safe.)
func (x *Exchange) drainShare(c Claim, claimed bool) float64 {
	share := 1 / float64(len(x.ledger.regions))
	if claimed {
		share = c.Share
	}
	return share / float64(x.replicas.Load())
}

// use returns key's use, made if new.
func (x *Exchange) use(key uint64, l limit.Limit, now time.Time) *use {
	v, ok := x.uses.Load(key)
	if !ok {
		var loaded bool
		if v, loaded = x.uses.LoadOrStore(key, &use{key: key, limit: l, rate: l.PerSecond(), at: now}); !loaded {
			x.omu.Lock()
			x.ordered = append(x.ordered, v.(*use))
			x.omu.Unlock()
		}
	}
	return v.(*use)
}

// inOrder returns the uses made so far, in the order of their keys. The
// exchange loop alone calls it, and the slice is valid until its next
// call of inOrder or forget.
func (x *Exchange) inOrder() []*use {
	x.omu.Lock()
	defer x.omu.Unlock()
	if x.sorted < len(x.ordered) {
		// Those made since, sorted, then merged with the others.
		byKey := func(a, b *use) int { return cmp.Compare(a.key, b.key) }
		head, tail := x.ordered[:x.sorted], x.ordered[x.sorted:]
		slices.SortFunc(tail, byKey)
		if len(head) > 0 && head[len(head)-1].key > tail[0].key {
			m := x.merged[:0]
			for len(head) > 0 && len(tail) > 0 {
				if head[0].key <= tail[0].key {
					m, head = append(m, head[0]), head[1:]
				} else {
					m, tail = append(m, tail[0]), tail[1:]
				}
			}
			m = append(append(m, head...), tail...)
			clear(x.ordered)
			x.merged, x.ordered = x.ordered[:0], m
		}
		x.sorted = len(x.ordered)
	}
	return x.ordered
}

// forget drops the uses marked gone from ordered.
func (x *Exchange) forget() {
	x.omu.Lock()
	defer x.omu.Unlock()
	kept, sorted := x.ordered[:0], 0
	for i, u := range x.ordered {
		if !u.gone {
			kept = append(kept, u)
			if i < x.sorted {
				sorted++
			}
		}
	}
	clear(x.ordered[len(kept):])
	x.ordered, x.sorted = kept, sorted
}

// setLimit sets the bucket's limit.
func (u *use) setLimit(l limit.Limit) {
	if l != u.limit {
		u.limit, u.rate = l, l.PerSecond()
	}
}

// advance brings count to now: a leaky bucket's drains at share of its
// rate; a sliding window's likewise, its limit over its window (an
// estimate); a fixed window's is none in a window after its own.
func (u *use) advance(now time.Time, share float64) {
	dt := now.Sub(u.at).Seconds()
	if dt > 0 {
		switch u.limit.Algorithm {
		case limit.LeakyBucket:
			u.count = max(u.count-dt*share*u.rate, 0)
		case limit.SlidingWindow:
			u.count = max(u.count-dt*share*u.rate, 0)
		}
		u.at = now
	}
	if u.limit.Algorithm == limit.FixedWindow {
		if start := u.limit.FixedPeriod(now.UnixMicro()).Start; start != u.window {
			u.window, u.count = start, 0
		}
	}
}
