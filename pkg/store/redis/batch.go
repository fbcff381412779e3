package redis

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// batcher decides the requests of concurrent calls whose buckets share a
// slot in one script call: what Redis spends per call (the script's
// lookup, its arguments, TIME, the reply) is then shared. One call per
// slot is out at a time; meanwhile the slot's requests wait in its queue,
// and the next call takes, in arrival order, up to limit of them and of
// maxCallBuckets buckets in all (by callWeight), so that a call of many
// requests does not hold Redis longer than a large request may. (Two
// calls out per slot made batches half as large and cost Redis 6% more
// per request.) Each request is still decided all or nothing on its own,
// and in order, so it sees the buckets as the ones before it in the call
// left them. (A slot here is a place: the hash slot of one of the store's
// Redis servers.)
type batcher struct {
	s     *Store
	limit int
	// wait is how long requests that find their slot idle wait for more,
	// while fewer than limit, before they are sent (Options.BatchWait);
	// timer wakes the loop when the first has waited that long.
	wait  time.Duration
	timer *time.Timer
	// pace keeps a slot's calls at least this far apart while others than
	// a lone caller send (Options.BatchPace); sent is when each slot's
	// last call went.
	pace time.Duration
	sent map[place]time.Time

	mu     sync.Mutex
	queues map[place][]*queued // by place: server and slot
	slots  []place             // places with requests waiting, oldest first
	busy   map[place]bool      // places with a call out
	closed bool
	// gap is the time between requests, a moving average (with wait
	// only), and last when the last came.
	gap  time.Duration
	last time.Time
	// lonely counts the waits in a row that no other request joined (a
	// lone caller waiting on each answer): past lonelyWaits, requests go
	// at once, but for one in lonelyProbe, which waits to learn whether
	// others come again; skipped counts the requests since.
	lonely, skipped int

	wake     chan struct{}
	inflight chan struct{} // a place per call out
	stop     chan struct{}
	done     chan struct{}
}

// queued is one request waiting for its call.
type queued struct {
	ctx     context.Context
	since   time.Time // when it was queued
	at      when      // time to decide at
	mayWait bool      // it found its slot idle, and may wait for others
	weight  int32     // its buckets' callWeights, at most maxCallBuckets (beside mayWait, in its padding)
	keys    []string
	buckets []limit.Bucket
	results []limit.Result // the batcher's own: written into dst if the caller still waits
	dst     []limit.Result
	// leases, instead of buckets, are a lease call's part at this place
	// (submitLeases), the batcher's own, written into leaseDst as results
	// are; sent is when their call was sent.
	leases, leaseDst []Lease
	sent             time.Time

	mu        sync.Mutex
	abandoned bool // the caller's call ended: dst is no longer ours
	replied   bool // its answer is written, and on its way
	answer    chan error
}

func newBatcher(s *Store, limit int, wait, pace time.Duration) *batcher {
	b := &batcher{s: s, limit: limit, wait: wait, pace: pace, sent: map[place]time.Time{}, queues: map[place][]*queued{}, busy: map[place]bool{},
		gap:  wait,
		wake: make(chan struct{}, 1), inflight: make(chan struct{}, maxBatchCalls),
		stop: make(chan struct{}), done: make(chan struct{})}
	b.timer = time.AfterFunc(time.Hour, b.signal)
	go b.loop()
	return b
}

// submit queues a request and waits for its answer or the end of ctx. A
// request abandoned at the end of ctx may still be decided, and charge:
// the lost reply of the package documentation.
func (b *batcher) submit(ctx context.Context, slot place, weight int, at when, keys []string, buckets []limit.Bucket, results []limit.Result) error {
	return b.await(slot, &queued{ctx: ctx, since: time.Now(), at: at, weight: int32(weight), keys: keys, buckets: buckets, results: make([]limit.Result, len(buckets)), dst: results,
		answer: make(chan error, 1)})
}

// submitLeases queues leases, all at slot, for the next call of their
// slot, which runs them beside the requests it decides, and waits for
// their answer or the end of ctx; it returns when the call was sent. Each
// lease is set as LeaseAll sets it, unless ctx ended first (then Redis
// may still grant what it asked: the lost reply again).
func (b *batcher) submitLeases(ctx context.Context, slot place, weight int, at when, keys []string, leases []Lease) (time.Time, error) {
	q := &queued{ctx: ctx, since: time.Now(), at: at, weight: int32(weight), keys: keys, leases: slices.Clone(leases), leaseDst: leases,
		answer: make(chan error, 1)}
	err := b.await(slot, q)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.abandoned {
		return time.Time{}, err // the call may be setting sent still
	}
	return q.sent, err
}

// await queues q at slot and waits for its answer or the end of its ctx.
func (b *batcher) await(slot place, q *queued) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return errClosed
	}
	if len(b.queues[slot]) == 0 {
		b.slots = append(b.slots, slot)
		if b.wait > 0 && !b.busy[slot] {
			q.mayWait = b.lonely < lonelyWaits
			if !q.mayWait {
				b.skipped++
				q.mayWait = b.skipped%lonelyProbe == 0
			}
		}
	}
	b.queues[slot] = append(b.queues[slot], q)
	if b.wait > 0 {
		if !b.last.IsZero() {
			b.gap += (min(q.since.Sub(b.last), b.wait) - b.gap) / 8
		}
		b.last = q.since
	}
	b.mu.Unlock()
	b.signal()
	return q.wait()
}

// wait waits for q's answer or the end of its ctx.
func (q *queued) wait() error {
	select {
	case err := <-q.answer:
		return err
	case <-q.ctx.Done():
		q.mu.Lock()
		if q.replied {
			// Answered as ctx ended: what Redis granted is the caller's.
			q.mu.Unlock()
			return <-q.answer
		}
		q.abandoned = true
		q.mu.Unlock()
		return q.ctx.Err()
	}
}

// answer gives a request its results, unless its caller has gone.
func (q *queued) reply(err error) {
	q.mu.Lock()
	if !q.abandoned && q.leases != nil {
		copy(q.leaseDst, q.leases)
	}
	if !q.abandoned && err == nil {
		copy(q.dst, q.results)
	}
	q.replied = true
	q.mu.Unlock()
	q.answer <- err
}

// loop sends a call for each slot whose requests wait and that has no
// call out, within maxBatchCalls calls out in all.
func (b *batcher) loop() {
	defer close(b.done)
	for {
		select {
		case <-b.stop:
			return
		case <-b.wake:
		}
		for {
			select {
			case b.inflight <- struct{}{}:
			case <-b.stop:
				return
			}
			group, slot, wait := b.take()
			if group == nil {
				<-b.inflight
				if wait > 0 {
					b.timer.Reset(wait)
				}
				break
			}
			go func() {
				b.call(group, slot)
				b.release(slot)
				<-b.inflight
				b.signal()
			}()
		}
	}
}

func (b *batcher) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// take removes the requests of one call (up to limit, and maxCallBuckets
// buckets) of the slot waiting longest that has no call out, and marks it
// busy; without one, it returns how long until a slot's requests have
// waited for more as long as they may (0: none waits).
func (b *batcher) take() ([]*queued, place, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var wait time.Duration
	for i, slot := range b.slots {
		if b.busy[slot] {
			continue
		}
		q := b.queues[slot]
		n := fill(q, b.limit)
		// Requests that came while the slot's call was out have waited for
		// it: they go at once. One that found the slot idle may wait for
		// others, for as long as a few would take to come at the recent
		// pace: with few callers, each waiting on its answer, a longer
		// wait only delays them all.
		if q[0].mayWait && n == len(q) && n < b.limit {
			if w := min(b.wait, waitGaps*b.gap) - time.Since(q[0].since); w > 0 {
				if wait == 0 || w < wait {
					wait = w
				}
				continue
			}
		}
		if b.pace > 0 && n == len(q) && n < b.limit && b.lonely < lonelyWaits {
			// Paced: while others than a lone caller send, the slot's
			// last call must be pace old.
			if w := b.pace - time.Since(b.sent[slot]); w > 0 {
				if wait == 0 || w < wait {
					wait = w
				}
				continue
			}
		}
		if q[0].mayWait {
			if n == 1 {
				b.lonely++
			} else {
				b.lonely, b.skipped = 0, 0
			}
		}
		group := q[:n:n]
		if n == len(q) {
			delete(b.queues, slot)
			b.slots = append(b.slots[:i:i], b.slots[i+1:]...)
		} else {
			b.queues[slot] = q[n:]
			b.slots = append(append(b.slots[:i:i], b.slots[i+1:]...), slot) // the rest waits behind the other slots
		}
		b.busy[slot] = true
		if b.pace > 0 {
			b.sent[slot] = time.Now()
		}
		return group, slot, 0
	}
	return nil, 0, wait
}

// fill returns how many of the requests q, from the first, one call
// decides: at most most, and maxCallBuckets buckets, but at least one.
func fill(q []*queued, most int) int {
	n, weight := 1, q[0].weight
	for n < min(len(q), most) && weight+q[n].weight <= maxCallBuckets {
		weight += q[n].weight
		n++
	}
	return n
}

// waitGaps is how many of the recent gaps between requests one that found
// its slot idle waits at most for others (and at most the batch wait).
const waitGaps = 4

// lonelyWaits waits in a row that no request joined stop the waiting; then
// one request in lonelyProbe waits, to find out whether others come again.
const (
	lonelyWaits = 4
	lonelyProbe = 16
)

// release marks a slot's call done.
func (b *batcher) release(slot place) {
	b.mu.Lock()
	delete(b.busy, slot)
	b.mu.Unlock()
}

// call decides a group, at p, in one script call. Requests whose call has
// ended are left out; the call's deadline is the latest of the others'.
func (b *batcher) call(group []*queued, p place) {
	live := group[:0:0]
	var deadline time.Time
	bounded := true
	for _, q := range group {
		if err := q.ctx.Err(); err != nil {
			q.reply(err)
			continue
		}
		live = append(live, q)
		if d, ok := q.ctx.Deadline(); !ok {
			bounded = false
		} else if d.After(deadline) {
			deadline = d
		}
	}
	if len(live) == 0 {
		return
	}
	ctx := context.Background()
	if bounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	var keys []string
	var reqs []scriptRequest
	var deciding, leasing []*queued
	for _, q := range live {
		if q.leases != nil {
			leasing = append(leasing, q)
			continue
		}
		deciding = append(deciding, q)
		keys = append(keys, q.keys...)
		reqs = append(reqs, scriptRequest{at: q.at.at, ref: q.at.ref, buckets: q.buckets, results: q.results})
	}
	// Straight to the connection pool: a call already gathers what a
	// pipeline would, and several calls are out at once.
	cs := b.s.clientsAt(p)
	direct := &clients{conn: cs.conn, breakers: cs.breakers}
	// The decide call and a lease call of every lease part, in one round
	// trip: the decide call first.
	var calls []*intCall
	decide := &intCall{script: &decideScript, keys: keys}
	if len(deciding) > 0 {
		decide.args = decideArgs(-1, keys, reqs)
		calls = append(calls, decide)
	}
	var lease *intCall
	var all []Lease
	if len(leasing) > 0 {
		lease, all = leaseCall(leasing)
		calls = append(calls, lease)
	}
	sent := time.Now()
	runTogether(ctx, direct, calls)
	if len(deciding) > 0 && decide.err == nil {
		_, decide.err = decideReply(decide.vals, reqs, len(keys))
	}
	for _, q := range deciding {
		q.reply(decide.err)
	}
	if len(leasing) > 0 && lease.err == nil {
		lease.err = readLeases(lease.vals, all, indexes(len(all)))
	}
	for _, q := range leasing {
		all = all[copy(q.leases, all):]
		q.sent = sent
		q.reply(lease.err) // LeaseBatched marks its leases failed by it
	}
}

// leaseCall returns the lease call of the lease parts leasing, and their
// leases in one slice, in turn. It is decided at the latest of their
// instants (Redis's clock, if the store reads it: it never runs back).
func leaseCall(leasing []*queued) (*intCall, []Lease) {
	at := leasing[0].at
	var keys []string
	var all []Lease
	for _, q := range leasing {
		at.at, at.ref = max(at.at, q.at.at), max(at.ref, q.at.ref)
		keys = append(keys, q.keys...)
		all = append(all, q.leases...)
	}
	return &intCall{script: &leaseScript, keys: keys, args: leaseArgs(at.at, at.ref, all, indexes(len(all)))}, all
}

// indexes returns 0, 1, ..., n-1.
func indexes(n int) []int {
	index := make([]int, n)
	for i := range index {
		index[i] = i
	}
	return index
}

// close fails the requests waiting and stops the loop.
func (b *batcher) close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	var waiting []*queued
	for _, q := range b.queues {
		waiting = append(waiting, q...)
	}
	b.queues, b.slots = nil, nil
	b.mu.Unlock()
	b.timer.Stop()
	close(b.stop)
	<-b.done
	for _, q := range waiting {
		q.reply(errClosed)
	}
}

// maxBatchCalls bounds the calls out at once, over all slots.
const maxBatchCalls = 64
