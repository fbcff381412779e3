package memory

import (
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// Reconciled counts what Reconcile did with the buckets it checked.
type Reconciled struct {
	// Kept is the buckets kept, Resized included.
	Kept int
	// Resized is the buckets kept whose limit's size (or a leaky bucket's
	// drip, or a calendar window's zone) changed: their count carries over
	// under the new limit, as it does across a reload, so a lowered budget
	// stays as spent as it was.
	Resized int
	// Gone is the buckets dropped because the config no longer has them.
	Gone int
	// Changed is the buckets dropped because their limit now counts in
	// another way (algorithm, window or sub-window), under which their
	// state would mean something else.
	Changed int
}

// Reconcile checks the buckets against the config in force, which
// current tells: a bucket key's limit, ok false when the config no longer
// has that bucket, and a nil limit when the key itself names its limit (a
// limit sent by Envoy). It drops the buckets that left the config and
// those whose limit counts in another way, and keeps the others with
// their counts. It is meant for start, on the buckets a snapshot brought
// back, before calls arrive: a bucket's saved limit is the one it was
// last charged with, which across a reload is the config's anyway.
//
// current is called with no lock held; a shard is locked to copy its
// buckets out, and again to drop those that must go.
func (s *Store) Reconcile(current func(key string) (l *limit.Limit, ok bool)) Reconciled {
	var (
		r     Reconciled
		items []reconciled
		drop  []string
	)
	for i := range s.shards {
		sh := &s.shards[i]
		items, drop = items[:0], drop[:0]
		sh.mu.Lock()
		for k, e := range sh.m {
			it := reconciled{key: k}
			if e.limit != 0 {
				it.saved, it.known = sh.limits[e.limit-1], true
			}
			items = append(items, it)
		}
		sh.mu.Unlock()
		for _, it := range items {
			now, ok := current(it.key)
			switch {
			case !ok:
				r.Gone++
				drop = append(drop, it.key)
			case now == nil || !it.known:
				// The key names its limit, or the bucket was saved
				// without it: the key alone decides, and it is there.
				r.Kept++
			case !carries(it.saved, *now):
				r.Changed++
				drop = append(drop, it.key)
			default:
				r.Kept++
				if it.saved != *now {
					r.Resized++
				}
			}
		}
		if len(drop) > 0 {
			sh.mu.Lock()
			for _, k := range drop {
				sh.delete(k)
			}
			sh.mu.Unlock()
		}
	}
	return r
}

type reconciled struct {
	key   string
	saved limit.Limit
	known bool
}

// carries reports whether a state kept under limit was means the same
// under now: the same algorithm and, for a window, the same window and
// sub-window, or calendar period (a window's key names them too, so a
// change of them makes a new bucket). A leaky bucket's level means the same under any size and
// drip; a window's count under any limit.
func carries(was, now limit.Limit) bool {
	if was.Algorithm != now.Algorithm {
		return false
	}
	switch now.Algorithm {
	case limit.SlidingWindow:
		a, b := was.Sliding(), now.Sliding()
		return a.Window == b.Window && a.Resolution == b.Resolution
	case limit.FixedWindow:
		// Not the zone: a calendar window counts a state whose period
		// starts within now's, so a corrected zone keeps the count, as a
		// reload does.
		return was.Fixed().Window == now.Fixed().Window && was.Calendar == now.Calendar
	}
	return true
}
