// Package localfirst is the local-first mode of the Redis store: each
// replica decides in process, against units of each bucket that Redis
// leased to it, and reconciles with Redis once per interval in batched
// script calls, so that Redis work grows with the buckets in use per
// interval rather than with requests. Redis holds every bucket; a replica
// keeps, per bucket in use, the units it was leased and a model.
//
// The model is the bucket as exact mode would hold it: charged by the
// requests this replica decides, at the instants it decides them, by the
// same pure decisions (package limit). Every answer and figure comes from
// it, so that one replica alone answers exactly as exact mode does:
// admitted or not, remaining, reset and clear. What a replica learns from
// Redis (a lease's answer, a decision, a sync) is what other replicas
// used: the model is raised by it, so that a refusal here means what
// Redis said remains, and a request that does not fit never keeps a
// smaller one out.
//
// A request the model admits is admitted here when the units held cover
// its hits: no Redis call. When they fall short, one Redis call asks for
// what is lacking (and more, for the requests to come), and the request
// is admitted if Redis grants it; a check of a limit that charges always
// asks Redis for its count, as other replicas' charges decide it. A
// bucket not seen lately (keepTime/2 to keepTime, the long tail of a
// per-user limit) gets no entry and is decided on Redis, by the call exact
// mode makes; its second sighting by one lease call of its hits and units
// for the requests to come, whose answer becomes its model (way learning;
// a sliding window's by exact mode's call). A request waits for at most
// one Redis call, and only when exact mode would have waited for one too.
//
// Units are charged on Redis like admitted hits, before the replica
// admits anything with them, so units granted to all replicas together
// never exceed what the limit allows, and a model's admission is bounded
// by them. What a replica holds and does not use is given back at its
// next sync. The mode trades exactness for Redis work only across
// replicas, in bounded ways (docs/operations.md, "Local-first mode"):
//   - several replicas may admit less: units one replica holds unused are
//     refused to the others until that replica's next sync;
//   - or more: a leaky bucket's units leak on Redis from their grant, a
//     sliding window's leave it from the sub-window of their grant, not of
//     their use, so Redis frees their room early: at most what the bucket
//     drips, or the sub-windows pass, while units are held (for a leaky
//     bucket at most maxHold intervals, or a drip if longer; for a
//     sliding window a sub-window or an interval);
//   - and a leaky bucket of drip_size d > 1 may count up to d - 1 past its
//     size on Redis: the model and Redis drip on their own schedules, and
//     one can be a drip behind the other; the units a replica lacks are
//     asked for with that slack, so that one replica never refuses what
//     exact mode admits.
//
// A request is all or nothing within a replica: the units and model
// charges of its buckets are set aside while Redis decides the rest, and
// kept or given back by Redis's answer. Across replicas each bucket is all
// or nothing per lease, not per request.
package localfirst

import (
	"context"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

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
	// keepFor is how many intervals without demand a bucket's entry is
	// kept (keepTime's); sightEvery how many intervals a sighting is
	// remembered for, at least (keepTime's half); sweepEvery how many
	// intervals apart a sync looks at every entry, not only those in use
	// (sweepTime's). rounds counts the syncs.
	keepFor, sightEvery, sweepEvery int
	rounds                          atomic.Uint64
	maxBytes                        int64
	log                             *slog.Logger
	seed                            maphash.Seed
	shards                          [shards]shard
	bytes                           atomic.Int64
	// offset is Redis's clock less the local one, in microseconds, as the
	// last lease call found it: leases are charged on Redis's clock.
	offset   atomic.Int64
	syncs    atomic.Uint64
	failures atomic.Uint64
	lost     atomic.Uint64 // units set aside and not given back
	// owing is set when a debt is recorded, for the next sync to look for
	// debts only then.
	owing atomic.Bool

	// failedSyncs counts the syncs failed in a row, lastSyncWarn when one
	// was last logged (Unix nanoseconds).
	failedSyncs  atomic.Int64
	lastSyncWarn atomic.Int64

	// paying tracks the calls out that send debts, which Close waits for.
	paying sync.WaitGroup
	// asking tracks the calls out for units, which Close waits for: their
	// units would not be given back.
	asking sync.WaitGroup

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

type shard struct {
	shardState
	// Shards sit side by side: padding keeps each lock on cache lines of
	// its own, which requests on other shards do not write.
	_ [(128 - unsafe.Sizeof(shardState{})%128) % 128]byte
}

type shardState struct {
	mu sync.Mutex
	m  map[uint64]*entry // by the key's hash; an entry holds its key
	// seen holds the hashes of the buckets without an entry seen lately:
	// a bucket seen again while its hash is there gets an entry.
	seen sightings
	// round counts the syncs of the shard: its intervals. active holds
	// the entries requests used in this one, each once (entry.listed):
	// what a sync looks at, but for a sweep (Store.sweepEvery).
	round  uint32
	active []*entry
	// exact counts, by a slot of the bucket's hash, the calls exact mode
	// makes out for buckets without a model, and started those ever made:
	// a lease that learns a bucket's model (way learning) is sent only
	// when none is out, and its answer becomes the model only if none was
	// sent meanwhile, as their charges may be on Redis or not when it
	// answers. Hashes sharing a slot only learn later.
	exact   [exactSlots]atomic.Int32
	started [exactSlots]atomic.Uint32
}

// exactSlots is how many slots of a shard count the calls exact mode makes
// for buckets without a model.
const exactSlots = 64

// exactSlot is the slot of hash h in its shard's exact and started.
func exactSlot(h uint64) uint64 { return (h / shards) % exactSlots }

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
	s.keepFor = max(idleHold, intervals(keepTime, opts.Interval))
	s.sightEvery = max(1, intervals(keepTime/2, opts.Interval))
	s.sweepEvery = max(1, intervals(sweepTime, opts.Interval))
	for i := range s.shards {
		s.shards[i].m = map[uint64]*entry{}
		s.shards[i].seen = newSightings()
		s.shards[i].round = 1 // 0 is no entry's
	}
	if opts.ManualSync {
		close(s.done)
	} else {
		go s.loop()
	}
	return s, nil
}

// noteClock keeps Redis's clock less the local one, from a lease call
// made at start for now that Redis answered at rnow: Redis decided
// somewhere between the call and its answer, half way as far as can be
// told. A Redis deciding at the caller's time (rnow is now exactly) has no
// offset.
func (s *Store) noteClock(rnow int64, now, start time.Time) {
	switch {
	case rnow <= 0:
	case rnow == now.UnixMicro():
		s.offset.Store(0)
	default:
		s.offset.Store(rnow - now.UnixMicro() - time.Since(start).Microseconds()/2)
	}
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

// list puts e on the shard's list of entries in use, once an interval.
func (sh *shard) list(e *entry) {
	if e.listed != sh.round {
		e.listed = sh.round
		sh.active = append(sh.active, e)
	}
}

// intervals is how many intervals of length iv make d, rounded up.
func intervals(d, iv time.Duration) int {
	return int(min((d+iv-1)/iv, 1<<30))
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
