package localfirst

import (
	"context"
	"hash/maphash"
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
	return s.sync(ctx, now, false)
}

// sync reconciles every bucket in use with Redis in batched lease calls:
// what a bucket holds beyond twice its last interval's demand goes back,
// what it lacks of that is asked for; a bucket without demand for
// idleHold intervals gives everything back and is dropped. With all,
// every bucket gives everything back (Close). What Redis answers of each
// bucket raises its model by what other replicas used. It returns the
// buckets synced.
func (s *Store) sync(ctx context.Context, now time.Time, all bool) int {
	s.payDebts(ctx, now)
	rnow := now.UnixMicro() + s.offset.Load()
	var leases []redis.Lease
	var entries []*entry
	var gens []uint32
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.rotate()
		for h, e := range sh.m {
			key := e.key
			if e.calls > 0 {
				continue // its own call is out; it syncs next time
			}
			s.expire(e, rnow)
			e.prev, e.demand = e.demand, 0
			if e.prev > 0 {
				e.idle = 0
			} else if e.idle < idleHold {
				e.idle++
			}
			l := s.plan(key, e, rnow, all)
			if e.stale > 0 {
				// Set aside by expire, granted at another time: given back
				// first, in the same call.
				leases = append(leases, redis.Lease{Key: key, Limit: e.limit, SecondUnit: e.second, Return: e.stale, At: e.staleAt})
				entries, gens = append(entries, e), append(gens, e.gen)
				e.stale = 0
				e.calls++
			}
			if l.Return == 0 && l.Ask == 0 {
				if e.held() == 0 && e.debt == 0 && e.paying == 0 && e.idle >= idleHold && e.calls == 0 && e.redisExact(rnow) {
					delete(sh.m, h)
					s.bytes.Add(-cost(key))
				}
				continue
			}
			// What goes back leaves the lease now: used meanwhile, it
			// would be taken by another replica too.
			e.lease -= max(l.Return, 0)
			e.calls++
			leases = append(leases, l)
			entries, gens = append(entries, e), append(gens, e.gen)
		}
		sh.mu.Unlock()
	}
	if len(leases) == 0 {
		return 0
	}
	start := time.Now()
	rnowAnswer, err := s.remote.LeaseAll(ctx, now, leases)
	s.noteClock(rnowAnswer, now, start)
	if err != nil {
		s.failures.Add(1)
		s.warnSyncFailed(len(leases), err)
	} else {
		s.failedSyncs.Store(0)
	}
	for j := range leases {
		l, e := &leases[j], entries[j]
		sh := &s.shards[hashShard(s, l.Key)]
		sh.mu.Lock()
		last := j+1 == len(leases) || entries[j+1] != e
		if last {
			e.calls--
		}
		switch {
		case l.Err != nil:
		case e.gen != gens[j] || e.limit != l.Limit:
			s.orphan(e, l, gens[j])
		default:
			s.grant(e, l.Granted, l.Now)
			e.answered(l.State)
			if last && e.calls == 0 && e.known {
				e.learn(redisCount(l.State, l.Limit, l.Now, true), l.Now)
				e.same = e.held() == 0 && sameState(l.State, e.model, e.limit, l.Now)
			}
		}
		sh.mu.Unlock()
	}
	s.syncs.Add(1)
	return len(leases)
}

// plan returns what the sync gives back of e and asks for it (nothing of
// either: no call); with all, everything goes back. A bucket without a
// model yet asks for nothing: its next request learns it.
func (s *Store) plan(key string, e *entry, rnow int64, all bool) redis.Lease {
	target := s.target(e)
	if all || !e.known {
		target = 0
	}
	l := redis.Lease{Key: key, Limit: e.limit, SecondUnit: e.second, At: e.leasedAt}
	switch {
	case e.limit.Algorithm != limit.LeakyBucket:
		if e.prev > 0 || target == 0 {
			// A window's lease is of one (sub-)window: all of it goes
			// back, and what is wanted comes anew.
			l.Return, l.Ask = max(e.lease, 0), target
		}
	case e.lease > 0 && e.prev > 0 && rnow-e.leasedAt >= maxHold*s.interval.Microseconds():
		// Held long, and in use: it has been leaking on Redis all this
		// time. (Units without demand are not renewed: they go back after
		// idleHold intervals, unless used again, and renewed then.)
		l.Return, l.Ask = e.lease, target
	case e.lease > 2*target:
		l.Return = e.lease - target
	case e.lease < (target+1)/2:
		l.Ask = target - max(e.lease, 0)
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
		t = max(t, (e.limit.Size-e.model.Counter)/headroom)
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

func hashShard(s *Store, key string) uint64 { return maphash.String(s.seed, key) % shards }
