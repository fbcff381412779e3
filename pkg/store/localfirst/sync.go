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
// what it lacks of that is asked for. Every sweepEvery syncs (and with
// all) it looks at the idle buckets too: one without demand gives back
// its units after idleHold intervals (keepFor, if they are few beside its
// room) and is dropped after keepFor. With all, every bucket gives
// everything back (Close). What Redis answers of each bucket raises its
// model by what other replicas used. It returns the buckets synced.
func (s *Store) sync(ctx context.Context, now time.Time, all bool) int {
	s.payDebts(ctx, now)
	rnow := now.UnixMicro() + s.offset.Load()
	var v visits
	round := s.rounds.Add(1)
	rotate := round%uint64(s.sightEvery) == 0
	sweep := all || round%uint64(s.sweepEvery) == 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		if rotate {
			sh.rotate()
		}
		closing := sh.round
		sh.round++
		active := sh.active
		sh.active = sh.active[:0:0]
		for _, e := range active {
			if s.visit(sh, e, closing, rnow, all, &v) {
				s.drop(sh, maphash.String(s.seed, e.key), e)
			}
		}
		if sweep {
			for h, e := range sh.m {
				if e.listed == closing {
					continue // visited above
				}
				if s.visit(sh, e, closing, rnow, all, &v) {
					s.drop(sh, h, e)
				}
			}
		}
		sh.mu.Unlock()
	}
	leases, entries, gens := v.leases, v.entries, v.gens
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

// drop removes e, of hash h, from its shard's table, unless a call of exact mode's
// may be out for it (its failure would leave a debt on it). Called with
// the shard locked.
func (s *Store) drop(sh *shard, h uint64, e *entry) {
	if sh.m[h] == e && sh.exact[exactSlot(h)].Load() == 0 {
		delete(sh.m, h)
		s.bytes.Add(-cost(e.key))
	}
}

// visits are what a sync asks of Redis for the entries it visited: each
// lease, its entry and the entry's lease generation.
type visits struct {
	leases  []redis.Lease
	entries []*entry
	gens    []uint32
}

// visit plans entry e's part of a sync that closes interval closing of
// its shard: units set aside and what goes back or is asked for, into v;
// it reports whether e is idle and holds nothing, and may be dropped.
// Called with the shard locked.
func (s *Store) visit(sh *shard, e *entry, closing uint32, rnow int64, all bool, v *visits) (idleEmpty bool) {
	if e.calls > 0 {
		sh.list(e) // its own call is out; it syncs next time
		return false
	}
	s.expire(e, rnow)
	e.roll(sh.round)
	idle := int(min(closing-e.used, uint32(s.keepFor)))
	ret, ask := s.plan(e, idle, rnow, all)
	if e.stale > 0 {
		// Set aside by expire, granted at another time: given back first,
		// in the same call.
		v.leases = append(v.leases, redis.Lease{Key: e.key, Limit: e.limit, SecondUnit: e.second, Return: e.stale, At: e.staleAt})
		v.entries, v.gens = append(v.entries, e), append(v.gens, e.gen)
		e.stale = 0
		e.calls++
	}
	if ret == 0 && ask == 0 {
		return e.held() == 0 && e.debt == 0 && e.paying == 0 && idle >= s.keepFor && e.calls == 0 && e.redisExact(rnow)
	}
	// What goes back leaves the lease now: used meanwhile, it would be
	// taken by another replica too.
	e.lease -= max(ret, 0)
	e.calls++
	v.leases = append(v.leases, redis.Lease{Key: e.key, Limit: e.limit, SecondUnit: e.second, At: e.leasedAt, Return: ret, Ask: ask})
	v.entries, v.gens = append(v.entries, e), append(v.gens, e.gen)
	return false
}

// plan returns what the sync gives back of e and asks for it (nothing of
// either: no call); with all, everything goes back. A bucket without a
// model yet asks for nothing: its next request learns it.
func (s *Store) plan(e *entry, idle int, rnow int64, all bool) (ret, ask int64) {
	target := s.target(e, idle, rnow)
	if all || !e.known {
		target = 0
	}
	switch {
	case e.limit.Algorithm != limit.LeakyBucket:
		if e.prev > 0 || target == 0 {
			// A window's lease is of one (sub-)window: all of it goes
			// back, and what is wanted comes anew.
			return max(e.lease, 0), target
		}
	case e.lease > 0 && e.prev > 0 && rnow-e.leasedAt >= s.holdFor(e.limit):
		// Held long, and in use: it has been leaking on Redis all this
		// time. (Units without demand are not renewed: they go back after
		// idleHold intervals, unless used again, and renewed then.)
		return e.lease, target
	case e.lease > 2*target:
		return e.lease - target, 0
	case e.lease < (target+1)/2:
		return 0, target - max(e.lease, 0)
	}
	return 0, 0
}

// holdFor is how long, in microseconds, a leaky bucket's units are held
// before they are renewed: maxHold intervals, or one drip if longer. They
// leak on Redis from their grant, not their use, so that others may take
// the room they held early: by at most what the bucket drips meanwhile,
// which is then one drip (drip_size units), or maxHold intervals' drips.
func (s *Store) holdFor(l limit.Limit) int64 {
	return max(maxHold*s.interval.Microseconds(), l.Leaky().Clamped().DripRate.Microseconds())
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
// bucket's units before giving them back, when they are more than a
// headroom's share of the room the bucket has: units others may need.
// Fewer, it keeps them, and the entry, for keepTime: clients that call
// every few seconds, or every few intervals of a short one, should not
// cost a Redis call each time.
const idleHold = 4

// keepTime is how long a bucket without demand keeps its entry (its model,
// and units that are few beside its room): a bucket seen again meanwhile
// is decided here.
const keepTime = 20 * time.Second

// sweepTime is how often, at least, a sync looks at every entry: those
// without demand, whose units go back after idleHold intervals, or
// keepTime, and that are dropped after keepTime. Between sweeps, a sync
// looks only at the entries requests used: with a short interval and
// many buckets, looking at every one each interval costs more than the
// requests do.
const sweepTime = time.Second

// target is what e should hold after a sync: twice its last interval's
// demand, and for a leaky bucket in demand a sixteenth of the room it had
// at the last answer, if more. A bucket without demand keeps what it
// holds, for idleHold intervals, or for keepFor if that is few beside its
// room; then nothing.
func (s *Store) target(e *entry, idle int, rnow int64) int64 {
	if idle >= s.keepFor || (idle >= idleHold && (!e.roomy(rnow) || s.heldLong(e, rnow))) {
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

// heldLong reports whether e's units are a leaky bucket's held for
// holdFor: unused, they go back rather than be used later, which would let
// others take the room they leaked on Redis meanwhile.
func (s *Store) heldLong(e *entry, rnow int64) bool {
	return e.limit.Algorithm == limit.LeakyBucket && e.lease > 0 && rnow-e.leasedAt >= s.holdFor(e.limit)
}

// roomy reports whether what e holds is at most a headroom's share of the
// room its model has at rnow.
func (e *entry) roomy(rnow int64) bool {
	room := e.limit.Size - limit.Count(e.model, e.limit, time.UnixMicro(rnow))
	return e.held() <= room/headroom
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
