package localfirst

import (
	"errors"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// entry is one bucket as this replica knows it.
type entry struct {
	key   string
	limit limit.Limit
	// lease is the units this replica may admit without asking Redis;
	// leasedAt is Redis's time of the grant they came from.
	lease, leasedAt int64
	// global is the bucket on Redis after the last grant, for the figures
	// a response reports.
	global limit.State
	// demand is the hits asked for since the last sync (admitted or not),
	// prev those of the interval before: what the next lease is sized by.
	demand, prev int64
	// idle counts the intervals without demand, up to idleHold.
	idle int
	// stale is a sliding window's units set aside by expire, granted at
	// staleAt, for the next sync to give back.
	stale, staleAt int64
	// roomAt is when Redis had room again for one more unit, as it said
	// at the last grant (its clock, Unix microseconds).
	roomAt int64
	// dry is set when Redis had less room than asked: no more asking
	// until the next sync.
	dry bool
	// forgot is set when the bucket is reset while a call is out for it:
	// the call's answer is not used.
	forgot bool
	// gen counts the times the lease was ended (a reset, a reload, an
	// ended window): units set aside from it go back only to the same one.
	gen uint32
	// busy is closed when the lease call out for this bucket returns; nil
	// when none is.
	busy chan struct{}
	// debt is hits of a limit that charges always, charged past what Redis
	// granted, whose sending to Redis failed: the next sync sends them (at
	// most leaky.MaxSize, which a count saturates at anyway). debtAt is
	// when the first of them was made, Redis's clock: a fixed window's debt
	// ends with its window.
	debt, debtAt int64
	// paying counts the calls out that send this bucket's debts: while one
	// is, the entry is kept, so that a failure has somewhere to leave them.
	paying int
}

// entry returns the entry of bucket b, whose key hashes to h, made if new;
// an error if the table is full, or holds another key of that hash.
func (s *Store) entry(sh *shard, h uint64, b limit.Bucket) (*entry, error) {
	e := sh.m[h]
	if e != nil && e.key != b.Key {
		return nil, errFull // two keys of one hash: the second is not tracked
	}
	if e != nil && e.limit == b.Limit {
		return e, nil
	}
	if e == nil {
		if s.bytes.Load()+cost(b.Key) > s.maxBytes {
			return nil, errFull
		}
		s.bytes.Add(cost(b.Key))
		e = &entry{key: b.Key}
		sh.m[h] = e
	}
	if e.limit != b.Limit {
		e.reload(b.Limit)
	}
	return e, nil
}

// full reports whether Redis found the bucket full and said it would not
// have room before roomAt (Redis's clock).
func (e *entry) full(rnow int64) bool { return e.dry && rnow < e.roomAt }

// reload makes e an entry of a new limit: what was leased under the old
// one is not this one's. It is left to leak or expire on Redis. A debt is
// kept: it is usage of the bucket's key, whatever its limit now.
func (e *entry) reload(l limit.Limit) {
	*e = entry{key: e.key, limit: l, busy: e.busy, forgot: e.forgot, debt: e.debt, debtAt: e.debtAt, paying: e.paying, gen: e.gen + 1}
}

var errFull = errors.New("local-first store: the local table is full")

func cost(key string) int64 { return int64(len(key)) + EntryOverhead }

// expire ends the leased units of a window that may no longer be used,
// on Redis's clock. A fixed window's units count in the window they were
// charged to: they end with it, and are no loss, as it has ended. A
// sliding window's count from the sub-window they were charged to, and
// leave the window that much early if used later: they are used for at
// most a sub-window or an interval, whichever is longer, then set aside
// for the next sync to give back.
func (s *Store) expire(e *entry, rnow int64) {
	if e.lease == 0 {
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
		win := e.limit.Fixed().Window.Microseconds()
		if floorDiv(rnow, win) > floorDiv(e.leasedAt, win) {
			// Ended. (A window after rnow's is one Redis answered in
			// after this request was made.)
			e.lease, e.leasedAt = 0, 0
			e.gen++
		}
	}
}

// report is the result a bucket reports, charged with its hits or not: its
// lease, and Redis's state as last learnt, dripped to now, for what the
// others hold.
func (s *Store) report(e *entry, b limit.Bucket, rnow int64, charged bool) limit.Result {
	global := e.global
	if b.Limit.Algorithm == limit.SlidingWindow {
		// Redis reports a sliding window's count, not its counts: as if
		// all in its newest sub-window, which leaves last.
		global = limit.State{Counter: global.Counter, Timestamp: global.Timestamp, Counts: []int64{global.Counter}}
	}
	at := time.UnixMicro(rnow)
	own := b.Hits <= e.lease
	if own {
		r := limit.Decide(global, b.Limit, at, 0)
		r.Admitted = true
		left := e.lease // what stays, with Redis's room, if it is not charged
		if charged {
			left -= b.Hits
		}
		r.Remaining = min(max(r.Remaining+left, 0), b.Limit.Size)
		return r
	}
	// Not enough leased: when would Redis have room for what is lacking?
	r := limit.Decide(global, b.Limit, at, b.Hits-e.lease)
	r.Admitted = own
	r.Remaining = 0
	if b.Limit.Algorithm == limit.SlidingWindow {
		// Its counts are not known here: when Redis said it would have room.
		r.Reset = time.Duration(e.roomAt-rnow) * time.Microsecond
	}
	next := time.Duration(s.nextSync.Load()-(rnow-s.offset.Load())) * time.Microsecond
	r.Reset = max(r.Reset, next, 0)
	return r
}
