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
	entry  *entry
	key    string
	limit  limit.Limit
	second bool // limit.Bucket.SecondUnit
	hits   int64
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

// pay starts charging debts on Redis (the store's exact path, which
// charges a bucket that charges always whatever its room) and returns a
// channel closed when that is done, nil when there are none. The request
// that made them waits for it before it answers (awaitPaid), as exact mode
// charges before it answers: otherwise its caller's next check could reach
// Redis before the charge, and a budget checked and charged by several
// replicas overshoots more than in exact mode. A request going on to Redis
// waits while its own call is out, so the debts cost it no round trip.
// The call is not cancelled with the request: the usage is spent.
func (s *Store) pay(ctx context.Context, now time.Time, debts []debt) <-chan struct{} {
	if len(debts) == 0 {
		return nil
	}
	done := make(chan struct{})
	s.paying.Add(1)
	go func() {
		defer s.paying.Done()
		defer close(done)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
		defer cancel()
		s.sendDebts(cctx, now, debts)
	}()
	return done
}

// awaitPaid waits for pay's call, or until ctx is done.
func awaitPaid(ctx context.Context, paid <-chan struct{}) {
	if paid == nil {
		return
	}
	select {
	case <-paid:
	case <-ctx.Done():
	}
}

// sendDebts charges debts in one call. If it fails, the debts stay with
// their entries for the next sync to send: a charge is never dropped. (A
// reply lost after Redis ran the call may have it sent twice: the budget
// then binds early, not late.) Each debt's entry counts the call in its
// paying.
func (s *Store) sendDebts(ctx context.Context, now time.Time, debts []debt) {
	pays := make([]limit.Bucket, len(debts))
	for n, d := range debts {
		pays[n] = limit.Bucket{Key: d.key, Limit: d.limit, Hits: d.hits, Always: true, SecondUnit: d.second}
	}
	rnow := now.UnixMicro() + s.offset.Load()
	err := s.remote.Apply(ctx, now, pays, make([]limit.Result, len(pays)))
	if err != nil {
		s.failures.Add(1)
	}
	s.settle(debts, rnow, err)
}

// settle records the outcome of a call that sent debts, made at rnow
// (Redis's clock): if it failed, the debts, for the next sync to send. A
// debt is kept across a reload: it is usage of the bucket's key, whatever
// its limit now.
func (s *Store) settle(debts []debt, rnow int64, err error) {
	for _, d := range debts {
		sh := &s.shards[maphash.String(s.seed, d.key)%shards]
		sh.mu.Lock()
		d.entry.paying--
		if err != nil {
			s.owe(d.entry, d.hits, rnow)
		}
		sh.mu.Unlock()
	}
}

// owe records hits of e owed to Redis, made at rnow, for the next sync.
func (s *Store) owe(e *entry, hits, rnow int64) {
	s.owing.Store(true)
	if e.debt == 0 {
		e.debtAt = rnow
	}
	e.debt = min(e.debt+hits, leaky.MaxSize)
}

// addDebt records bucket i of r's hits as a debt, in its entry, made if
// need be (lost, and counted so, if the table is full).
func (s *Store) addDebt(r *request, i int) {
	b, e := r.buckets[i], r.entries[i]
	if e == nil {
		e, _ = s.entry(&s.shards[r.hashes[i]%shards], r.hashes[i], b)
	}
	if e == nil {
		s.lost.Add(uint64(b.Hits))
		return
	}
	s.owe(e, min(b.Hits, leaky.MaxSize), r.rnow)
}

// payDebts sends the debts that could not be sent when they were made, in
// calls of at most debtChunk buckets; it is the sync's first step. They
// are charged past the limit if need be: they were admitted. A fixed
// window's debt made in a window that has ended since is dropped: the
// window would have forgotten it.
func (s *Store) payDebts(ctx context.Context, now time.Time) {
	if !s.owing.Swap(false) {
		return // none recorded since the last look
	}
	rnow := now.UnixMicro() + s.offset.Load()
	var debts []debt
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
			debts = append(debts, debt{entry: e, key: e.key, limit: e.limit, second: e.second, hits: e.debt})
			e.debt = 0
			e.paying++
		}
		sh.mu.Unlock()
	}
	for start := 0; start < len(debts); start += debtChunk {
		s.sendDebts(ctx, now, debts[start:min(start+debtChunk, len(debts))])
	}
}

// ended reports whether a fixed window's charge made at (Redis's clock)
// is of a window (a calendar window's period) that has ended by rnow.
func ended(l limit.Limit, at, rnow int64) bool {
	if l.Algorithm != limit.FixedWindow {
		return false
	}
	p := l.FixedPeriod(at)
	return rnow < p.Start || rnow >= p.End
}

// debtChunk bounds the buckets of one call that sends debts.
const debtChunk = 256
