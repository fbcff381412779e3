package localfirst

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// ErrClosed is returned by Apply after Close.
var ErrClosed = errors.New("local-first store: closed")

// request is what Apply knows of one request while it decides it. Requests
// of a few buckets, nearly all, allocate nothing for it: its slices start
// in arrays of Apply's.
type request struct {
	buckets []limit.Bucket
	hashes  []uint64
	locks   []uint32 // the shards of its buckets, sorted, each once
	entries []*entry // nil: a bucket this replica does not track
	remote  []bool   // whether Redis decides the bucket
	trusted []bool   // whether the bucket is admitted on trust, charged at the next sync
	// reserved is the units taken from a bucket's lease while Redis
	// decides the others, and gens the lease's generation then.
	reserved []int64
	gens     []uint32
}

// Apply decides the buckets of one request with the all-or-nothing rule.
// A bucket this replica holds enough units of is decided here, against
// them. Any other is decided on Redis, exactly, by the call exact mode
// makes (which the Redis store batches with other requests'), while the
// units of the buckets decided here are set aside: a request waits for at
// most one Redis call, and only if exact mode would have waited for it
// too. A bucket that Redis found full, or that refused a lease, is refused
// here until Redis said it would have room again, or until the next sync.
//
// A bucket not seen for two intervals (its first sighting) is admitted on
// trust under a large limit, and charged at the next sync (sight.go), or
// decided on Redis under a small one: a bucket seen once costs one Redis
// update whatever is done, and a lease would cost a give-back on top.
// Units are leased to buckets seen again: at syncs, in batched calls, and
// to a bucket seen a third time or short of its lease, in the background,
// while its requests are decided on Redis. A request that gives hits back, or checks
// a limit that charges always, is decided on Redis whole. An error means
// Redis was needed and did not answer; nothing is charged then but usage
// of limits that charge always, which is kept for the next sync.
func (s *Store) Apply(ctx context.Context, now time.Time, buckets []limit.Bucket, results []limit.Result) error {
	select {
	case <-s.stop:
		return ErrClosed
	default:
	}
	if len(results) < len(buckets) {
		return fmt.Errorf("local-first store: %d results for %d buckets", len(results), len(buckets))
	}
	if len(buckets) == 0 {
		return nil
	}
	for _, b := range buckets {
		if b.Hits < 0 || (b.Always && b.Hits == 0) {
			// A refund makes room for the hits Redis still counts, which
			// only Redis knows: they may have leaked, left the window, or
			// never been charged. A check of a limit that charges always
			// asks whether every replica's charges together are past it,
			// which only Redis knows too.
			return s.remote.Apply(ctx, now, buckets, results)
		}
	}
	var (
		hashBuf   [8]uint64
		resBuf    [8]int64
		lockBuf   [8]uint32
		genBuf    [8]uint32
		entryBuf  [8]*entry
		remoteBuf [8]bool
		trustBuf  [8]bool
	)
	r := request{buckets: buckets, hashes: hashBuf[:0], locks: lockBuf[:0], entries: entryBuf[:0],
		remote: remoteBuf[:0], trusted: trustBuf[:0], reserved: resBuf[:0], gens: genBuf[:0]}
	for _, b := range buckets {
		h := maphash.String(s.seed, b.Key)
		r.hashes = append(r.hashes, h)
		r.locks = insertSorted(r.locks, uint32(h%shards))
		r.entries = append(r.entries, nil)
		r.remote = append(r.remote, false)
		r.trusted = append(r.trusted, false)
		r.reserved = append(r.reserved, 0)
		r.gens = append(r.gens, 0)
	}
	for first := true; ; first = false {
		err := s.decide(ctx, now, buckets, &r, results, first)
		if err != errAgain {
			return err
		}
	}
}

// errAgain is decideOnRedis's answer when the request is to be decided
// again: units came meanwhile for what Redis refused.
var errAgain = errors.New("local-first store: decide again")

// decide decides r, the request of buckets, once: here if it can, or with
// Redis's help. The first time counts its demand. (buckets is r.buckets,
// passed on its own: what goes to Redis must not take r to the heap.)
func (s *Store) decide(ctx context.Context, now time.Time, buckets []limit.Bucket, r *request, results []limit.Result, first bool) error {
	s.lock(r.locks)
	rnow := now.UnixMicro() + s.offset.Load()
	refused := false
	var short []int // buckets to ask more for, in the background
	remote := 0
	for i, b := range buckets {
		e, sight := s.track(&s.shards[r.hashes[i]%shards], r.hashes[i], b)
		r.entries[i] = e
		r.trusted[i] = sight == unseen && trusts(b)
		r.remote[i] = e == nil && !r.trusted[i]
		if e == nil {
			if r.remote[i] {
				remote++
			}
			continue
		}
		if e.busy == nil || e.limit.Algorithm == limit.FixedWindow {
			// A fixed window's units end with it even while a call
			// is out: its answer leaves an ended lease alone.
			s.expire(e, rnow)
		}
		if b.Hits > 0 && first {
			e.demand = min(e.demand, leaky.MaxSize) + min(b.Hits, leaky.MaxSize) // no wrap, however large
		}
		if b.Hits <= 0 || e.lease >= b.Hits {
			continue
		}
		// A shadow bucket (a quota-mode one among them) asks too: its
		// figures decide a quota, and must say whether Redis has room.
		switch full := e.full(rnow); {
		case full && b.Shadow:
		case full:
			refused = true
		default:
			r.remote[i] = true
			remote++
			if sight != fresh && e.busy == nil && !e.dry {
				short = append(short, i)
			}
		}
	}
	if refused || remote == 0 {
		debts := s.decideHere(r, rnow, !refused, results)
		s.unlock(r.locks)
		if len(debts) > 0 {
			s.pay(ctx, now, buckets, debts, results)
		}
		return nil
	}
	if cold := remote == len(buckets) && !r.tracked(); cold {
		// Buckets seen once, all: exactly what exact mode does.
		s.unlock(r.locks)
		err := s.remote.Apply(ctx, now, buckets, results)
		if err != nil {
			s.keepCharges(now, r)
		}
		return err
	}
	s.reserve(r)
	var more *ask
	if len(short) > 0 {
		ch, leases := s.askMore(buckets, r.entries, short)
		more = &ask{now: now, leases: leases, done: ch}
		for _, i := range short {
			more.entries = append(more.entries, r.entries[i])
		}
	}
	s.unlock(r.locks)
	if more != nil {
		s.asks.add(s, more)
	}
	return s.decideOnRedis(ctx, now, r, results, first)
}

// tracked reports whether any of r's buckets has an entry.
func (r *request) tracked() bool {
	for _, e := range r.entries {
		if e != nil {
			return true
		}
	}
	return false
}

// decideHere decides a request from the units held of its buckets, all of
// which have enough, unless one was found full (admitted false). It
// returns the charges of limits that charge always that go past what is
// held, for Redis.
func (s *Store) decideHere(r *request, rnow int64, admitted bool, results []limit.Result) []debt {
	for i, b := range r.buckets {
		if r.trusted[i] {
			results[i] = s.trust(r, i, rnow, admitted || b.Always)
			continue
		}
		results[i] = s.report(r.entries[i], b, rnow, admitted || b.Always)
	}
	var debts []debt
	for i, b := range r.buckets {
		e := r.entries[i]
		switch {
		case r.trusted[i]:
		case b.Always && b.Hits > e.lease:
			// Usage already spent, past what Redis granted: charged on
			// Redis at once, past the limit, whatever the answer.
			debts = append(debts, debt{index: i, entry: e, hits: owed(b.Hits, e.lease)})
			e.lease = 0
			e.paying++
		case b.Always:
			e.lease -= b.Hits
		case !admitted:
		case b.Shadow:
			e.lease -= min(b.Hits, e.lease) // past its lease, a shadow bucket is not charged
		default:
			e.lease -= b.Hits
		}
	}
	return debts
}

// reserve sets aside, from their leases, the hits of the buckets decided
// here while Redis decides the others; decideOnRedis charges or returns
// them by its answer.
func (s *Store) reserve(r *request) {
	for i, b := range r.buckets {
		e := r.entries[i]
		take := int64(0)
		if e != nil && b.Hits > 0 && !r.remote[i] {
			take = min(b.Hits, e.lease) // a shadow bucket found full: what is held
			e.lease -= take
		}
		if e != nil {
			r.gens[i] = e.gen
		}
		r.reserved[i] = take
	}
}

// askMore marks the buckets short as busy and returns the channel closed
// when Redis has answered, and what to ask it: what the request lacks, and
// at least twice the bucket's demand so far (a leaky bucket: or a
// sixteenth of its room), so that a bucket in demand needs few calls.
func (s *Store) askMore(buckets []limit.Bucket, entries []*entry, short []int) (chan struct{}, []redis.Lease) {
	ch := make(chan struct{})
	leases := make([]redis.Lease, len(short))
	for j, i := range short {
		b, e := buckets[i], entries[i]
		e.busy = ch
		want := max(b.Hits, 2*max(e.demand, e.prev))
		if b.Limit.Algorithm == limit.LeakyBucket {
			want = max(want, (b.Limit.Size-e.global.Counter)/headroom)
		}
		want -= e.lease
		leases[j] = redis.Lease{Key: b.Key, Limit: b.Limit, Ask: want}
	}
	return ch, leases
}
