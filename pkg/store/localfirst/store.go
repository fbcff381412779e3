// Package localfirst is the local-first mode of the Redis store: each
// replica decides in process, against units of each bucket that Redis
// leased to it, and reconciles with Redis once per interval in batched
// script calls, so that Redis work grows with the buckets in use per
// interval rather than with requests. Redis holds every bucket; a replica
// keeps only the units it was leased and what it last learnt of each.
//
// A lease is charged on Redis like admitted hits, before the replica
// admits anything with it, so units granted to all replicas together never
// exceed what the limit allows. What a replica holds and does not use is
// given back at its next sync. The mode trades exactness for Redis work in
// two bounded ways (docs/operations.md, "Local-first mode"):
//   - it may admit less: units one replica holds unused are refused to the
//     others until that replica's next sync, and a replica whose bucket
//     was found full waits for its next sync before asking again;
//   - a leaky bucket's leased units start leaking on Redis when granted,
//     not when used, so units held for a while let the bucket take that
//     much more: at most what it drips while units are held, at most
//     maxHold (eight) intervals.
//
// A request is all or nothing within a replica. Across replicas each
// bucket is all or nothing per lease, not per request.
package localfirst

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// Remote is the Redis store underneath: leases, and exact decisions for
// requests whose buckets the local table has no room for.
type Remote interface {
	Apply(ctx context.Context, now time.Time, buckets []limit.Bucket, results []limit.Result) error
	LeaseAll(ctx context.Context, now time.Time, leases []redis.Lease) (int64, error)
	State(ctx context.Context, now time.Time, buckets []limit.Bucket, states []limit.State) (time.Time, error)
	Reset(ctx context.Context, keys []string) error
	WatchResets(ctx context.Context, forget func(keys []string))
	Check(ctx context.Context) error
	Close() error
}

// Options configure a Store.
type Options struct {
	// Interval is how often the replica syncs with Redis. Required.
	Interval time.Duration
	// MaxBytes bounds the local table, by each bucket's key and
	// EntryOverhead; requests with a bucket beyond it are decided on Redis,
	// exactly. 0 means memory.DefaultMaxBytes' 256 MiB.
	MaxBytes int64
	// SyncTimeout bounds one lease call: a sync, or a call for more units
	// (which goes on after the request that made it stops waiting). 0
	// means the interval, and at least a second.
	SyncTimeout time.Duration
	Logger      *slog.Logger
}

// EntryOverhead is what a bucket of the local table counts against
// MaxBytes beside its key: the entry and its map slot.
const EntryOverhead = 192

const shards = 64

// Store decides locally against leases from a Remote. It is safe for
// concurrent use.
type Store struct {
	remote   Remote
	interval time.Duration
	timeout  time.Duration
	maxBytes int64
	log      *slog.Logger
	seed     maphash.Seed
	shards   [shards]shard
	bytes    atomic.Int64
	// offset is Redis's clock less the local one, in microseconds, as the
	// last lease call found it: leases are charged on Redis's clock.
	offset   atomic.Int64
	nextSync atomic.Int64 // local Unix microseconds
	asks     asks
	syncs    atomic.Uint64
	failures atomic.Uint64
	lost     atomic.Uint64 // units set aside and not given back

	// failedSyncs counts the syncs failed in a row, lastSyncWarn when one
	// was last logged (Unix nanoseconds).
	failedSyncs  atomic.Int64
	lastSyncWarn atomic.Int64

	// paying tracks the calls out that send debts, which Close waits for.
	paying sync.WaitGroup

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

type shard struct {
	mu sync.Mutex
	m  map[string]*entry
}

// New returns a store deciding locally against remote's leases and starts
// its sync loop. Close stops it and gives back what it holds.
func New(remote Remote, opts Options) (*Store, error) {
	if opts.Interval <= 0 {
		return nil, fmt.Errorf("local-first store: the sync interval must be positive, got %v", opts.Interval)
	}
	if opts.MaxBytes == 0 {
		opts.MaxBytes = 256 << 20
	}
	if opts.MaxBytes < 0 {
		return nil, fmt.Errorf("local-first store: max bytes must not be negative, got %d", opts.MaxBytes)
	}
	if opts.SyncTimeout <= 0 {
		opts.SyncTimeout = max(opts.Interval, time.Second)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Store{remote: remote, interval: opts.Interval, timeout: opts.SyncTimeout, maxBytes: opts.MaxBytes,
		log: opts.Logger, seed: maphash.MakeSeed(), stop: make(chan struct{}), done: make(chan struct{})}
	for i := range s.shards {
		s.shards[i].m = map[string]*entry{}
	}
	s.nextSync.Store(time.Now().Add(opts.Interval).UnixMicro())
	go s.loop()
	return s, nil
}

// ErrClosed is returned by Apply after Close.
var ErrClosed = errors.New("local-first store: closed")

// maxRounds bounds how often one Apply waits for or asks Redis.
const maxRounds = 3

// Apply decides the buckets of one request with the all-or-nothing rule,
// against this replica's leases; a bucket without enough asks Redis for
// more (once per bucket until the next sync if Redis has less than
// asked). A request with a bucket the local table has no room for, or
// that gives hits back, is decided on Redis, exactly. An error means Redis
// was needed and did not answer; nothing is charged then.
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
	// Requests of a few buckets, nearly all, allocate nothing here.
	var (
		idBuf    [8]uint32
		lockBuf  [8]uint32
		entryBuf [8]*entry
	)
	ids, locks, entries := idBuf[:0], lockBuf[:0], entryBuf[:0]
	for _, b := range buckets {
		id := uint32(maphash.String(s.seed, b.Key) % shards)
		ids = append(ids, id)
		locks = insertSorted(locks, id)
		entries = append(entries, nil)
	}
	for round := 0; ; round++ {
		s.lock(locks)
		for i, b := range buckets {
			e, err := s.entry(&s.shards[ids[i]], b)
			if err != nil {
				s.unlock(locks)
				return s.remote.Apply(ctx, now, buckets, results)
			}
			entries[i] = e
		}
		rnow := now.UnixMicro() + s.offset.Load()
		var wait chan struct{}
		var short []int // buckets to ask Redis for more
		refused := false
		for i, b := range buckets {
			e := entries[i]
			if e.busy == nil || e.limit.Algorithm == limit.FixedWindow {
				// A fixed window's units end with it even while a call
				// is out: its answer leaves an ended lease alone.
				s.expire(e, rnow)
			}
			if b.Hits <= 0 || e.lease >= b.Hits {
				continue
			}
			// A shadow bucket (a quota-mode one among them) asks too: its
			// figures decide a quota, and must say whether Redis has room.
			switch {
			case e.busy != nil:
				wait = e.busy
			case e.dry && b.Shadow:
			case e.dry:
				refused = true
			default:
				short = append(short, i)
			}
		}
		if !refused && round < maxRounds && (wait != nil || len(short) > 0) {
			var leases []redis.Lease
			if wait != nil {
				// Another request's call is out for a bucket of this one:
				// its answer first, then whatever is still short.
				short = nil
			} else {
				wait, leases = s.askMore(buckets, entries, short)
			}
			s.unlock(locks)
			var more *ask
			if len(short) > 0 {
				more = &ask{now: now, leases: leases, done: wait}
				for _, i := range short {
					more.entries = append(more.entries, entries[i])
				}
				s.asks.add(s, more)
			}
			select {
			case <-wait:
			case <-ctx.Done():
				s.keepCharges(now, locks, buckets, entries) // usage spent is kept, whoever answers
				return ctx.Err()
			}
			if more != nil && more.err != nil {
				s.keepCharges(now, locks, buckets, entries)
				return more.err // Redis was needed: the caller's failure mode decides
			}
			continue
		}
		admitted := !refused
		for i, b := range buckets {
			e := entries[i]
			if b.Hits > 0 {
				e.demand = min(e.demand, leaky.MaxSize) + min(b.Hits, leaky.MaxSize) // no wrap, however large
			}
			if !b.Shadow && b.Hits > e.lease {
				admitted = false
			}
		}
		for i, b := range buckets {
			results[i] = s.report(entries[i], b, rnow, admitted || b.Always)
		}
		var debts []debt
		for i, b := range buckets {
			e := entries[i]
			switch {
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
		s.unlock(locks)
		if len(debts) > 0 {
			s.pay(ctx, now, buckets, debts, results)
		}
		return nil
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
		want := max(b.Hits, 2*(max(e.demand, e.prev)+b.Hits))
		if b.Limit.Algorithm == limit.LeakyBucket {
			want = max(want, (b.Limit.Size-e.global.Counter)/headroom)
		}
		want -= e.lease
		leases[j] = redis.Lease{Key: b.Key, Limit: b.Limit, Ask: want}
	}
	return ch, leases
}

// lease runs leases on Redis and applies the answer to the entries entry(j)
// returns, under their shards' locks; it clears their busy marks once
// their last lease is applied (leases of one entry are next to each
// other). held[j] (if held is not nil) is the part of lease j's Return
// still in its entry's lease, used meanwhile or not: it leaves the lease
// now, and what was used meanwhile is taken from the grant. It returns
// the first error of a call.
func (s *Store) lease(ctx context.Context, now time.Time, leases []redis.Lease, entryOf func(j int) *entry, held []int64) error {
	start := time.Now()
	rnow, err := s.remote.LeaseAll(ctx, now, leases)
	if rnow > 0 {
		// Redis decided somewhere between the call and its answer: half
		// way, as far as can be told.
		s.offset.Store(rnow - now.UnixMicro() - time.Since(start).Microseconds()/2)
	}
	if err != nil {
		s.failures.Add(1)
	}
	for j := range leases {
		l := leases[j]
		sh := &s.shards[maphash.String(s.seed, l.Key)%shards]
		sh.mu.Lock()
		e := entryOf(j)
		if held != nil && !e.forgot && e.limit == l.Limit && e.leasedAt == l.At {
			// Given back, or, if the call failed, perhaps given back. (A
			// new limit's entry never held them: entry dropped them; nor
			// does a fixed window's lease that expire ended.)
			e.lease -= held[j]
		}
		if l.Err == nil && !e.forgot {
			// (After a reset, Redis may have granted before it, units the
			// new bucket does not count: lost, as when a call fails.)
			if l.Granted > 0 {
				e.lease += l.Granted
				e.leasedAt = l.Now
			}
			e.global = l.State
			e.roomAt = l.Now + l.Wait.Microseconds()
			if l.Ask > 0 && l.Granted < l.Ask {
				e.dry = true
			}
		}
		if j+1 == len(leases) || leases[j+1].Key != l.Key {
			// Its last answer: a sync sends a sliding window's units set
			// aside and its lease as two, one after the other.
			e.busy, e.forgot = nil, false
		}
		sh.mu.Unlock()
	}
	return err
}

func (s *Store) lock(ids []uint32) {
	for _, id := range ids {
		s.shards[id].mu.Lock()
	}
}

func (s *Store) unlock(ids []uint32) {
	for _, id := range ids {
		s.shards[id].mu.Unlock()
	}
}

func insertSorted(ids []uint32, id uint32) []uint32 {
	for i, x := range ids {
		if x == id {
			return ids
		}
		if x > id {
			ids = append(ids, 0)
			copy(ids[i+1:], ids[i:])
			ids[i] = id
			return ids
		}
	}
	return append(ids, id)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
