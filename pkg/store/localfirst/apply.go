package localfirst

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// ErrClosed is returned by Apply after Close.
var ErrClosed = errors.New("local-first store: closed")

// way is how one bucket of a request is decided.
type way uint8

const (
	// onModel: on the bucket's model, with units this replica holds (or
	// none needed: a check, a refusal).
	onModel way = iota
	// needsRedis: on the model, which admits it, but Redis must say yes
	// too: the units held fall short of the hits, or it is a check of a
	// limit that charges always, which other replicas may have pushed
	// past it.
	needsRedis
	// onRedis: on Redis alone, as exact mode decides it: a bucket without
	// a model (seen once, not learnt yet, or the table is full).
	onRedis
	// refund: hits given back, on Redis and on the model alike.
	refund
	// learning: a bucket seen again without a model yet, whose model a
	// lease's answer tells (a leaky bucket, a fixed window): decided by a
	// lease of its hits and units for the requests to come, whose answer
	// becomes its model. One Redis call, where the call exact mode makes
	// and then a lease for units would be two. Only within a request that
	// needs no call of exact mode's; else onRedis.
	learning
)

// request is what Apply knows of one request while it decides it. They
// are kept in a pool, so that a request allocates nothing for it.
type request struct {
	buckets []limit.Bucket
	hashes  []uint64
	locks   []uint32 // the shards of its buckets, sorted, each once
	entries []*entry // nil: a bucket this replica does not track
	ways    []way
	gens    []uint32 // each entry's lease generation when the request took units
	// states are the models the request was decided on (their Counts
	// copied); taken is the units taken from each lease for the hits, and
	// short what they lacked; charged marks a model the request charged
	// before Redis answered, which a refusal takes back.
	states  []limit.State
	taken   []int64
	short   []int64
	charged []bool
	// counted marks the buckets counted in their shard's exact slots (the
	// call exact mode makes, out); started is, for a learning bucket, its
	// slot's started when the request was classified.
	counted []bool
	started []uint32
	// onModel is whether every bucket decided on its model admits (the
	// request's answer if no bucket needs Redis).
	onModel bool
	rnow    int64 // Redis's clock, as far as this replica can tell
}

var requests = sync.Pool{New: func() any { return new(request) }}

// reset makes r a request of buckets, every slice of their length.
func (r *request) reset(buckets []limit.Bucket) {
	n := len(buckets)
	*r = request{buckets: buckets, hashes: r.hashes[:0], locks: r.locks[:0], entries: grow(r.entries, n), ways: grow(r.ways, n),
		gens: grow(r.gens, n), states: grow(r.states, n), taken: grow(r.taken, n), short: grow(r.short, n), charged: grow(r.charged, n), counted: grow(r.counted, n), started: grow(r.started, n)}
}

// grow returns s of length n, its elements zero.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

func (r *request) at() time.Time { return time.UnixMicro(r.rnow) }

// Apply decides the buckets of one request with the all-or-nothing rule,
// answering as exact mode would for this replica alone (the package doc
// says how several replicas differ). A bucket with a model is decided on
// it; the request is admitted here when every such bucket admits and the
// units held cover its hits. When they fall short, or a bucket has no
// model, or a limit that charges always is checked, one Redis call
// settles it: a lease call for the units lacking when every bucket has a
// model, else the call exact mode makes, with the lacking units of the
// modelled buckets asked of Redis in it. A request waits for at most that
// one call, and only when exact mode would have waited for one too. An
// error means Redis was needed and did not answer; nothing is charged then
// but usage of limits that charge always, which is kept for the next sync.
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
	r := requests.Get().(*request)
	defer requests.Put(r)
	r.reset(buckets)
	for _, b := range buckets {
		h := maphash.String(s.seed, b.Key)
		r.hashes = append(r.hashes, h)
		r.locks = insertSorted(r.locks, uint32(h%shards))
	}

	s.lock(r.locks)
	for {
		learner := s.find(r)
		if learner == nil {
			break
		}
		// A bucket of it is being learnt: decided on its model once that
		// comes, not beside the lease that brings it.
		s.unlock(r.locks)
		select {
		case <-learner:
		case <-ctx.Done():
			return ctx.Err()
		}
		s.lock(r.locks)
	}
	r.rnow = now.UnixMicro() + s.offset.Load()
	s.classify(r)
	if r.untracked() {
		// No bucket of it is tracked here: exact mode's call, as it is,
		// with nothing to note of its answer.
		s.unlock(r.locks)
		err := s.remote.Apply(ctx, now, buckets, results)
		s.uncount(r)
		if err != nil {
			s.keepCharges(r)
		}
		return err
	}
	s.decideOnModels(r, results)
	redisNeeded, leaseOnly := false, true
	for _, w := range r.ways {
		switch w {
		case needsRedis:
			redisNeeded = redisNeeded || r.onModel
		case learning:
			redisNeeded = true
		case onRedis, refund:
			redisNeeded, leaseOnly = true, false
		}
	}
	if !leaseOnly {
		for i, w := range r.ways {
			if w == learning {
				// In exact mode's call, which is made anyway.
				r.ways[i] = onRedis
				r.entries[i].calls--
				r.entries[i].learnt()
				s.count(r, i)
			}
		}
	}
	if !redisNeeded {
		// Decided here: the models' answer, charged (or not) as it says.
		debts := s.settleHere(r, r.onModel, results)
		s.unlock(r.locks)
		awaitPaid(ctx, s.pay(ctx, now, debts))
		return nil
	}
	debts := s.reserve(r)
	s.unlock(r.locks)
	paid := s.pay(ctx, now, debts)
	var err error
	if leaseOnly {
		err = s.askUnits(ctx, now, r, results)
	} else {
		err = s.decideWithRedis(ctx, now, r, results)
	}
	awaitPaid(ctx, paid)
	return err
}

// untracked reports whether no bucket of r has an entry.
func (r *request) untracked() bool {
	for _, e := range r.entries {
		if e != nil {
			return false
		}
	}
	return true
}

// keepCharges keeps, as debts for the next sync, the charges of limits
// that charge always in r, whose call to Redis failed: the usage is spent.
func (s *Store) keepCharges(r *request) {
	s.lock(r.locks)
	defer s.unlock(r.locks)
	for i, b := range r.buckets {
		if b.Always && b.Hits > 0 {
			s.addDebt(r, i)
		}
	}
}

// learnable reports whether bucket b (hash h), whose entry e has no model
// yet, may be decided by a lease that learns its model (way learning):
// hits to charge, none held nor any call out for it (a lease, or exact
// mode's call: its slot counts none), and an algorithm whose whole state a
// lease's answer holds (not a sliding window's counts). A limit that
// charges always or a shadow bucket takes exact mode's call. Called with
// the shard locked.
func learnable(sh *shard, h uint64, e *entry, b limit.Bucket) bool {
	return b.Hits > 0 && !b.Always && !b.Shadow && e.calls == 0 && e.held() == 0 &&
		b.Limit.Algorithm != limit.SlidingWindow && sh.exact[exactSlot(h)].Load() == 0
}

// count counts bucket i of r, decided by exact mode's call, in its
// shard's exact slot until the call is back (uncount). Called with the
// bucket's shard locked.
func (s *Store) count(r *request, i int) {
	sh, slot := &s.shards[r.hashes[i]%shards], exactSlot(r.hashes[i])
	sh.exact[slot].Add(1)
	sh.started[slot].Add(1)
	r.counted[i] = true
}

// uncount ends what count counted of r: its call to Redis is back.
func (s *Store) uncount(r *request) {
	for i, c := range r.counted {
		if c {
			s.shards[r.hashes[i]%shards].exact[exactSlot(r.hashes[i])].Add(-1)
			r.counted[i] = false
		}
	}
}

// find finds the entry of each bucket of r (made if it is seen again),
// and returns the channel of a learner out for one of them, if any: the
// request then waits for its answer. Called with the request's shards
// locked.
func (s *Store) find(r *request) chan struct{} {
	for i, b := range r.buckets {
		e := s.track(&s.shards[r.hashes[i]%shards], r.hashes[i], b)
		r.entries[i] = e
		if e != nil && e.learner != nil {
			return e.learner
		}
	}
	return nil
}

// classify decides how each bucket of r is decided (its entry found by
// find), counting its demand. Called with the request's shards locked.
func (s *Store) classify(r *request) {
	for i, b := range r.buckets {
		sh := &s.shards[r.hashes[i]%shards]
		e := r.entries[i] // found by find
		switch {
		case e != nil && !e.known && learnable(sh, r.hashes[i], e, b):
			r.ways[i] = learning
			r.started[i] = sh.started[exactSlot(r.hashes[i])].Load()
			e.calls++ // its lease, which no other request's may join
			e.learner = make(chan struct{})
		case e == nil || !e.known:
			r.ways[i] = onRedis
			s.count(r, i)
		case b.Hits < 0:
			r.ways[i] = refund
		}
		if e == nil {
			continue
		}
		if e.calls == 0 || e.limit.Algorithm == limit.FixedWindow {
			// A fixed window's units end with it even while a call is
			// out: its answer leaves an ended lease alone.
			s.expire(e, r.rnow)
		}
		sh.list(e)
		if b.Hits > 0 {
			e.roll(sh.round)
			e.demand = min(e.demand, leaky.MaxSize) + min(b.Hits, leaky.MaxSize) // no wrap, however large
			e.used = sh.round
		}
		r.gens[i] = e.gen
	}
}

// decideOnModels decides the buckets that have a model on it, each on its
// own (limit.DecideEach), into results, and marks those that need Redis's
// word too. Called with the request's shards locked.
func (s *Store) decideOnModels(r *request, results []limit.Result) {
	r.onModel = true
	at := r.at()
	for i, b := range r.buckets {
		if r.ways[i] == refund {
			r.states[i] = r.entries[i].model
			r.states[i].Counts = slices.Clone(r.states[i].Counts)
		}
		if r.ways[i] != onModel {
			continue
		}
		e := r.entries[i]
		r.states[i] = e.model
		r.states[i].Counts = slices.Clone(e.model.Counts)
		st := r.states[i]
		st.Counts = slices.Clone(st.Counts) // Decide charges a sliding window in place
		results[i] = limit.Decide(st, b.Limit, at, b.Hits)
		if !results[i].Admitted && !b.Shadow {
			r.onModel = false
		}
	}
	for i, b := range r.buckets {
		if r.ways[i] != onModel || !results[i].Admitted {
			continue
		}
		e := r.entries[i]
		switch {
		case b.Always && b.Hits == 0:
			// Every replica's charges together decide a check.
			r.ways[i] = needsRedis
		case b.Always:
			// Charged whatever the answer: what the lease lacks is a debt.
		case b.Hits > e.lease:
			r.ways[i] = needsRedis
		}
	}
}

// settleHere settles a request decided on its models alone: each bucket
// charged as DecideAll charges it, from its lease; it returns the charges
// of limits that charge always past their lease, for Redis. Called with
// the request's shards locked.
func (s *Store) settleHere(r *request, admitted bool, results []limit.Result) []debt {
	figures(r, admitted, results)
	var debts []debt
	for i, b := range r.buckets {
		if r.ways[i] != onModel && r.ways[i] != needsRedis {
			continue
		}
		if b.Hits <= 0 || !limit.Saves(b, admitted) || (!results[i].Admitted && !b.Always) {
			continue // not charged
		}
		e := r.entries[i]
		e.model = results[i].State
		debts = s.take(e, b, debts)
	}
	return debts
}

// take takes b's hits from e's lease; what a limit that charges always
// lacks is added to debts, for Redis.
func (s *Store) take(e *entry, b limit.Bucket, debts []debt) []debt {
	if b.Always && b.Hits > e.lease {
		debts = append(debts, debt{entry: e, key: b.Key, limit: b.Limit, second: b.SecondUnit, hits: owed(b.Hits, e.lease)})
		e.lease = 0
		e.paying++
		return debts
	}
	e.lease -= min(b.Hits, max(e.lease, 0))
	return debts
}

// reserve charges the models of the buckets decided on them, as if the
// request were admitted, and takes their hits from their leases, before
// Redis is asked: the replica's other requests see them taken meanwhile.
// A refusal gives them back (unreserve). A limit that charges always is
// charged for good, whatever the answer; it returns what such limits
// lack of their leases, for Redis. Called with the request's shards
// locked.
func (s *Store) reserve(r *request) []debt {
	var debts []debt
	at := r.at()
	for i, b := range r.buckets {
		e := r.entries[i]
		if e == nil || b.Hits <= 0 || (r.ways[i] != onModel && r.ways[i] != needsRedis) {
			continue
		}
		if b.Always {
			e.model = forced(e.model, b.Limit, at, b.Hits)
			debts = s.take(e, b, debts)
			continue
		}
		if !r.onModel {
			continue // refused whatever Redis says
		}
		st := r.states[i]
		st.Counts = slices.Clone(st.Counts)
		if res := limit.Decide(st, b.Limit, at, b.Hits); !res.Admitted {
			continue // a shadow bucket without room: not charged
		}
		e.model = forced(e.model, b.Limit, at, b.Hits)
		r.charged[i] = true
		r.taken[i] = min(b.Hits, max(e.lease, 0))
		r.short[i] = b.Hits - r.taken[i]
		e.lease -= r.taken[i]
	}
	return debts
}

// unreserve gives back what reserve took of bucket i: its charge on the
// model and the units of its lease, unless the lease was ended meanwhile
// (a reset, a reload, an ended window), which they belonged to. Called
// with the bucket's shard locked.
func (s *Store) unreserve(r *request, i int) {
	e := r.entries[i]
	if !r.charged[i] || e == nil || e.gen != r.gens[i] {
		return
	}
	e.model = uncharged(e.model, r.buckets[i].Limit, r.at(), r.buckets[i].Hits)
	e.lease += r.taken[i]
	r.charged[i] = false
}

// figures fills the results of the buckets decided on their models for
// the request's answer: DecideAll's figures on the models as the request
// found them.
func figures(r *request, admitted bool, results []limit.Result) {
	at := r.at()
	for i, b := range r.buckets {
		if r.ways[i] == onRedis || r.ways[i] == refund {
			continue
		}
		st := []limit.State{r.states[i]}
		st[0].Counts = slices.Clone(st[0].Counts) // charged in place
		bs := []limit.Bucket{b}
		limit.DecideEach(st, bs, at, results[i:i+1])
		limit.Settle(st, bs, at, admitted, results[i:i+1])
	}
}
