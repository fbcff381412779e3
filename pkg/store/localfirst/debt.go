package localfirst

import (
	"context"
	"hash/maphash"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
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

// owed is what a charge of hits leaves owed beyond a lease (which a sync
// may have left below 0: units used meanwhile beyond its grant), at most
// leaky.MaxSize: a count saturates there, and no sum wraps.
func owed(hits, lease int64) int64 {
	if lease < 0 {
		return min(hits, leaky.MaxSize) + min(-lease, leaky.MaxSize)
	}
	return min(hits-lease, leaky.MaxSize)
}

// pay charges debts on Redis (the store's exact path, which charges a
// bucket that charges always whatever its room) and reports each bucket
// as Redis then holds it. The call runs to its end even if the request
// stops waiting; if it fails, the debts stay with their entries for the
// next sync to send: a charge is never dropped. (A reply lost after Redis
// ran the call may have it sent twice: the budget then binds early, not
// late.) Each debt's entry counts the call in its paying.
func (s *Store) pay(ctx context.Context, now time.Time, buckets []limit.Bucket, debts []debt, results []limit.Result) {
	pays := make([]limit.Bucket, len(debts))
	for n, d := range debts {
		b := buckets[d.index]
		pays[n] = limit.Bucket{Key: b.Key, Limit: b.Limit, Hits: d.hits, Always: true}
	}
	got := make([]limit.Result, len(debts))
	done := make(chan error, 1)
	s.paying.Add(1)
	go func() {
		defer s.paying.Done()
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		defer cancel()
		rnow := now.UnixMicro() + s.offset.Load()
		err := s.remote.Apply(ctx, now, pays, got)
		s.settle(debts, pays, got, rnow, err)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return // the local figures stand
		}
		for n, d := range debts {
			results[d.index] = got[n]
		}
	case <-ctx.Done():
	}
}

// settle records the outcome of a call that sent debts, made at rnow
// (Redis's clock): Redis's state, or, if the call failed, the debts, for
// the next sync to send. A debt is kept across a reload: it is usage of
// the bucket's key, whatever its limit now.
func (s *Store) settle(debts []debt, pays []limit.Bucket, got []limit.Result, rnow int64, err error) {
	for n, d := range debts {
		sh := &s.shards[maphash.String(s.seed, pays[n].Key)%shards]
		sh.mu.Lock()
		e := d.entry
		e.paying--
		switch {
		case err != nil:
			e.addDebt(d.hits, rnow)
		case !e.forgot && e.limit == pays[n].Limit:
			e.global = got[n].State
		}
		sh.mu.Unlock()
	}
}

// addDebt records hits owed to Redis, made at rnow.
func (e *entry) addDebt(hits, rnow int64) {
	if e.debt == 0 {
		e.debtAt = rnow
	}
	e.debt = min(e.debt+hits, leaky.MaxSize)
}

// owing is hits of a bucket admitted on trust, at its first sighting, at
// at (Redis's clock), that Redis has not been told of.
type owing struct {
	key   string
	limit limit.Limit
	hits  int64
	at    int64
}

// payDebts sends the debts that could not be sent when they were made and
// the hits admitted on trust, in calls of at most debtChunk buckets; it is
// the sync's first step. Both are charged past the limit if need be: they
// were admitted. A bucket Redis then finds past its limit gets an entry,
// refused until Redis said it would have room, so that trust is given once
// per bucket found full. A fixed window's debt made in a window that has
// ended since is dropped: the window would have forgotten it.
func (s *Store) payDebts(ctx context.Context, now time.Time) {
	rnow := now.UnixMicro() + s.offset.Load()
	var debts []debt
	var buckets []limit.Bucket
	var owed []owing
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, e := range sh.m {
			if e.debt == 0 {
				continue
			}
			if ended(e.limit, e.debtAt, rnow) {
				e.debt = 0
				continue
			}
			debts = append(debts, debt{index: len(buckets), entry: e, hits: e.debt})
			buckets = append(buckets, limit.Bucket{Key: e.key, Limit: e.limit, Hits: e.debt, Always: true})
			e.debt = 0
			e.paying++
		}
		for _, o := range sh.owed {
			if !ended(o.limit, o.at, rnow) {
				owed = append(owed, o)
			}
		}
		sh.owed = nil
		sh.mu.Unlock()
	}
	for _, o := range owed {
		buckets = append(buckets, limit.Bucket{Key: o.key, Limit: o.limit, Hits: o.hits, Always: true})
	}
	for start := 0; start < len(buckets); start += debtChunk {
		end := min(start+debtChunk, len(buckets))
		got := make([]limit.Result, end-start)
		err := s.remote.Apply(ctx, now, buckets[start:end], got)
		if err != nil {
			s.failures.Add(1)
		}
		if start < len(debts) {
			d := min(end, len(debts))
			s.settle(debts[start:d], buckets[start:d], got[:d-start], rnow, err)
		}
		for j := max(start, len(debts)); j < end; j++ {
			s.settleOwed(owed[j-len(debts)], got[j-start], rnow, err)
		}
	}
}

// ended reports whether a fixed window's charge made at (Redis's clock)
// is of a window that has ended by rnow.
func ended(l limit.Limit, at, rnow int64) bool {
	if l.Algorithm != limit.FixedWindow {
		return false
	}
	win := l.Fixed().Window.Microseconds()
	return floorDiv(rnow, win) != floorDiv(at, win)
}

// settleOwed records the outcome of a call that charged hits admitted on
// trust: if it failed, they are owed again (for the next sync); if Redis
// found the bucket past its limit, it gets an entry that refuses it until
// Redis would have room.
func (s *Store) settleOwed(o owing, got limit.Result, rnow int64, err error) {
	h := maphash.String(s.seed, o.key)
	sh := &s.shards[h%shards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if err != nil {
		sh.owed = append(sh.owed, o)
		return
	}
	if got.Admitted {
		return
	}
	e, terr := s.entry(sh, h, limit.Bucket{Key: o.key, Limit: o.limit})
	if terr != nil || e.forgot {
		return
	}
	e.global, e.dry, e.roomAt = got.State, true, rnow+got.Reset.Microseconds()
}

// debtChunk bounds the buckets of one call that sends debts.
const debtChunk = 256
