package localfirst

import (
	"context"
	"hash/maphash"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// debt is hits of a limit that charges always that did not fit in what
// Redis granted this replica: usage already spent, to be charged on Redis
// past the limit.
type debt struct {
	index int // the bucket's place in its request
	entry *entry
	hits  int64
}

// pay charges debts on Redis (the store's exact path, which charges a
// bucket that charges always whatever its room) and reports each bucket
// as Redis then holds it. The call runs to its end even if the request
// stops waiting; if it fails, the debts stay with their entries for the
// next sync to send: a charge is never dropped. (A reply lost after Redis
// ran the call may have it sent twice: the budget then binds early, not
// late.)
func (s *Store) pay(ctx context.Context, now time.Time, buckets []limit.Bucket, debts []debt, results []limit.Result) {
	pays := make([]limit.Bucket, len(debts))
	for n, d := range debts {
		b := buckets[d.index]
		pays[n] = limit.Bucket{Key: b.Key, Limit: b.Limit, Hits: d.hits, Always: true, Shadow: true}
	}
	got := make([]limit.Result, len(debts))
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		defer cancel()
		err := s.remote.Apply(ctx, now, pays, got)
		s.settle(debts, pays, got, err)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return // the local figures stand: over, for what did not fit
		}
		for n, d := range debts {
			r := got[n]
			r.Admitted, r.Remaining = false, 0 // the hits did not fit in what was granted
			results[d.index] = r
		}
	case <-ctx.Done():
	}
}

// settle records the outcome of a debts' call in their entries: Redis's
// state, or, if the call failed, the debts, for the next sync to send.
func (s *Store) settle(debts []debt, pays []limit.Bucket, got []limit.Result, err error) {
	for n, d := range debts {
		sh := &s.shards[maphash.String(s.seed, pays[n].Key)%shards]
		sh.mu.Lock()
		e := d.entry
		switch {
		case e.limit != pays[n].Limit:
			// A reload changed the limit meanwhile: the old one's debt
			// went to its own key, or is dropped with it.
		case err != nil:
			e.debt += d.hits
		case !e.forgot:
			e.global = got[n].State
		}
		sh.mu.Unlock()
	}
}

// keepCharges records, when Redis cannot be asked, the hits of the
// request's limits that charge always: from what the replica holds, and
// past it as debts for the next sync, so that usage already spent is not
// lost with the call.
func (s *Store) keepCharges(locks []uint32, buckets []limit.Bucket, entries []*entry) {
	s.lock(locks)
	defer s.unlock(locks)
	for i, b := range buckets {
		e := entries[i]
		switch {
		case !b.Always || b.Hits <= 0 || e.limit != b.Limit:
		case b.Hits > e.lease:
			e.debt += b.Hits - e.lease
			e.lease = 0
		default:
			e.lease -= b.Hits
		}
	}
}

// payDebts sends the debts that could not be sent when they were made, in
// calls of at most debtChunk buckets; it is the sync's first step.
func (s *Store) payDebts(ctx context.Context, now time.Time) {
	var debts []debt
	var buckets []limit.Bucket
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for key, e := range sh.m {
			if e.debt > 0 {
				debts = append(debts, debt{index: len(buckets), entry: e, hits: e.debt})
				buckets = append(buckets, limit.Bucket{Key: key, Limit: e.limit, Hits: e.debt, Always: true, Shadow: true})
				e.debt = 0
			}
		}
		sh.mu.Unlock()
	}
	for start := 0; start < len(debts); start += debtChunk {
		end := min(start+debtChunk, len(debts))
		got := make([]limit.Result, end-start)
		err := s.remote.Apply(ctx, now, buckets[start:end], got)
		if err != nil {
			s.failures.Add(1)
		}
		s.settle(debts[start:end], buckets[start:end], got, err)
	}
}

// debtChunk bounds the buckets of one call that sends debts.
const debtChunk = 256
