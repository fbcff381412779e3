package localfirst

import (
	"context"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// loop syncs once per interval until Close.
func (s *Store) loop() {
	defer close(s.done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.nextSync.Store(time.Now().Add(s.interval).UnixMicro())
			ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
			s.sync(ctx, time.Now(), false)
			cancel()
		}
	}
}

// Sync reconciles every bucket in use with Redis at now, as the sync loop
// does once per interval, and returns the buckets synced: for a store made
// with ManualSync.
func (s *Store) Sync(ctx context.Context, now time.Time) int {
	s.nextSync.Store(now.Add(s.interval).UnixMicro())
	return s.sync(ctx, now, false)
}

// sync reconciles every bucket in use with Redis in batched lease calls:
// what a bucket holds beyond twice its last interval's demand goes back,
// what it lacks of that is asked for; a bucket without demand for
// idleHold intervals gives everything back and is dropped. With all,
// every bucket gives everything back (Close). It returns the buckets
// synced.
func (s *Store) sync(ctx context.Context, now time.Time, all bool) int {
	s.payDebts(ctx, now)
	rnow := now.UnixMicro() + s.offset.Load()
	var leases []redis.Lease
	var entries []*entry
	var held []int64
	busy := make(chan struct{})
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.rotate()
		for h, e := range sh.m {
			key := e.key
			if e.busy != nil {
				continue // its own call is out; it syncs next time
			}
			s.expire(e, rnow)
			e.prev, e.demand = e.demand, 0
			full := e.full(rnow)
			e.dry = full // refused until Redis would have room: no asking meanwhile
			if e.prev > 0 {
				e.idle = 0
			} else if e.idle < idleHold {
				e.idle++
			}
			l := s.plan(key, e, rnow, all)
			if full {
				l.Ask = 0
			}
			if e.stale > 0 {
				// Set aside by expire, granted at another time: given back
				// first, in the same call.
				leases = append(leases, redis.Lease{Key: key, Limit: e.limit, Return: e.stale, At: e.staleAt})
				entries = append(entries, e)
				held = append(held, 0)
				e.stale = 0
				e.busy = busy
			}
			if l.Return == 0 && l.Ask == 0 {
				if e.lease == 0 && e.debt == 0 && e.paying == 0 && e.idle >= idleHold && !full {
					delete(sh.m, h)
					s.bytes.Add(-cost(key))
				}
				continue
			}
			h := max(l.Return, 0)
			if l.Ask == 0 {
				// No grant to take what is used meanwhile from: what goes
				// back leaves the lease now, or it would be used and taken
				// by another replica too.
				e.lease -= h
				h = 0
			}
			e.busy = busy
			leases = append(leases, l)
			entries = append(entries, e)
			held = append(held, h)
		}
		sh.mu.Unlock()
	}
	if len(leases) == 0 {
		return 0
	}
	if err := s.lease(ctx, now, leases, func(j int) *entry { return entries[j] }, held); err != nil {
		s.warnSyncFailed(len(leases), err)
	} else {
		s.failedSyncs.Store(0)
	}
	close(busy)
	s.syncs.Add(1)
	return len(leases)
}

// plan returns what the sync gives back of e and asks for it (nothing of
// either: no call); with all, everything goes back. What goes back with an
// ask stays usable until the answer, which takes what was used meanwhile
// from the grant (lease's held).
func (s *Store) plan(key string, e *entry, rnow int64, all bool) redis.Lease {
	target := s.target(e)
	if all {
		target = 0
	}
	l := redis.Lease{Key: key, Limit: e.limit, At: e.leasedAt}
	switch {
	case e.limit.Algorithm != limit.LeakyBucket:
		if e.prev > 0 || target == 0 {
			// A window's lease is of one (sub-)window: all of it goes
			// back, and what is wanted comes anew.
			l.Return, l.Ask = e.lease, target
		}
	case e.lease > 0 && e.prev > 0 && rnow-e.leasedAt >= maxHold*s.interval.Microseconds():
		// Held long, and in use: it has been leaking on Redis all this
		// time. (Units without demand are not renewed: they go back after
		// idleHold intervals, unless used again, and renewed then.)
		l.Return, l.Ask = e.lease, target
	case e.lease > 2*target:
		l.Return = e.lease - target
	case e.lease < (target+1)/2:
		l.Ask = target - e.lease
	}
	return l
}

// syncWarnEvery is how often a sync that keeps failing is logged: once a
// minute, not once an interval, while Redis is away.
const syncWarnEvery = time.Minute

// warnSyncFailed logs a failed sync: the first of a run of failures, then
// once per syncWarnEvery with how many failed meanwhile.
func (s *Store) warnSyncFailed(buckets int, err error) {
	failed := s.failedSyncs.Add(1)
	now := time.Now().UnixNano()
	if last := s.lastSyncWarn.Load(); failed > 1 && now-last < int64(syncWarnEvery) ||
		!s.lastSyncWarn.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn("local-first store: a sync with Redis failed; what was given back may be lost until it leaks",
		"buckets", buckets, "failed_syncs", failed, "err", err)
}

// maxHold is how many intervals a replica holds a leaky bucket's units
// before giving them back for new ones: they leak on Redis from their
// grant, so units held long would let others take their room twice.
const maxHold = 8

// headroom is the share of a bucket's room a replica in demand may hold
// beyond twice its demand, so that a bucket with much room needs no call
// each interval.
const headroom = 16

// idleHold is how many intervals without demand a replica keeps a
// bucket's units before giving them back: clients that call every few
// seconds should not cost a Redis call each time.
const idleHold = 4

// target is what e should hold after a sync: twice its last interval's
// demand, and for a leaky bucket in demand a sixteenth of the room it had
// at the last answer, if more. A bucket without demand for idleHold
// intervals holds nothing; one without demand for fewer keeps what it
// holds.
func (s *Store) target(e *entry) int64 {
	if e.idle >= idleHold {
		return 0
	}
	if e.prev == 0 {
		return e.lease
	}
	t := 2 * e.prev
	if e.limit.Algorithm == limit.LeakyBucket {
		t = max(t, (e.limit.Size-e.global.Counter)/headroom)
	}
	return t
}

// closeTimeout bounds the last sync, which gives every lease back.
const closeTimeout = 5 * time.Second

// Close stops the sync loop, gives back every unused unit, and closes the
// Redis store.
func (s *Store) Close() error {
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		s.paying.Wait() // a debt a failed call leaves is sent below
		s.asking.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		s.sync(ctx, time.Now(), true)
	})
	return s.remote.Close()
}

// Check reports whether Redis answers.
func (s *Store) Check(ctx context.Context) error { return s.remote.Check(ctx) }

// Len returns the number of buckets in the local table.
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

// Bytes returns what the local table counts against MaxBytes.
func (s *Store) Bytes() int64 { return s.bytes.Load() }

// Stats are a store's syncs so far and its lease calls that failed.
func (s *Store) Stats() (syncs, failures uint64) { return s.syncs.Load(), s.failures.Load() }
