package localfirst

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// inflated is l admitting by more: what this replica holds unused (its
// units count on Redis already) and the drip's slack.
func inflated(l limit.Limit, by int64) limit.Limit {
	if by > 0 {
		l.Size = min(l.Size+by, leaky.MaxSize)
	}
	return l
}

// redisCount is what a bucket Redis answered with counts at rnow. A
// lease's answer holds a sliding window's count, not its counts.
func redisCount(st limit.State, l limit.Limit, rnow int64, fromLease bool) int64 {
	if fromLease && l.Algorithm == limit.SlidingWindow {
		return st.Counter
	}
	return limit.Count(st, l, time.UnixMicro(rnow))
}

// pending is a request out to Redis: what finishing it needs, on the heap
// (the request's own slices live in Apply's frame).
type pending struct {
	r request
	// results are the caller's, nil once it stopped waiting; finished is
	// set once the answer is applied, and err is the call's error.
	results  []limit.Result
	finished bool
	err      error
	// viaLease says the buckets lacking units were asked for them by a
	// lease call (the units come to the lease), not in the call exact mode
	// makes (they are charged there).
	viaLease bool
	// index maps each call's bucket (or lease) to the request's bucket,
	// and roles says what each lease is for.
	index []int
	roles []role
	// ok marks the buckets that needed Redis and got its yes; wait is,
	// for one that did not, how long until Redis has room.
	ok   []bool
	wait []time.Duration
}

// newPending copies the request, for a call that may outlive it: the
// buckets too, which are the caller's, reused once it stops waiting.
func newPending(r *request, results []limit.Result) *pending {
	p := &pending{results: results, ok: make([]bool, len(r.buckets)), wait: make([]time.Duration, len(r.buckets))}
	p.r = request{buckets: slices.Clone(r.buckets), hashes: slices.Clone(r.hashes), locks: slices.Clone(r.locks),
		entries: slices.Clone(r.entries), ways: slices.Clone(r.ways), gens: slices.Clone(r.gens),
		states: slices.Clone(r.states), taken: slices.Clone(r.taken), short: slices.Clone(r.short),
		charged: slices.Clone(r.charged), counted: slices.Clone(r.counted), started: slices.Clone(r.started), onModel: r.onModel, rnow: r.rnow}
	return p
}

// role is what one lease of a request's lease call is for.
type role uint8

const (
	giveBack role = iota // a sliding window's units set aside
	count                // the count of a limit that charges always, checked
	lacking              // the units the request lacks
	forLater             // more, for the requests to come
	learn                // a bucket's hits and more, its answer the model
)

// askUnits has Redis lease the units a request's modelled buckets lack
// (with some more, for the requests to come), or tell their count (a
// check of a limit that charges always), in one lease call, and answers
// the request by it. The call runs to its end if the request stops
// waiting: Redis charges a grant whether or not its answer is read, and
// the units then go to the lease, the request refused.
func (s *Store) askUnits(ctx context.Context, now time.Time, r *request, results []limit.Result) error {
	p := newPending(r, results)
	p.viaLease = true
	var leases []redis.Lease
	s.lock(p.r.locks)
	for i, b := range p.r.buckets {
		if p.r.ways[i] == learning {
			e := p.r.entries[i] // its calls counts the lease already (classify)
			leases = append(leases, redis.Lease{Key: b.Key, Limit: b.Limit, SecondUnit: b.SecondUnit, Ask: s.want(e, b)})
			p.index, p.roles = append(p.index, i), append(p.roles, learn)
			continue
		}
		if p.r.ways[i] != needsRedis {
			continue
		}
		e := p.r.entries[i]
		alone := e.calls == 0
		e.calls++
		if e.stale > 0 {
			// A sliding window's units set aside, which Redis still counts:
			// given back first, to make the room they hold.
			leases = append(leases, redis.Lease{Key: b.Key, Limit: b.Limit, SecondUnit: b.SecondUnit, Return: e.stale, At: e.staleAt})
			p.index, p.roles = append(p.index, i), append(p.roles, giveBack)
			e.stale = 0
		}
		if b.Always && b.Hits == 0 {
			leases = append(leases, redis.Lease{Key: b.Key, Limit: b.Limit, SecondUnit: b.SecondUnit})
			p.index, p.roles = append(p.index, i), append(p.roles, count)
			continue
		}
		// The units lacking, on the slack a drip's edge may need; then
		// enough for the requests to come.
		leases = append(leases, redis.Lease{Key: b.Key, Limit: inflated(b.Limit, slack(b.Limit)), SecondUnit: b.SecondUnit, Ask: p.r.short[i]})
		p.index, p.roles = append(p.index, i), append(p.roles, lacking)
		if more := s.want(e, b) - b.Hits; more > 0 && alone {
			// (With a call out already, its units are on their way.)
			leases = append(leases, redis.Lease{Key: b.Key, Limit: b.Limit, SecondUnit: b.SecondUnit, Ask: more})
			p.index, p.roles = append(p.index, i), append(p.roles, forLater)
		}
	}
	s.unlock(p.r.locks)

	var mu sync.Mutex
	done := make(chan struct{})
	s.asking.Add(1)
	go func() {
		defer s.asking.Done()
		err := s.leaseFor(now, leases)
		if err != nil {
			s.failures.Add(1)
		}
		mu.Lock()
		s.finishAsk(p, leases, err)
		p.finished = true
		mu.Unlock()
		close(done)
	}()
	select {
	case <-done:
		return p.err
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		if p.finished {
			return p.err
		}
		p.results = nil // refused, and undone, when the answer comes
		return ctx.Err()
	}
}

// want is how many units bucket b's lease should hold for the requests to
// come: at least twice its demand so far, and for a leaky bucket a
// sixteenth of its room, so that a bucket in demand needs few calls.
func (s *Store) want(e *entry, b limit.Bucket) int64 {
	w := max(b.Hits, 2*max(e.demand, e.prev))
	if b.Limit.Algorithm == limit.LeakyBucket {
		w = max(w, (b.Limit.Size-e.model.Counter)/headroom)
	}
	return min(w, leaky.MaxSize)
}

// finishAsk applies a lease call's answer to its request: each grant to
// its bucket's lease, what Redis says other replicas used to the models,
// and the answer: admitted if every bucket that needed Redis got its yes.
// Called with p's lock held.
func (s *Store) finishAsk(p *pending, leases []redis.Lease, err error) {
	r := &p.r
	s.lock(r.locks)
	defer s.unlock(r.locks)
	for j := range leases {
		i, l := p.index[j], &leases[j]
		e := r.entries[i]
		last := j+1 == len(leases) || p.index[j+1] != i
		if last {
			e.calls--
		}
		if p.roles[j] == learn {
			e.learnt()
		}
		if l.Err != nil {
			continue
		}
		if e.gen != r.gens[i] || e.limit != r.buckets[i].Limit {
			s.orphan(e, l, r.gens[i])
			continue
		}
		s.grant(e, l.Granted, l.Now)
		e.answered(l.State)
		b := r.buckets[i]
		if p.roles[j] == learn {
			s.learnt(p, i, l)
			continue
		}
		rcount := redisCount(l.State, b.Limit, l.Now, true)
		switch p.roles[j] {
		case count:
			p.ok[i] = rcount-e.held() <= b.Limit.Size+slack(b.Limit)
		case lacking:
			// Granted now, or by a concurrent request's call meanwhile.
			p.ok[i] = e.lease >= r.short[i]
		}
		if !p.ok[i] && (p.roles[j] == count || p.roles[j] == lacking) {
			p.wait[i] = l.Wait
		}
		if last && e.calls == 0 {
			e.learn(rcount, l.Now)
		}
	}
	p.err = err
	admitted := r.onModel && err == nil && p.results != nil
	for i, w := range r.ways {
		if (w == needsRedis || w == learning) && !p.ok[i] && !r.buckets[i].Shadow {
			admitted = false
		}
	}
	s.conclude(p, admitted)
}

// learnt takes a learning bucket's lease answer l (its units already in
// the lease): the bucket as Redis held it before the grant is what the
// request is decided on, and becomes the model, unless a call of exact
// mode's for it was sent since the request was classified (its charge may
// be on Redis or not); the request's hits fit if that state admits them
// and the lease holds them. Called with the bucket's shard locked.
func (s *Store) learnt(p *pending, i int, l *redis.Lease) {
	r, b, e := &p.r, p.r.buckets[i], p.r.entries[i]
	at := time.UnixMicro(l.Now)
	before := uncharged(l.State, b.Limit, at, l.Granted)
	r.states[i] = before
	if !e.known && s.shards[r.hashes[i]%shards].started[exactSlot(r.hashes[i])].Load() == r.started[i] {
		e.model, e.known = before, true
	}
	st := before
	st.Counts = slices.Clone(st.Counts)
	d := limit.Decide(st, b.Limit, r.at(), b.Hits)
	p.ok[i] = d.Admitted && e.lease >= b.Hits
	if !p.ok[i] {
		p.wait[i] = max(l.Wait, d.Reset)
	}
}

// conclude settles a request whose Redis part has answered: what a bucket
// reserved is given back if the request is refused, and by a shadow
// bucket Redis had no room for; units a lease call granted for what a
// bucket lacked are used if it is admitted. The figures of the buckets on
// their models follow, each bucket Redis said no to shown without room.
// Called with the request's shards locked.
func (s *Store) conclude(p *pending, admitted bool) {
	r := &p.r
	for i, w := range r.ways {
		if w == learning && admitted && p.ok[i] {
			// Charged now: the model, if learnt, and the lease.
			e := r.entries[i]
			if e.gen == r.gens[i] {
				if e.known {
					e.model = forced(e.model, r.buckets[i].Limit, r.at(), r.buckets[i].Hits)
				}
				e.lease -= r.buckets[i].Hits
			}
			continue
		}
		if !r.charged[i] {
			continue
		}
		e := r.entries[i]
		switch {
		case !admitted || (w == needsRedis && !p.ok[i]):
			s.unreserve(r, i)
		case w == needsRedis && p.viaLease && e.gen == r.gens[i]:
			e.lease -= r.short[i]
		}
	}
	if p.results == nil {
		return
	}
	figures(r, admitted, p.results)
	for i, w := range r.ways {
		if (w == needsRedis || w == learning) && !p.ok[i] {
			res := &p.results[i]
			res.Admitted, res.Remaining = false, 0
			res.Reset = max(res.Reset, p.wait[i], time.Microsecond)
		}
	}
}

// decideWithRedis has Redis decide, in the call exact mode makes (all or
// nothing among its buckets), the buckets of a request that have no model
// and its refunds, together with the units its modelled buckets lack
// (charged there if the request is admitted) and the counts of the limits
// that charge always it checks; then answers the request by it.
func (s *Store) decideWithRedis(ctx context.Context, now time.Time, r *request, results []limit.Result) error {
	// Answered before Apply returns, while r is still this request's: the
	// pending shares r's slices (askUnits's call may outlive the request,
	// so it copies them).
	p := &pending{results: results, r: *r, ok: make([]bool, len(r.buckets)), wait: make([]time.Duration, len(r.buckets))}
	var rb []limit.Bucket
	s.lock(p.r.locks)
	for i, b := range p.r.buckets {
		switch p.r.ways[i] {
		case onRedis, refund:
			if e := p.r.entries[i]; e != nil && e.held() > 0 && !e.known {
				// Units of a lease whose answer was not taken as the model:
				// Redis counts them, the request does not.
				b.Limit = inflated(b.Limit, e.held())
			}
			if !p.r.onModel && !b.Always {
				b.Hits = 0 // refused whatever Redis says: it only tells the figures
			}
		case needsRedis:
			if !p.r.onModel {
				continue
			}
			e := p.r.entries[i]
			if b.Always && b.Hits == 0 {
				// A check: within the limit, with what this replica holds
				// unused (which Redis counts) and the drip's slack.
				b.Limit = inflated(b.Limit, e.held()+slack(b.Limit))
			} else {
				// The units lacking, besides units set aside (which Redis
				// counts) and the drip's slack.
				b.Limit, b.Hits = inflated(b.Limit, e.stale+slack(b.Limit)), p.r.short[i]
			}
		default:
			continue
		}
		rb = append(rb, b)
		p.index = append(p.index, i)
	}
	s.unlock(p.r.locks)
	rr := make([]limit.Result, len(rb))
	err := s.remote.Apply(ctx, now, rb, rr)
	s.lock(p.r.locks)
	defer s.unlock(p.r.locks)
	s.uncount(&p.r)
	if err != nil {
		s.failed(p, rb)
		return err
	}
	redisOK := true
	for j := range rb {
		if !rr[j].Admitted && !rb[j].Shadow {
			redisOK = false
		}
	}
	admitted := p.r.onModel && redisOK
	at := p.r.at()
	for j, i := range p.index {
		b, e := p.r.buckets[i], p.r.entries[i]
		switch p.r.ways[i] {
		case onRedis:
			results[i] = rr[j]
			if !p.r.onModel && !b.Always && b.Hits > 0 {
				// Checked with no hits: its figures for them, uncharged.
				st := rr[j].State
				st.Counts = slices.Clone(st.Counts)
				if d := limit.Decide(st, b.Limit, at, b.Hits); !d.Admitted {
					results[i] = d
				}
			}
			if e != nil && !e.known && e.gen == p.r.gens[i] && e.lease == 0 && e.calls == 0 {
				e.model, e.known = rr[j].State, true
				e.model.Counts = slices.Clone(e.model.Counts)
				e.answered(rr[j].State)
			}
		case refund:
			e.answered(rr[j].State)
			st := p.r.states[i]
			given := admitted || b.Always // as DecideAll charges it
			if given && e.gen == p.r.gens[i] {
				e.model = limit.Decide(e.model, b.Limit, at, b.Hits).State
			}
			results[i] = limit.Decide(st, b.Limit, at, b.Hits)
			if !given {
				results[i] = limit.Decide(st, b.Limit, at, 0)
			}
			if e.calls == 0 {
				e.learn(redisCount(rr[j].State, b.Limit, p.r.rnow, false), p.r.rnow)
			}
		case needsRedis:
			e.answered(rr[j].State)
			p.ok[i] = rr[j].Admitted
			if !rr[j].Admitted {
				p.wait[i] = rr[j].Reset
			}
			if e.calls == 0 && e.gen == p.r.gens[i] {
				e.learn(redisCount(rr[j].State, b.Limit, p.r.rnow, false), p.r.rnow)
			}
		}
	}
	if !admitted {
		for i := range p.ok {
			if p.r.ways[i] == needsRedis && !rbHas(p.index, i) {
				p.ok[i] = true // not asked: refused on the models
			}
		}
	}
	s.conclude(p, admitted)
	return nil
}

func rbHas(index []int, i int) bool { return slices.Contains(index, i) }

// failed undoes a request whose Redis call failed: what it reserved goes
// back; charges of limits that charge always that Redis was to record are
// kept as debts, for the next sync. Called with the request's shards
// locked.
func (s *Store) failed(p *pending, rb []limit.Bucket) {
	r := &p.r
	for i := range r.buckets {
		s.unreserve(r, i)
	}
	for j, i := range p.index {
		b := rb[j]
		if r.ways[i] == onRedis && b.Always && b.Hits > 0 {
			s.addDebt(r, i)
		}
	}
}
