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
	rnow   int64 // Redis's clock of the answer
	err    error
	done   chan struct{}
}

// asks batches the lease calls of requests (askUnits): a request's call
// goes at once if fewer than askers are out, else with those that came
// meanwhile, in one LeaseAll. A batch is decided at the latest of its
// requests' instants: Redis's clock, which never runs back.
type asks struct {
	remote  Remote
	timeout time.Duration

	mu      sync.Mutex
	waiting []*asked
	out     int
}

// lease runs leases in a lease call, with those of other requests that
// wait, and returns what LeaseAll does for them. It is not cancelled: the
// units Redis grants are charged whether or not the request still waits.
func (a *asks) lease(now time.Time, leases []redis.Lease) (int64, error) {
	c := &asked{now: now, leases: leases, done: make(chan struct{})}
	a.mu.Lock()
	a.waiting = append(a.waiting, c)
	if a.out >= askers {
		a.mu.Unlock()
		<-c.done // sent by a call out, when it is back
		return c.rnow, c.err
	}
	a.out++
	for len(a.waiting) > 0 {
		batch := a.waiting
		a.waiting = nil
		a.mu.Unlock()
		a.send(batch)
		a.mu.Lock()
	}
	a.out--
	a.mu.Unlock()
	<-c.done
	return c.rnow, c.err
}

// send makes one lease call of batch's leases and answers each.
func (a *asks) send(batch []*asked) {
	if len(batch) == 1 {
		c := batch[0]
		c.rnow, c.err = a.call(c.now, c.leases)
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
	for _, c := range batch {
		copy(c.leases, all[:len(c.leases)])
		all = all[len(c.leases):]
		c.rnow, c.err = rnow, err
		if !c.now.Equal(now) {
			c.rnow = 0 // Redis's clock against another instant: no offset to note
		}
		if err != nil && !failedAny(c.leases) {
			c.err = nil // another request's slot failed, not this one's
		}
		close(c.done)
	}
}

func (a *asks) call(now time.Time, leases []redis.Lease) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	return a.remote.LeaseAll(ctx, now, leases)
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
