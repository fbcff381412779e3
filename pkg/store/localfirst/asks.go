package localfirst

import (
	"context"
	"sync"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// ask is one request's call for more units, which it does not wait for:
// its buckets' leases and entries, and done, closed when Redis has
// answered (their busy mark, which a refused request may wait on).
type ask struct {
	now     time.Time
	leases  []redis.Lease
	entries []*entry
	done    chan struct{}
}

// asks gathers the asks of concurrent requests, so that one lease call
// serves all that queued while the one before was out: a replica that
// meets many new buckets at once (a start, a burst of new clients) does
// not make a Redis call for each.
type asks struct {
	mu      sync.Mutex
	queue   []*ask
	running bool
}

// add queues a, and starts sending if nothing is being sent. The call runs
// to its end even if the request stops waiting: Redis charges a grant
// whether or not its answer is read, so an answer dropped would be units
// lost for as long as the bucket holds them.
func (q *asks) add(s *Store, a *ask) {
	q.mu.Lock()
	q.queue = append(q.queue, a)
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if start {
		s.asking.Add(1)
		go func() {
			defer s.asking.Done()
			q.send(s)
		}()
	}
}

// send sends what has queued, in one lease call, until nothing has.
func (q *asks) send(s *Store) {
	for {
		q.mu.Lock()
		batch := q.queue
		q.queue = nil
		if len(batch) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()

		var leases []redis.Lease
		var entries []*entry
		for _, a := range batch {
			leases = append(leases, a.leases...)
			entries = append(entries, a.entries...)
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		s.lease(ctx, batch[len(batch)-1].now, leases, func(j int) *entry { return entries[j] }, nil)
		cancel()
		for _, a := range batch {
			close(a.done)
		}
	}
}
