package localfirst

import (
	"context"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// decideOnRedis has Redis decide the request's remote buckets, in one
// call, all or nothing among themselves, then charges the units reserved
// of the others if Redis admitted, or returns them.
func (s *Store) decideOnRedis(ctx context.Context, now time.Time, r *request, results []limit.Result, mayRetry bool) error {
	var index []int // the remote buckets' places in the request
	for i, remote := range r.remote {
		if remote {
			index = append(index, i)
		}
	}
	rb, rr := make([]limit.Bucket, len(index)), make([]limit.Result, len(index))
	for j, i := range index {
		rb[j] = r.buckets[i]
	}
	start := time.Now()
	err := s.remote.Apply(ctx, now, rb, rr)
	if err == nil && mayRetry {
		s.awaitCalls(ctx, r, index, rr, time.Since(start))
	}
	s.lock(r.locks)
	defer s.unlock(r.locks)
	rnow := now.UnixMicro() + s.offset.Load()
	if err != nil {
		s.unreserveAll(r, rnow)
		return err
	}
	admitted := true
	for j, i := range index {
		if !rr[j].Admitted && !r.buckets[i].Shadow {
			admitted = false
		}
	}
	if mayRetry && coveredNow(r, index, rr, admitted) {
		for i := range r.buckets {
			s.unreserve(r, i)
		}
		return errAgain
	}
	for j, i := range index {
		b, res := r.buckets[i], rr[j]
		results[i] = res
		if e := r.entries[i]; e != nil && !e.forgot && e.limit == b.Limit {
			e.global = res.State
			if !res.Admitted && b.Hits > 0 {
				// Full: refused here until Redis would have room.
				e.dry, e.roomAt = true, rnow+res.Reset.Microseconds()
			}
		}
	}
	for i, b := range r.buckets {
		e := r.entries[i]
		if r.trusted[i] {
			results[i] = s.trust(r, i, rnow, admitted || b.Always)
			continue
		}
		if e == nil || r.remote[i] {
			continue
		}
		charged := admitted || b.Always
		// Reported as if the reserved units were still held, as decided.
		held := e.lease
		if e.gen == r.gens[i] {
			e.lease += r.reserved[i]
		} else {
			e.lease = r.reserved[i]
		}
		if b.Shadow && b.Hits > e.lease {
			results[i] = s.report(e, b, rnow, false)
		} else {
			results[i] = s.report(e, b, rnow, charged)
		}
		e.lease = held
		if !charged {
			s.unreserve(r, i)
		}
	}
	return nil
}

// awaitCalls waits for the calls for more units out for the buckets Redis
// refused: Redis may have run one before this request's, and granted
// this replica the room it found missing. Its answer is then on its way,
// and is waited for as long as this request's call took (or a
// millisecond), at most: a refused request may wait for about one more
// round trip, never for a slow call.
func (s *Store) awaitCalls(ctx context.Context, r *request, index []int, rr []limit.Result, rtt time.Duration) {
	var calls []chan struct{}
	s.lock(r.locks)
	for j, i := range index {
		if e := r.entries[i]; e != nil && e.busy != nil && !rr[j].Admitted {
			calls = append(calls, e.busy)
		}
	}
	s.unlock(r.locks)
	if len(calls) == 0 {
		return
	}
	t := time.NewTimer(max(rtt, time.Millisecond))
	defer t.Stop()
	for _, c := range calls {
		select {
		case <-c:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// coveredNow reports whether Redis refused, and charged nothing of, a
// request whose remote buckets this replica now holds enough units of:
// they came meanwhile, by a call for more, and took the room Redis found
// missing. The request is then decided again, here.
func coveredNow(r *request, index []int, rr []limit.Result, admitted bool) bool {
	for _, t := range r.trusted {
		if t {
			return false // seen now, it would not be trusted again
		}
	}
	refused := false
	for j, i := range index {
		b, e := r.buckets[i], r.entries[i]
		switch {
		case b.Always, admitted && rr[j].Admitted && b.Hits > 0:
			return false // charged on Redis
		case e == nil || e.limit != b.Limit || e.lease < b.Hits:
			return false
		case !rr[j].Admitted:
			refused = true
		}
	}
	return refused
}

// unreserveAll puts back the units reserved of a request Redis did not
// decide, but those of limits that charge always, which keep their charge,
// and keeps the charges of the others as debts: usage already spent, for
// the next sync to send, whoever answers now. (A reply lost after Redis
// ran the call has it sent twice: the budget binds early, not late.)
func (s *Store) unreserveAll(r *request, rnow int64) {
	for i, b := range r.buckets {
		switch {
		case !b.Always || b.Hits <= 0:
			s.unreserve(r, i)
		case r.remote[i]:
			s.addDebt(r, i, rnow)
		case r.trusted[i]:
			s.trust(r, i, rnow, true)
		}
	}
}

// keepCharges is unreserveAll for a request Redis did not decide whose
// buckets all went to Redis, taking the locks it needs.
func (s *Store) keepCharges(now time.Time, r *request) {
	s.lock(r.locks)
	defer s.unlock(r.locks)
	s.unreserveAll(r, now.UnixMicro()+s.offset.Load())
}

// addDebt records bucket i's hits as a debt, in its entry, made if need
// be (lost, and counted so, if the table is full).
func (s *Store) addDebt(r *request, i int, rnow int64) {
	b, e := r.buckets[i], r.entries[i]
	if e == nil {
		e, _ = s.entry(&s.shards[r.hashes[i]%shards], r.hashes[i], b)
	}
	if e == nil {
		s.lost.Add(uint64(b.Hits))
		return
	}
	e.addDebt(min(b.Hits, leaky.MaxSize), rnow)
}

// unreserve puts bucket i's reserved units back in its lease, unless the
// lease was ended meanwhile (a reset, a reload, an ended window), which
// they belonged to.
func (s *Store) unreserve(r *request, i int) {
	if e := r.entries[i]; e != nil && r.reserved[i] > 0 && e.gen == r.gens[i] {
		e.lease += r.reserved[i]
	}
	r.reserved[i] = 0
}
