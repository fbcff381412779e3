package localfirst

import (
	"errors"
	"slices"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// entry is one bucket as this replica knows it.
type entry struct {
	key   string
	limit limit.Limit
	// model is the bucket as exact mode would hold it: charged by the
	// requests this replica decided, at the instants it decided them, and
	// raised to what Redis said other replicas used (learn). Every figure
	// this replica answers comes from it. known is false until a Redis
	// answer for the bucket set it.
	model limit.State
	known bool
	// second marks the bucket of a limit counted per second
	// (limit.Bucket.SecondUnit): on a per-second Redis, when the store
	// has one.
	second bool
	// lease is the units Redis charged for this replica that it has not
	// used: what it may admit without asking; leasedAt is Redis's time of
	// the last grant.
	lease, leasedAt int64
	// demand is the hits asked for in interval round of its shard
	// (admitted or not), prev those of the interval before: what the next
	// lease is sized by. used is the last interval with demand, listed the
	// last the entry was put on its shard's list of entries in use.
	demand, prev        int64
	round, used, listed uint32
	// stale is a sliding window's units set aside by expire, granted at
	// staleAt, for the next sync to give back.
	stale, staleAt int64
	// gen counts the times the lease was ended (a reset, a reload, an
	// ended window): what a call out took or gave of it is applied only to
	// the same generation.
	gen uint32
	// calls counts the lease calls out for this bucket; the sync leaves a
	// bucket with one out alone, and what a call learns of other replicas
	// is taken only when it was the only one out (its answer and the
	// lease then describe the same moment).
	calls int
	// debt is hits of a limit that charges always, charged past what Redis
	// granted, whose sending to Redis failed: the next sync sends them (at
	// most leaky.MaxSize, which a count saturates at anyway). debtAt is
	// when the first of them was made, Redis's clock: a fixed window's debt
	// ends with its window.
	debt, debtAt int64
	// paying counts the calls out that send this bucket's debts: while one
	// is, the entry is kept, so that a failure has somewhere to leave them.
	paying int
	// same is set when Redis last answered with the bucket as the model
	// holds it, nothing held: forgetting the model then loses nothing.
	// redis is a leaky bucket as Redis last answered it.
	same  bool
	redis limit.State
	// reloaded is the generation a reload of the limit began.
	reloaded uint32
	// learner is closed when the lease out that learns the bucket's model
	// (way learning) is back; nil when none is out. Requests for the
	// bucket wait for it: beside it, on Redis, they would find its units
	// taken, which exact mode never had.
	learner chan struct{}
}

// learnt ends e's learner: the requests waiting for it go on.
func (e *entry) learnt() {
	if e.learner != nil {
		close(e.learner)
		e.learner = nil
	}
}

// entry returns the entry of bucket b, whose key hashes to h, made if new;
// an error if the table is full, or holds another key of that hash.
func (s *Store) entry(sh *shard, h uint64, b limit.Bucket) (*entry, error) {
	e := sh.m[h]
	if e != nil && e.key != b.Key {
		return nil, errFull // two keys of one hash: the second is not tracked
	}
	if e != nil && e.matches(b) {
		return e, nil
	}
	if e == nil {
		if s.bytes.Load()+cost(b.Key) > s.maxBytes {
			return nil, errFull
		}
		s.bytes.Add(cost(b.Key))
		e = &entry{key: b.Key, round: sh.round, used: sh.round, listed: sh.round - 1}
		sh.m[h] = e
	}
	if !e.matches(b) {
		e.reload(b)
	}
	return e, nil
}

// matches reports whether e is an entry of b's limit, kept where b is.
func (e *entry) matches(b limit.Bucket) bool {
	return e.limit == b.Limit && e.second == b.SecondUnit
}

// reload makes e an entry of a new limit: what was leased under the old
// one is not this one's (it is left to leak or expire on Redis), and the
// model is learnt anew from Redis, which keeps a bucket's count across a
// change of limit (not across a move to or from a per-second Redis). A
// debt is kept: it is usage of the bucket's key, whatever its limit now.
func (e *entry) reload(b limit.Bucket) {
	*e = entry{key: e.key, limit: b.Limit, second: b.SecondUnit, calls: e.calls, debt: e.debt, debtAt: e.debtAt, paying: e.paying, gen: e.gen + 1, reloaded: e.gen + 1,
		demand: e.demand, prev: e.prev, round: e.round, used: e.used, listed: e.listed, learner: e.learner}
}

// roll moves e's demand on to interval round: prev becomes the demand of
// the interval before it (none if e had no demand then).
func (e *entry) roll(round uint32) {
	if e.round == round {
		return
	}
	e.prev = 0
	if e.round == round-1 {
		e.prev = e.demand
	}
	e.demand, e.round = 0, round
}

// orphan takes units Redis granted, as l answers, to a lease of e that
// ended (generation gen) while the call was out. After a reload of the
// limit, the bucket on Redis is the same (its key names its algorithm
// only): they are set aside for the next sync to give back. After a
// reset or an ended window, the bucket they were charged to is gone:
// they are lost, and counted so.
func (s *Store) orphan(e *entry, l *redis.Lease, gen uint32) {
	same := e.reloaded == e.gen && gen < e.gen && l.Limit.Algorithm == e.limit.Algorithm && l.SecondUnit == e.second &&
		(e.limit.Algorithm != limit.SlidingWindow || l.Limit.Sliding().Resolution == e.limit.Sliding().Resolution)
	if l.Granted <= 0 {
		return
	}
	if !same || (e.stale > 0 && e.staleAt != l.Now) {
		s.lost.Add(uint64(l.Granted))
		return
	}
	e.stale, e.staleAt = e.stale+l.Granted, l.Now
}

var errFull = errors.New("local-first store: the local table is full")

func cost(key string) int64 { return int64(len(key)) + EntryOverhead }

// expire ends the leased units of a window that may no longer be used,
// on Redis's clock. A fixed window's units count in the window they were
// charged to (a calendar window's, in its period): they end with it, and
// are no loss, as it has ended. A
// sliding window's count from the sub-window they were charged to, and
// leave the window that much early if used later: they are used for at
// most a sub-window or an interval, whichever is longer, then set aside
// for the next sync to give back.
func (s *Store) expire(e *entry, rnow int64) {
	if e.lease <= 0 {
		return
	}
	switch e.limit.Algorithm {
	case limit.SlidingWindow:
		usable := max(e.limit.Sliding().Resolution.Microseconds(), s.interval.Microseconds())
		if rnow-e.leasedAt >= usable {
			if e.stale > 0 && e.staleAt != e.leasedAt {
				s.lost.Add(uint64(e.stale)) // only one set aside at a time
				e.stale = 0
			}
			e.stale, e.staleAt = e.stale+e.lease, e.leasedAt
			e.lease = 0
			e.gen++
		}
	case limit.FixedWindow:
		if rnow >= e.limit.FixedPeriod(e.leasedAt).End {
			// Ended. (A window after rnow's is one Redis answered in
			// after this request was made.)
			e.lease, e.leasedAt = 0, 0
			e.gen++
		}
	}
}

// grant adds units Redis granted at (its clock) to e's lease. A window's
// units count where they were charged: units held of an earlier
// (sub-)window are ended or set aside first (expire), and a fixed
// window's units granted in a window before the lease's have ended.
func (s *Store) grant(e *entry, units, at int64) {
	if units <= 0 {
		return
	}
	if e.limit.Algorithm == limit.FixedWindow && e.lease > 0 && at < e.limit.FixedPeriod(e.leasedAt).Start {
		s.lost.Add(uint64(units))
		return
	}
	s.expire(e, at)
	e.lease += units
	e.leasedAt = max(e.leasedAt, at)
}

// slack is how far a leaky bucket on Redis may count past the model and
// this replica's unused units together, for one replica alone: the two
// drip on their own schedules (Redis's restarts when a grant finds it
// empty, the model's when a request does), so one can have dripped once
// less than the other, by less than a drip. A window has none: its units
// stay where they were charged.
func slack(l limit.Limit) int64 {
	if l.Algorithm == limit.LeakyBucket {
		return max(l.Leaky().Clamped().DripSize-1, 0)
	}
	return 0
}

// learn raises the model to what Redis counts, less this replica's unused
// units, when that is more by a whole drip (a leaky bucket) or a hit (a
// window): what other replicas used. rcount is Redis's count at rnow. Less
// is left alone: Redis lets a leased unit leak or slide from its grant,
// not from its use, so it counts less than the model for one replica
// alone; and a difference within the drip's slack is the two schedules',
// not usage.
func (e *entry) learn(rcount, rnow int64) {
	at := time.UnixMicro(rnow)
	more := rcount - e.held() - limit.Count(e.model, e.limit, at)
	if more <= slack(e.limit) {
		return
	}
	e.model = forced(e.model, e.limit, at, more)
}

// redisExact reports whether Redis holds the bucket as the model does, so
// that the entry may be dropped and the bucket decided on Redis again
// without answering otherwise than exact mode: the model counts nothing,
// or Redis last answered with it as it is. (Units leased leak or slide on
// Redis from their grant: until the model drains, Redis may count less.)
func (e *entry) redisExact(rnow int64) bool {
	if e.same || !e.known {
		return true
	}
	at := time.UnixMicro(rnow)
	// A leaky bucket's model and Redis drip on their own schedules: Redis
	// may hold a drip's slack after the model has drained. A window holds
	// no more than the model once nothing is held.
	drained := limit.Count(e.model, e.limit, at) == 0
	if e.limit.Algorithm == limit.LeakyBucket {
		drained = drained && limit.Count(e.redis, e.limit, at) == 0
	}
	return drained
}

// answered notes Redis's answer for the bucket: a leaky bucket's state.
func (e *entry) answered(r limit.State) {
	if e.limit.Algorithm == limit.LeakyBucket {
		e.redis = r
	}
}

// sameState reports whether Redis's answer r (a lease's: a window's count,
// not its counts) is the model m, at rnow.
func sameState(r, m limit.State, l limit.Limit, rnow int64) bool {
	at := time.UnixMicro(rnow)
	switch l.Algorithm {
	case limit.LeakyBucket:
		rd, md := limit.Decide(r, l, at, 0).State, limit.Decide(m, l, at, 0).State
		return rd.Counter == md.Counter && (rd.Counter == 0 || rd.Timestamp == md.Timestamp)
	case limit.FixedWindow:
		return r.Counter == limit.Count(m, l, at)
	}
	return r.Counter == 0 && limit.Count(m, l, at) == 0
}

// held is the units Redis charged for this replica that it has not used:
// its lease, and a sliding window's units set aside for the next sync to
// give back.
func (e *entry) held() int64 { return max(e.lease, 0) + e.stale }

// forced is s with hits charged at now, past the limit if need be.
func forced(s limit.State, l limit.Limit, now time.Time, hits int64) limit.State {
	s.Counts = slices.Clone(s.Counts)
	var r [1]limit.Result
	limit.DecideAll([]limit.State{s}, []limit.Bucket{{Limit: l, Hits: hits, Always: true}}, now, r[:])
	return r[0].State
}

// uncharged is s with hits taken back that were charged at now (a
// request's charge its answer called off).
func uncharged(s limit.State, l limit.Limit, now time.Time, hits int64) limit.State {
	if l.Algorithm == limit.LeakyBucket {
		return limit.Decide(s, l, now, -hits).State
	}
	return limit.Uncharge(s, l, now, hits)
}

// forget drops what e holds: its bucket was reset on Redis, empty now.
func (e *entry) forget() {
	e.lease, e.stale, e.model, e.known = 0, 0, limit.State{}, true
	e.gen++
}
