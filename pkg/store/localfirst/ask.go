package localfirst

import (
	"context"
	"sync"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// askers is how many lease calls for requests may be out at once. Others
// wait, and go together in the next: a request's lease call costs Redis
// what a call costs, beside what its buckets do, so that calls of one
// request each would cost more than exact mode's batched calls.
const askers = 2

// asked is one request's lease call, waiting to be sent with others.
type asked struct {
	now    time.Time
	leases []redis.Lease
	sent   time.Time // when its call was sent
	rnow   int64     // Redis's clock of the answer
	err    error
	done   chan struct{}
}

// asks batches the lease calls of requests (askUnits): a request's call
// goes at once if fewer than askers are out, else with those that came
// meanwhile, in one LeaseAll, sent when a call is back. A batch is decided
// at the latest of its requests' instants: Redis's clock, which never
// runs back.
type asks struct {
	remote  Remote
	timeout time.Duration

	mu      sync.Mutex
	waiting []*asked
	out     int
}

// lease runs leases in a lease call, with those of other requests that
// wait, and returns what LeaseAll does for them, and when the call was
// sent. It is not cancelled: the units Redis grants are charged whether
// or not the request still waits.
func (a *asks) lease(now time.Time, leases []redis.Lease) (rnow int64, sent time.Time, err error) {
	c := &asked{now: now, leases: leases, done: make(chan struct{})}
	a.mu.Lock()
	a.waiting = append(a.waiting, c)
	if a.out >= askers {
		a.mu.Unlock()
		<-c.done // sent by a call out, when it is back
		return c.rnow, c.sent, c.err
	}
	a.out++
	batch := a.waiting
	a.waiting = nil
	a.mu.Unlock()
	a.send(batch)
	// Those that came meanwhile go in the next call, on a goroutine of
	// their own, which keeps this one's place: this request answers now.
	a.mu.Lock()
	if len(a.waiting) > 0 {
		go a.drain()
	} else {
		a.out--
	}
	a.mu.Unlock()
	return c.rnow, c.sent, c.err
}

// drain sends the calls waiting, in batches, until none is, in the place
// of a call out.
func (a *asks) drain() {
	for {
		a.mu.Lock()
		if len(a.waiting) == 0 {
			a.out--
			a.mu.Unlock()
			return
		}
		batch := a.waiting
		a.waiting = nil
		a.mu.Unlock()
		a.send(batch)
	}
}

// send makes one lease call of batch's leases and answers each: the
// call's error only to those whose leases it failed.
func (a *asks) send(batch []*asked) {
	sent := time.Now()
	if len(batch) == 1 {
		c := batch[0]
		c.rnow, c.err = a.call(c.now, c.leases)
		markFailed(c.leases, c.err)
		c.sent = sent
		close(c.done)
		return
	}
	now := batch[0].now
	n := 0
	for _, c := range batch {
		if c.now.After(now) {
			now = c.now
		}
		n += len(c.leases)
	}
	all := make([]redis.Lease, 0, n)
	for _, c := range batch {
		all = append(all, c.leases...)
	}
	rnow, err := a.call(now, all)
	markFailed(all, err)
	for _, c := range batch {
		copy(c.leases, all[:len(c.leases)])
		all = all[len(c.leases):]
		c.rnow, c.sent = rnow, sent
		if failedAny(c.leases) {
			c.err = err
		}
		if !c.now.Equal(now) {
			c.rnow = 0 // Redis's clock against another instant: no offset to note
		}
		close(c.done)
	}
}

func (a *asks) call(now time.Time, leases []redis.Lease) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	return a.remote.LeaseAll(ctx, now, leases)
}

// markFailed marks every lease failed by err when the call failed as a
// whole, none of them marked: nothing of its answer is to be read.
func markFailed(leases []redis.Lease, err error) {
	if err == nil || failedAny(leases) {
		return
	}
	for i := range leases {
		leases[i].Err = err
	}
}

// failedAny reports whether a lease of leases failed.
func failedAny(leases []redis.Lease) bool {
	for i := range leases {
		if leases[i].Err != nil {
			return true
		}
	}
	return false
}
