// Package memory is the in-process leaky-bucket store: the embedded default
// for a single replica, with no setup.
//
// Buckets live in a fixed number of shards, each a map behind its own mutex.
// A request locks the shards of all its buckets (in ascending order, so two
// requests never deadlock), decides them with limit.DecideAll and saves them,
// so every request is atomic. Buckets expire once they would have drained,
// and their number is bounded: when a shard is full, the bucket closest to
// draining, of a few sampled, makes room (Redis's volatile-ttl policy).
// So are their bytes: each bucket counts its key's length and a fixed
// overhead, so that long keys cannot grow the store past its memory bound.
package memory

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
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
	// Clock gives the sweeper the time; nil means time.Now. Requests bring
	// their own time.
	Clock func() time.Time
}

// DefaultMaxBuckets is the number of buckets the memory store keeps at
// most unless Options say otherwise.
const DefaultMaxBuckets = 1_000_000

// DefaultMaxBytes is the number of bytes (keys plus BucketOverhead each)
// the memory store keeps at most unless Options say otherwise: 256 MiB.
const DefaultMaxBytes = 256 << 20

// BucketOverhead is what a bucket counts, in bytes, beside its key's
// length: its map slot and the slots left free around it. A slot is the
// key's string header (16), the entry (24) and a control byte: 41 bytes,
// 48 once a 1024-slot table's 41 KB of groups are rounded up to whole
// pages. Go's swiss tables are 7/16 to 7/8 full while they fill (55 to
// 110 bytes a bucket), and less once evictions have left tombstones that
// split them (about 130). TestBucketOverhead holds the figure within 35%
// of the heap measured both ways.
const BucketOverhead = 88

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
	shards        []shard
	mask          uint64
	perShard      int   // buckets
	perShardBytes int64 // keys and overhead
	seed          maphash.Seed
	evictions     atomic.Uint64

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

type shard struct {
	mu sync.Mutex
	m  map[string]entry
	// counts holds the sliding windows' counts, apart from m so that the
	// other buckets' entries stay small; nil until a window is kept.
	counts map[string][]int64
	bytes  int64         // keys, counts and overhead held
	_      [64 - 32]byte // with the fields above, a 64-byte cache line: no two shards' mutexes share one
}

// cost is what a bucket with key counts against MaxBytes.
func cost(key string) int64 { return int64(len(key)) + BucketOverhead }

// WindowOverhead is what a sliding window counts, in bytes, beside its
// key, BucketOverhead and 8 bytes per sub-window: its slot in a shard's
// map of counts and the counts' slice header and allocation rounding.
// TestWindowBytes holds it against the measured heap.
const WindowOverhead = 96

// countsCost is what a sliding window's counts count against MaxBytes.
func countsCost(counts []int64) int64 {
	if counts == nil {
		return 0
	}
	return WindowOverhead + 8*int64(cap(counts))
}

// delete removes a bucket, if there, and its bytes.
func (sh *shard) delete(key string) {
	if _, ok := sh.m[key]; ok {
		sh.remove(key)
	}
}

// remove removes a bucket known to be there, and its bytes.
func (sh *shard) remove(key string) {
	delete(sh.m, key)
	sh.bytes -= cost(key)
	if c, ok := sh.counts[key]; ok {
		delete(sh.counts, key)
		sh.bytes -= countsCost(c)
	}
}

// entry is a bucket's state but for a sliding window's counts.
type entry struct {
	counter, timestamp int64
	expires            int64 // Unix microseconds
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

	us := now.UnixMicro()
	states := stateBuf[:0]
	for i, b := range buckets {
		states = append(states, s.shards[ids[i]].state(b, us))
	}
	if !limit.DecideAll(states, buckets, now, results[:len(buckets)]) {
		return nil // a rejected request changes nothing
	}
	for i, b := range buckets {
		s.save(&s.shards[ids[i]], b.Key, results[i], us, buckets)
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

// saveCounts keeps a kept sliding window's counts (nil for other buckets),
// and their bytes.
func (sh *shard) saveCounts(key string, counts []int64) {
	old, had := sh.counts[key]
	switch {
	case counts == nil && !had:
		return
	case counts == nil:
		delete(sh.counts, key)
	default:
		if sh.counts == nil {
			sh.counts = make(map[string][]int64)
		}
		sh.counts[key] = counts
	}
	sh.bytes += countsCost(counts) - countsCost(old)
}

// save stores one decided bucket in its locked shard. request names the
// buckets of the request being saved, which eviction must not pick.
func (s *Store) save(sh *shard, key string, r limit.Result, now int64, request []limit.Bucket) {
	if r.TTL <= 0 {
		sh.delete(key) // empty: nothing to remember
		return
	}
	e := entry{counter: r.State.Counter, timestamp: r.State.Timestamp, expires: now + r.TTL.Microseconds()}
	if _, ok := sh.m[key]; ok {
		sh.m[key] = e
		sh.saveCounts(key, r.State.Counts)
		return
	}
	c := cost(key) + countsCost(r.State.Counts)
	if c > s.perShardBytes {
		// Larger than the shard's whole share of MaxBytes: the request was
		// decided, but the bucket is not kept, as if evicted at once, rather
		// than grow the store past its bound. minShardBytes makes this rare.
		s.evictions.Add(1)
		return
	}
	for len(sh.m) >= s.perShard || sh.bytes+c > s.perShardBytes {
		if !s.evict(sh, now, request) {
			// Only buckets of this request are held, and they stay: this
			// one is not kept, as if evicted at once.
			s.evictions.Add(1)
			return
		}
	}
	// The key may share memory with a longer one; keep only its own bytes.
	key = strings.Clone(key)
	sh.m[key] = e
	sh.bytes += cost(key)
	sh.saveCounts(key, r.State.Counts)
}

// evict removes, of a few sampled buckets not in the current request, the
// one that expires first: expired buckets go before live ones, and among live
// ones the nearest to empty loses the least. It reports whether it removed
// one.
func (s *Store) evict(sh *shard, now int64, request []limit.Bucket) bool {
	var (
		victim  string
		expires int64
		found   bool
		sampled int
	)
	for k, e := range sh.m {
		if inRequest(k, request) {
			continue
		}
		if !found || e.expires < expires {
			victim, expires, found = k, e.expires, true
		}
		if sampled++; sampled == evictionSamples || e.expires <= now {
			break
		}
	}
	if found {
		sh.remove(victim)
		if expires > now {
			s.evictions.Add(1)
		}
	}
	return found
}

func inRequest(key string, request []limit.Bucket) bool {
	for _, b := range request {
		if b.Key == key {
			return true
		}
	}
	return false
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
	select {
	case <-s.stop:
		return ErrClosed
	default:
		return nil
	}
}

// Len returns the number of buckets held, expired ones not yet swept
// included.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Bytes returns the bytes the buckets held count against MaxBytes (each
// key's length plus BucketOverhead), expired ones not yet swept included;
// 0 for an empty store.
func (s *Store) Bytes() int64 {
	var n int64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.bytes
		sh.mu.Unlock()
	}
	return n
}

// Evictions returns how many live buckets were dropped to make room since
// the store was created, counting those not kept at all: a key larger than
// a shard's share of MaxBytes, or a shard held entirely by the request's
// own buckets.
func (s *Store) Evictions() uint64 { return s.evictions.Load() }

// Sweep removes the buckets that have expired at now, one shard at a time,
// and returns how many it removed.
func (s *Store) Sweep(now time.Time) int {
	us := now.UnixMicro()
	removed := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.expires <= us {
				sh.remove(k)
				removed++
			}
		}
		sh.mu.Unlock()
	}
	return removed
}

func (s *Store) sweepEvery(interval time.Duration, clock func() time.Time) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep(clock())
		}
	}
}

// Close stops the sweeper. Apply fails with ErrClosed afterwards.
func (s *Store) Close() error {
	s.once.Do(func() { close(s.stop) })
	<-s.done
	return nil
}
