package rlqs

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// streamLevel is one level (a limit's bucket) the stream's buckets meet,
// kept while one of them does: the buckets there, what the Envoy allowed
// there and is not charged yet, and the stream's part of the limit at the
// last report. A report works on the levels of its buckets through these,
// not through maps made anew for it.
type streamLevel struct {
	key    string
	limit  limit.Limit
	second bool // the limit counts per second (limit.Bucket.SecondUnit)
	// regional: the limit is each region's own (limit.Bucket.Regional)
	regional bool
	rate     float64 // requests per second
	size     int64   // what the limit admits at once: the bursts' budget
	subs     []levelSub
	// owed is what the Envoy allowed there that no store call charged
	// yet: the next report's charge.
	owed int64
	// round is the last report that named a bucket of it.
	round uint64
	// usage counts the RLS calls on it, if they are counted.
	usage *usageCount
	// mineLv, mineH and rlsLv, rlsH are where the registry put the
	// stream's entry and the RLS calls' at the last publish (hints for the
	// next); rlsAt is the RLS entry's place in the report's entries (-1:
	// none).
	mineLv, rlsLv *levelState
	mineH, rlsH   *held
	rlsAt         int
	// mine is the stream's share, all its buckets there together, and
	// latest the latest request reported there on any replica, Unix
	// microseconds: both as of the last report.
	mine   float64
	latest int64
}

// bucket is the level's bucket charged hits, as usage.
func (sl *streamLevel) bucket(hits int64) limit.Bucket {
	return limit.Bucket{Key: sl.key, Limit: sl.limit, Hits: hits, Always: true, SecondUnit: sl.second, Regional: sl.regional}
}

// levelSub is a bucket of the stream on a level: the level is its i-th.
type levelSub struct {
	b *sub
	i int
}

// watch notes b's levels as the stream's, and has RLS calls on them
// counted from now. Called with st.mu held.
func (st *stream) watch(b *sub, now time.Time) {
	for i, l := range b.levels {
		sl := st.levels[l.Key]
		if sl == nil {
			sl = &streamLevel{key: l.Key}
			st.levels[l.Key] = sl
			if st.svc.opts.Usage != nil {
				sl.usage = st.svc.opts.Usage.watch(l.Key, now)
			}
		}
		// The config's latest word on the limit (a reload may change it
		// under the same key).
		sl.limit, sl.second, sl.rate, sl.size = l.Rule.Limit, l.Rule.SecondUnit(), l.Rule.Limit.PerSecond(), l.Rule.Limit.Size
		sl.regional = l.Rule.Regional
		sl.subs = append(sl.subs, levelSub{b, i})
		b.levels[i].sl = sl
	}
}

// demand tells Options.Demand what the stream's Envoy asks of each level
// the report named: its buckets' demands there, while its assignments
// hold. Called with st.mu held.
func (st *stream) demand(now time.Time) {
	tell := st.svc.opts.Demand
	if tell == nil {
		return
	}
	until := now.Add(time.Duration(st.ttl()) * time.Second)
	for _, sl := range st.touched {
		if sl.regional {
			continue
		}
		var sum float64
		for _, ls := range sl.subs {
			// Capped by the levels below, as the division here has it: a
			// bucket held to 1 a second there wants no more of this one.
			if d := ls.b.cappedDemand(ls.i); !math.IsInf(d, 0) {
				sum += d
			}
		}
		tell(st, sl.key, sl.limit, sum, until)
	}
}

// unwatch undoes watch. A level left with no bucket goes, and what was
// owed there is kept for the next report's charge. Called with st.mu held.
func (st *stream) unwatch(b *sub) {
	for _, l := range b.levels {
		sl := l.sl
		sl.subs = slices.DeleteFunc(sl.subs, func(ls levelSub) bool { return ls.b == b })
		if len(sl.subs) > 0 {
			continue
		}
		delete(st.levels, sl.key)
		if st.svc.opts.Usage != nil {
			st.svc.opts.Usage.unwatch(sl.key)
		}
		if tell := st.svc.opts.Demand; tell != nil && !sl.regional {
			tell(st, sl.key, sl.limit, 0, time.Time{})
		}
		if sl.owed > 0 {
			st.orphans = append(st.orphans, sl.bucket(sl.owed))
		}
	}
}

// charge adds what b's Envoy allowed to what the report charges, on every
// level of b, and notes the levels in the report's. Called with st.mu
// held.
func (st *stream) charge(b *sub, allowed uint64) {
	hits := int64(min(allowed, maxReported))
	for _, l := range b.levels {
		sl := l.sl
		sl.owed = min(sl.owed+hits, maxReported)
		if sl.round != st.reports {
			sl.round = st.reports
			st.touched = append(st.touched, sl)
		}
	}
}

// chargeAndRoom charges, in one store call, what the stream's Envoy
// allowed on the report's levels (and what a failed call left owed):
// usage, which RLS calls on the same buckets then see. If the store
// fails, it returns the error: the charges are owed again, for the next
// report, and the stream notes since when its charges fail.
func (st *stream) chargeAndRoom(ctx context.Context, levels []*streamLevel, now time.Time, sc *scratch) error {
	st.mu.Lock()
	calls := sc.calls[:0]
	for _, sl := range levels {
		if sl.owed > 0 {
			calls = append(calls, sl.bucket(sl.owed))
			sl.owed = 0
		}
	}
	calls = append(calls, st.orphans...)
	st.orphans = st.orphans[:0]
	sc.calls = calls
	st.mu.Unlock()
	if len(calls) == 0 {
		return nil
	}
	sc.results = slices.Grow(sc.results[:0], len(calls))[:len(calls)]
	err := st.svc.opts.Store.Apply(ctx, now, calls, sc.results)
	if err == nil {
		st.chargeFailing = time.Time{}
		return nil
	}
	if st.chargeFailing.IsZero() {
		st.chargeFailing = now
	}
	sc.storeFailed = true
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, c := range calls {
		if sl := st.levels[c.Key]; sl != nil {
			sl.owed = min(sl.owed+c.Hits, maxReported)
		} else {
			st.orphans = append(st.orphans, c)
		}
	}
	return fmt.Errorf("charging reported usage (owed until a report's charge succeeds): %w", err)
}

// entries are what the stream publishes for levels, in their order: on
// each, its demand (every bucket of it there, capped by their shares
// below) and when it last saw a request; then this replica's RLS calls
// there.
func (st *stream) entries(levels []*streamLevel, now time.Time, sc *scratch) []Entry {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := slices.Grow(sc.entries[:0], 2*len(levels))
	for _, sl := range levels {
		st.claim(sl)
	}
	for _, sl := range levels {
		e := Entry{Level: sl.key, Instance: st.instance, Rate: sl.rate, lv: sl.mineLv, h: sl.mineH}
		for _, ls := range sl.subs {
			e.Demand += ls.b.cappedDemand(ls.i)
			e.Active = max(e.Active, ls.b.active.UnixMicro())
		}
		out = append(out, e)
	}
	// RLS calls are a subscriber while they come, and for as long after
	// as an Envoy's entry lasts without a report: then their entry
	// expires, and their idle floor goes back to the others.
	ttl := st.entryTTL()
	for _, sl := range levels {
		sl.rlsAt = -1
		if sl.usage == nil {
			continue
		}
		if rate, last := sl.usage.perSecond(now); rate > 0 || (!last.IsZero() && now.Sub(last) < ttl) {
			sl.rlsAt = len(out)
			out = append(out, Entry{Level: sl.key, Instance: st.rlsInstance, Rate: sl.rate, Demand: rate, Active: last.UnixMicro(),
				lv: sl.rlsLv, h: sl.rlsH})
		}
	}
	sc.entries = out
	return out
}

// claim sets the level's rate and size to its region's part of its
// limit (Options.Claim), as of this report: the division and the
// assignments' bursts are of that. Called with st.mu held.
func (st *stream) claim(sl *streamLevel) {
	l := sl.limit
	if c := st.svc.opts.Claim; c != nil && !sl.regional {
		l = c(sl.key, l)
	}
	sl.rate, sl.size = l.PerSecond(), l.Size
}

// divide divides the stream's part of each level among its buckets
// there. Called with st.mu held.
func (st *stream) divide(levels []*streamLevel) {
	for _, sl := range levels {
		if len(sl.subs) == 1 {
			ls := sl.subs[0]
			ls.b.levels[ls.i].share = sl.mine
			continue
		}
		demands := make([]float64, len(sl.subs))
		for j, ls := range sl.subs {
			demands[j] = ls.b.cappedDemand(ls.i)
		}
		shares := make([]float64, len(sl.subs))
		Divide(sl.mine, demands, shares)
		left := sl.mine
		for _, s := range shares {
			left -= s
		}
		for j, ls := range sl.subs {
			// What the demands leave (their floor raised the stream's part)
			// goes to the buckets evenly.
			ls.b.levels[ls.i].share = shares[j] + math.Max(left, 0)/float64(len(sl.subs))
		}
	}
}

// scratch is what a report's answer works in, kept for another report
// (Service.scratch): the store call's buckets and results, the registry's
// entries. A stream holds none between its reports, so that memory grows
// with the reports being answered, not with the streams.
type scratch struct {
	calls   []limit.Bucket
	results []limit.Result
	entries []Entry
	// storeFailed: the store call failed, and may still be reading calls.
	storeFailed bool
}

// release drops what the scratch refers to, for the pool.
func (sc *scratch) release() {
	clear(sc.calls)
	clear(sc.results)
	clear(sc.entries)
	sc.calls, sc.results, sc.entries = sc.calls[:0], sc.results[:0], sc.entries[:0]
}
