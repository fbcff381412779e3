// Package localfirst is the local-first mode of the Redis store: each
// replica decides in process, against units of each bucket that Redis
// leased to it, and reconciles with Redis once per interval in batched
// script calls, so that Redis work grows with the buckets in use per
// interval rather than with requests. Redis holds every bucket; a replica
// keeps only the units it was leased and what it last learnt of each.
//
// Leases go to buckets that profit: a bucket seen once in an interval or
// two (the long tail of a per-user limit) gets none. Under a limit of at
// least a hundred times the request's hits, its first sighting is admitted
// on trust, as an empty bucket would be, and its hits are charged on Redis
// at the next sync, in a batched call, past the limit if need be; if Redis
// then finds the bucket past its limit, it is refused here until Redis
// would have room. Under a smaller limit, it is decided on Redis, exactly,
// by the same batched call as exact mode. Seen again, a bucket is decided
// on Redis and gets units at the next sync, or, seen a third time or short
// of its units, by a call in the background that no request waits for. A
// request waits for at most one Redis call, and only when exact mode would
// have waited for one too.
//
// A lease is charged on Redis like admitted hits, before the replica
// admits anything with it, so units granted to all replicas together never
// exceed what the limit allows. What a replica holds and does not use is
// given back at its next sync. The mode trades exactness for Redis work in
// two bounded ways (docs/operations.md, "Local-first mode"):
//   - it may admit less: units one replica holds unused are refused to the
//     others until that replica's next sync, and a replica whose bucket
//     was found full refuses it until Redis said it would have room, or
//     its next sync;
//   - a leaky bucket's leased units start leaking on Redis when granted,
//     not when used, so units held for a while let the bucket take that
//     much more: at most what it drips while units are held, at most
//     maxHold (eight) intervals;
//   - a first sighting admitted on trust may find the bucket full on Redis:
//     one request past the limit per replica, a hundredth of the limit at
//     most, each time a replica finds the bucket anew while it is full.
//
// A request is all or nothing within a replica: the units of the buckets
// it decides here are set aside while Redis decides the others, and
// charged or given back by Redis's answer. Across replicas each bucket is
// all or nothing per lease, not per request.
package localfirst

import (
	"context"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

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
	// ManualSync starts no sync loop: the caller syncs with Sync, at the
	// instants it chooses. Only for tests that need fixed instants (with
	// the Redis store's CallerClock).
	ManualSync bool
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
	// asking tracks the calls out for more units, which Close waits for:
	// a busy bucket's units would not be given back.
	asking sync.WaitGroup

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

type shard struct {
	mu sync.Mutex
	m  map[uint64]*entry // by the key's hash; an entry holds its key
	// seen holds the hashes of the buckets without an entry seen in this
	// interval and the one before: a bucket seen again while its hash is
	// there gets an entry, and a lease at the next sync.
	seen sightings
	// owed is the hits admitted on trust, for the next sync to charge.
	owed []owing
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
		s.shards[i].m = map[uint64]*entry{}
		s.shards[i].seen = newSightings()
	}
	s.nextSync.Store(time.Now().Add(opts.Interval).UnixMicro())
	if opts.ManualSync {
		close(s.done)
	} else {
		go s.loop()
	}
	return s, nil
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
