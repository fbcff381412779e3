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
// Units are leased to buckets seen more than once in an interval or two
// (a bucket seen once costs one Redis update whatever is done, and a lease
// would cost a give-back on top): at syncs, in batched calls, and to a
// bucket seen a third time or short of its lease, in the background, while
// its requests are decided on Redis. A request that gives hits back, or checks
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
		switch full := e.dry && rnow < e.roomAt; {
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

// track returns the entry of bucket b (hash h), made (fresh) if b was seen
// in this interval or the one before, or nil: a bucket seen once is
// decided on Redis and only noted, by its hash, so that a long tail of
// keys each seen now and then costs this replica no more than exact mode:
// no entry, no allocation.
func (s *Store) track(sh *shard, h uint64, b limit.Bucket) (*entry, sighting) {
	if e := sh.m[h]; e != nil {
		if e.key != b.Key {
			return nil, untracked // another key of that hash holds the place
		}
		if e.limit != b.Limit {
			e.reload(b.Limit)
		}
		return e, known
	}
	if !sh.sighted(h) {
		return nil, unseen
	}
	e, err := s.entry(sh, h, b)
	if err != nil {
		return nil, untracked // the table is full: decided on Redis, exactly
	}
	return e, fresh
}

// sighting is what track found of a bucket.
type sighting int

const (
	known     sighting = iota // an entry
	fresh                     // an entry, made now: the bucket's second sighting
	unseen                    // no entry: not seen for two intervals
	untracked                 // no entry: the table is full
)

// trustRatio is how many times a request's hits a limit must allow for
// the request to be admitted on trust, on its bucket's first sighting:
// what that may admit past the limit is then at most a hundredth of it
// per replica, each time the bucket is found anew while full.
const trustRatio = 100

// trusts reports whether bucket b may be admitted on trust on its first
// sighting: not a quota (shadow) bucket, whose figures must be Redis's,
// and a limit of at least trustRatio times its hits.
func trusts(b limit.Bucket) bool {
	size := b.Limit.Size
	return !b.Shadow && b.Hits > 0 && b.Hits <= size/trustRatio
}

// trust admits trusted bucket i of r, as an empty bucket would, and, if
// the request is admitted (or the limit charges always), queues its hits
// for the next sync to charge on Redis, past the limit if need be.
func (s *Store) trust(r *request, i int, rnow int64, charged bool) limit.Result {
	b := r.buckets[i]
	res := limit.Decide(limit.State{}, b.Limit, time.UnixMicro(rnow), b.Hits)
	if charged {
		sh := &s.shards[r.hashes[i]%shards]
		sh.owed = append(sh.owed, owing{key: b.Key, limit: b.Limit, hits: b.Hits, at: rnow})
	} else {
		res = limit.Decide(limit.State{}, b.Limit, time.UnixMicro(rnow), 0)
	}
	return res
}

// sightSlots is how many hashes of buckets seen once a shard keeps per
// interval: 64 shards of 4096, two intervals' worth, are 4 MiB. A hash
// whose place another took is a bucket taken for unseen: it stays cold a
// little longer, which costs what exact mode costs.
const sightSlots = 4096

// sightings are the hashes of the buckets without an entry seen in this
// interval (recent) and the one before (older), each at a place of its
// hash: a lookup is one read, and forgetting an interval one clear.
type sightings struct {
	recent, older *[sightSlots]uint64
}

func newSightings() sightings {
	return sightings{recent: new([sightSlots]uint64), older: new([sightSlots]uint64)}
}

// sighted reports whether the bucket of hash h was seen in this interval
// or the one before, and notes it as seen in this one.
func (sh *shard) sighted(h uint64) bool {
	h |= 1                         // 0 is an empty place
	i := (h / shards) % sightSlots // its shard took h % shards
	if sh.seen.recent[i] == h || sh.seen.older[i] == h {
		return true
	}
	sh.seen.recent[i] = h
	return false
}

// rotate forgets the buckets seen once two intervals ago and not since.
func (sh *shard) rotate() {
	sh.seen.older, sh.seen.recent = sh.seen.recent, sh.seen.older
	clear(sh.seen.recent[:])
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

// keepCharges keeps, as debts, the charges of limits that charge always
// of a request Redis did not decide, whose buckets all went to Redis.
func (s *Store) keepCharges(now time.Time, r *request) {
	s.lock(r.locks)
	defer s.unlock(r.locks)
	rnow := now.UnixMicro() + s.offset.Load()
	for i, b := range r.buckets {
		if b.Always && b.Hits > 0 {
			s.addDebt(r, i, rnow)
		}
	}
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
