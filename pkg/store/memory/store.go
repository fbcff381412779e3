// Package memory is the in-process store of buckets of every algorithm:
// the embedded default for a single replica, with no setup. It shares
// nothing between replicas; that is what package redis is for.
//
// Buckets live in a fixed number of shards, each a map behind its own mutex.
// A request locks the shards of all its buckets (in ascending order, so two
// requests never deadlock), decides them with limit.DecideAll and saves them,
// so every request is atomic. Buckets expire once they would have drained,
// and their number is bounded: when a shard is full, the bucket closest to
// draining, of a few sampled, makes room (Redis's volatile-ttl policy).
// So are their bytes: each bucket counts its key's length and a fixed
// overhead, so that long keys cannot grow the store past its memory bound.
// A snapshot file (SnapshotOptions) keeps the buckets across restarts.
package memory

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// Options configure a Store. The zero value is usable.
type Options struct {
	// MaxBuckets bounds the number of buckets kept; 0 means
	// DefaultMaxBuckets, negative is an error.
	MaxBuckets int
	// MaxBytes bounds, in bytes, the memory the buckets take, counted as
	// each key's length plus BucketOverhead; 0 means DefaultMaxBytes,
	// negative is an error. Both bounds hold: whichever is reached first
	// makes room.
	MaxBytes int64
	// Shards is the number of independently locked maps, rounded down to a
	// power of two, to at most MaxBuckets and to at most one per MiB of
	// MaxBytes (so that a shard's share holds any key a request may carry);
	// 0 means 64, negative is an error.
	Shards int
	// SweepInterval is how often expired buckets are removed in the
	// background; 0 means 10s. Negative disables the sweeper; expired
	// buckets then leave only when a full shard needs room or Sweep is
	// called.
	SweepInterval time.Duration
	// Clock gives the sweeper and the snapshots the time; nil means
	// time.Now. Requests bring their own time.
	Clock func() time.Time
	// Snapshot keeps the buckets in a file across restarts; its zero value
	// keeps none.
	Snapshot SnapshotOptions
}

// DefaultMaxBuckets is the number of buckets the memory store keeps at
// most unless Options say otherwise.
const DefaultMaxBuckets = 1_000_000

// DefaultMaxBytes is the number of bytes (keys plus BucketOverhead each)
// the memory store keeps at most unless Options say otherwise: 256 MiB.
const DefaultMaxBytes = 256 << 20

const (
	defaultShards        = 64
	defaultSweepInterval = 10 * time.Second
	evictionSamples      = 8
	// minShardBytes is the least share of MaxBytes a shard gets (unless
	// MaxBytes is smaller): more than the longest key the service's default
	// request caps allow (32 entries of 4 KiB keys and values, about
	// 256 KiB), so that every bucket can be kept.
	minShardBytes = 1 << 20
)

// Store is the in-memory store. It is safe for concurrent use.
type Store struct {
	states        sync.Pool // of *[]limit.State, for large calls
	shards        []shard
	mask          uint64
	perShard      int   // buckets
	perShardBytes int64 // keys and overhead
	seed          maphash.Seed
	evictions     atomic.Uint64

	stop chan struct{}
	done chan struct{}
	once sync.Once

	clock    func() time.Time
	snapshot SnapshotOptions // Path "" when off
	snapDone chan struct{}   // closed when the periodic writer has stopped
	snapMu   sync.Mutex      // one write at a time: they share Path.tmp
	snapOK   atomic.Bool     // the file holds the buckets but for shards marked dirty
	closeErr error           // the final snapshot's
}

type shard struct {
	mu sync.Mutex
	m  map[string]entry
	// counts holds the sliding windows' counts, apart from m so that the
	// other buckets' entries stay small; nil until a window is kept.
	counts map[string][]int64
	bytes  int64 // keys, counts and overhead held
	// limits are the distinct limits of the shard's buckets, which a
	// snapshot saves with them; limitIDs indexes a long list.
	limits   []limit.Limit
	limitIDs map[limit.Limit]uint32
	dirty    bool           // changed since a snapshot last copied it
	_        [128 - 72]byte // with the fields above, two cache lines: no two shards' mutexes share one
}

// entry is a bucket's state but for a sliding window's counts.
type entry struct {
	counter, timestamp int64
	expires            int64  // Unix microseconds
	limit              uint32 // its shard's limits[limit-1]; 0 if not known
}

// New returns an empty store and starts its sweeper. Close stops it.
func New(opts Options) (*Store, error) {
	if opts.MaxBuckets == 0 {
		opts.MaxBuckets = DefaultMaxBuckets
	}
	if opts.MaxBuckets < 1 {
		return nil, fmt.Errorf("memory store: max buckets must be at least 1, got %d", opts.MaxBuckets)
	}
	if opts.MaxBytes == 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxBytes < 1 {
		return nil, fmt.Errorf("memory store: max bytes must be at least 1, got %d", opts.MaxBytes)
	}
	if opts.Shards == 0 {
		opts.Shards = defaultShards
	}
	if opts.Shards < 1 {
		return nil, fmt.Errorf("memory store: shards must be at least 1, got %d", opts.Shards)
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = defaultSweepInterval
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	n := 1
	for n*2 <= opts.Shards && n*2 <= opts.MaxBuckets && int64(n*2)*minShardBytes <= opts.MaxBytes {
		n *= 2
	}
	s := &Store{
		shards:        make([]shard, n),
		mask:          uint64(n - 1),
		perShard:      opts.MaxBuckets / n,
		perShardBytes: opts.MaxBytes / int64(n),
		seed:          maphash.MakeSeed(),
		stop:          make(chan struct{}),
		done:          make(chan struct{}),
	}
	for i := range s.shards {
		s.shards[i].m = make(map[string]entry)
	}
	s.states.New = func() any { return new([]limit.State) }
	s.clock = opts.Clock
	if err := s.openSnapshot(opts.Snapshot); err != nil {
		return nil, err
	}
	if opts.SweepInterval > 0 {
		go s.sweepEvery(opts.SweepInterval, opts.Clock)
	} else {
		close(s.done)
	}
	return s, nil
}

// ErrClosed is returned by Apply after Close.
var ErrClosed = errors.New("memory store is closed")

// Name is the store's name in metrics and traces: "memory".
func (s *Store) Name() string { return "memory" }

// Apply decides the buckets of one request atomically, with the
// all-or-nothing rule of limit.DecideAll, and saves them if the request is
// admitted. results must be as long as buckets. It fails only when ctx is done
// or the store is closed, and then changes nothing.
func (s *Store) Apply(ctx context.Context, now time.Time, buckets []limit.Bucket, results []limit.Result) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-s.stop:
		return ErrClosed
	default:
	}
	if len(results) < len(buckets) {
		return fmt.Errorf("memory store: %d results for %d buckets", len(results), len(buckets))
	}
	var (
		shardBuf [8]uint32
		lockBuf  [8]uint32
		stateBuf [8]limit.State
	)
	ids, locks := s.lock(buckets, shardBuf[:0], lockBuf[:0])
	defer s.unlock(locks)
	if err := ctx.Err(); err != nil {
		return err // the call ended while waiting for the locks
	}
	if s.closed() {
		// Closed while waiting: the final snapshot may have read these
		// shards already, and must hold every charge made.
		return ErrClosed
	}

	us := now.UnixMicro()
	states := stateBuf[:0]
	if len(buckets) > len(stateBuf) {
		// A large call (an RLQS report's charges): its states come from a
		// pool, not a new array each time.
		p := s.states.Get().(*[]limit.State)
		defer s.states.Put(p)
		states = (*p)[:0]
		defer func() { *p = states[:0] }()
	}
	for i, b := range buckets {
		states = append(states, s.shards[ids[i]].state(b, us))
	}
	admitted := limit.DecideAll(states, buckets, now, results[:len(buckets)])
	for i, b := range buckets {
		// A rejected request changes nothing but the buckets that charge always.
		if limit.Saves(b, admitted) {
			s.save(&s.shards[ids[i]], b, results[i], us, buckets)
		}
	}
	return nil
}

// lock locks the shards of the buckets in ascending order, so that two
// requests never deadlock, and returns each bucket's shard (appended to
// ids) and the shards locked (appended to locks), for unlock.
func (s *Store) lock(buckets []limit.Bucket, ids, locks []uint32) ([]uint32, []uint32) {
	for _, b := range buckets {
		id := uint32(maphash.String(s.seed, b.Key) & s.mask)
		ids = append(ids, id)
		locks = insertSorted(locks, id)
	}
	for _, id := range locks {
		s.shards[id].mu.Lock()
	}
	return ids, locks
}

func (s *Store) unlock(locks []uint32) {
	for _, id := range locks {
		s.shards[id].mu.Unlock()
	}
}

// state returns a bucket's state at now (Unix microseconds) in its locked
// shard: empty if not held or expired. A sliding window's counts are the
// shard's own, which a charge changes in place.
func (sh *shard) state(b limit.Bucket, now int64) limit.State {
	e, ok := sh.m[b.Key]
	if !ok || e.expires <= now {
		return limit.State{}
	}
	st := limit.State{Counter: e.counter, Timestamp: e.timestamp}
	if b.Limit.Algorithm == limit.SlidingWindow {
		st.Counts = sh.counts[b.Key]
	}
	return st
}

// insertSorted adds id to the ascending set ids.
func insertSorted(ids []uint32, id uint32) []uint32 {
	i := 0
	for i < len(ids) && ids[i] < id {
		i++
	}
	if i < len(ids) && ids[i] == id {
		return ids
	}
	ids = append(ids, 0)
	copy(ids[i+1:], ids[i:])
	ids[i] = id
	return ids
}

// Check reports whether the store takes requests: nil until Close.
func (s *Store) Check(context.Context) error {
	if s.closed() {
		return ErrClosed
	}
	return nil
}

func (s *Store) closed() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// Close stops the sweeper and, with snapshots, the periodic writer, then
// writes the final snapshot: Apply fails with ErrClosed from the start of
// Close, so the file holds every charge made. It returns the final
// write's error.
func (s *Store) Close() error {
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		if s.snapshot.Path != "" {
			<-s.snapDone
			s.closeErr = s.finalSnapshot()
		}
	})
	return s.closeErr
}
