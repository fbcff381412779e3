package rlqs

import (
	"context"
	"errors"
	"math"
	"time"
)

// idleShare is the part of an equal share a subscriber that reports no
// request still gets: enough to let its next requests through until its
// next report raises it, little enough to leave the rest to the busy.
const idleShare = 1.0 / 20

// answer charges the report's usage, divides the limits of its buckets
// anew and returns each bucket's assignment.
func (st *stream) answer(ctx context.Context, batch []*sub, levels []*streamLevel, now time.Time) answer {
	svc := st.svc
	ctx, cancel := context.WithTimeout(ctx, st.budget())
	defer cancel()
	sc := svc.scratch.Get().(*scratch)
	defer func() {
		if sc.storeFailed {
			return // the failed call may still read its buckets: not reused
		}
		sc.release()
		svc.scratch.Put(sc)
	}()
	chargeErr := st.chargeAndRoom(ctx, levels, now, sc)
	entries := st.entries(levels, now, sc)
	var err error
	if chargeErr == nil || svc.opts.FailStatic > 0 {
		err = svc.opts.Registry.Publish(ctx, now, st.entryTTL(), entries)
	}
	stands := st.standing(chargeErr, err, now)
	svc.faults.record(svc.log, stands, &svc.opts, chargeErr, err)
	switch stands {
	case standsFresh:
	case standsStatic:
		svc.obs.FailStatic()
	default:
		svc.obs.Failed()
		switch svc.opts.FailureMode {
		case FailQuiet:
			return answer{}
		case FailAllow, FailDeny:
			return st.blanket(batch)
		}
		_ = svc.opts.LocalRegistry.Publish(ctx, now, st.entryTTL(), entries) // in process: no error
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	// The stream's own entries come first, one a level, in order.
	for i, sl := range levels {
		e := &entries[i]
		sl.mine, sl.latest = e.Share, e.Latest
		sl.mineLv, sl.mineH = e.lv, e.h
		if sl.rlsAt >= 0 {
			sl.rlsLv, sl.rlsH = entries[sl.rlsAt].lv, entries[sl.rlsAt].h
		}
	}
	st.divide(levels)
	size := 0
	for _, b := range batch {
		size += len(b.raw) + maxActionTail
	}
	out := answer{msg: make([]byte, 0, size)}
	for _, b := range batch {
		if st.subs[b.key] != b {
			continue // abandoned meanwhile
		}
		if st.abandoned(b, now) {
			out.msg = appendAction(out.msg, []byte(b.raw), Assignment{}, true)
			out.actions++
			svc.obs.Assigned("abandon", true)
			continue
		}
		a := st.assign(b)
		changed := !a.SameBucket(b.sent) || b.sentAt.IsZero()
		if changed {
			b.sentAt = now
		}
		b.sent = a
		svc.obs.Assigned(a.Kind.String(), changed)
		out.msg = b.appendAnswer(out.msg, a)
		out.actions++
	}
	return out
}

// appendAnswer appends b's BucketAction of a, encoded once while a holds.
func (b *sub) appendAnswer(dst []byte, a Assignment) []byte {
	if b.answer == nil || b.answerFor != a {
		b.answer, b.answerFor = appendAction(b.answer[:0], []byte(b.raw), a, false), a
	}
	return append(dst, b.answer...)
}

// assign returns b's assignment: a token bucket of its smallest share
// over the levels that limit it, its burst the same part of their sizes
// (so that bursts add up to no more than a limit's size); a blanket rule
// when none does. Called with st.mu held.
func (st *stream) assign(b *sub) Assignment {
	ttl := st.ttl()
	limited := false
	share, burst, slowest := math.Inf(1), int64(math.MaxInt64), math.Inf(1)
	for _, l := range b.levels {
		lv := l.sl
		if l.Rule.Shadow {
			continue
		}
		limited = true
		share = math.Min(share, l.share)
		slowest = math.Min(slowest, lv.rate)
		var part [1]int64
		Split(lv.size, lv.rate, []float64{l.share}, part[:])
		burst = min(burst, part[0])
	}
	switch {
	case b.unlimited || (!limited && len(b.levels) > 0):
		return Assignment{Kind: AllowAll, TTL: ttl}
	case !limited:
		return Assignment{Kind: st.svc.opts.Unmatched, TTL: ttl}
	}
	fill := FillInterval(slowest)
	prev := b.sent
	a := Next(prev, share, burst, fill)
	a.TTL = ttl
	return a
}

// abandoned reports whether no Envoy has reported a request of b for
// AbandonAfter (on this replica, or any, as the registry tells), and
// drops it from the stream if so. Called with st.mu held.
func (st *stream) abandoned(b *sub, now time.Time) bool {
	last := b.active
	if n := len(b.levels); n > 0 && b.levels[n-1].sl.latest > 0 {
		if t := time.UnixMicro(b.levels[n-1].sl.latest); t.After(last) {
			last = t
		}
	}
	if now.Sub(last) < st.svc.opts.AbandonAfter {
		return false
	}
	delete(st.subs, b.key)
	delete(st.raw, b.raw)
	for _, a := range b.aliases {
		delete(st.raw, a)
	}
	st.svc.buckets.Add(-1)
	st.unwatch(b)
	return true
}

// standing is whether a report's division stands: worked out with the
// store and the other replicas as they are (fresh), from the last known
// while they fail (static), or not at all (failed).
type standing int

const (
	standsFresh standing = iota
	standsStatic
	standsFailed
)

// standing judges a report's division by its charge's error and its
// publish's. An exchange that failed is read from the last for as long as
// entries live (a slow moment, not a fault); beyond, or while charges
// fail, the division stands as static for FailStatic since the last
// exchange and the first failed charge, then the failure mode answers.
func (st *stream) standing(chargeErr, publishErr error, now time.Time) standing {
	var stale *StaleError
	switch {
	case chargeErr == nil && publishErr == nil:
		return standsFresh
	case publishErr != nil && !errors.As(publishErr, &stale):
		return standsFailed
	case stale != nil && stale.Since.IsZero():
		return standsFailed // no division was ever read: nothing to stand on
	}
	var age time.Duration
	if stale != nil {
		age = now.Sub(stale.Since)
	}
	if chargeErr == nil && age <= st.entryTTL() {
		return standsFresh
	}
	if chargeErr != nil {
		age = max(age, now.Sub(st.chargeFailing))
	}
	if st.svc.opts.FailStatic > 0 && age <= st.svc.opts.FailStatic {
		return standsStatic
	}
	return standsFailed
}

// blanket answers every bucket of batch by the failure mode, for a short
// while: a report interval.
func (st *stream) blanket(batch []*sub) answer {
	kind := AllowAll
	if st.svc.opts.FailureMode == FailDeny {
		kind = DenyAll
	}
	ttl := int64(max(math.Ceil(st.interval.Seconds()), 5))
	var out answer
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, b := range batch {
		a := Assignment{Kind: kind, TTL: ttl}
		b.sent, b.sentAt = a, time.Time{}
		st.svc.obs.Assigned(kind.String(), true)
		out.msg = b.appendAnswer(out.msg, a)
		out.actions++
	}
	return out
}

// budget is how long an answer's store and registry calls may take: the
// store timeout, which is sized for an RLS call, or for a report half its
// interval if longer (up to 5 s). An Envoy waits for nothing meanwhile: it
// enforces the assignment it holds until the answer comes, and an answer
// given up on sends it nothing while its report's work is done again at
// the next, which turns a slow store into a busier one.
func (st *stream) budget() time.Duration {
	return max(st.svc.opts.StoreTimeout, min(st.interval/2, 5*time.Second))
}

// entryTTL is how long the stream's registry entries last unless
// published again: its assignments' TTL (three report intervals), so that
// an Envoy that went away frees its share within a few report intervals.
func (st *stream) entryTTL() time.Duration { return time.Duration(st.ttl()) * time.Second }
