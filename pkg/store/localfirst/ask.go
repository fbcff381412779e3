package localfirst

import (
	"context"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// batchedLeaser is a Remote that sends a request's lease call with its
// other calls for Redis, in one round trip (the Redis store's
// LeaseBatched): a call of one request's few buckets costs Redis what a
// round trip costs, far more than the buckets' own work.
type batchedLeaser interface {
	LeaseBatched(ctx context.Context, now time.Time, leases []redis.Lease) (int64, time.Time, error)
}

// leaseFor makes a request's lease call, within the sync timeout and not
// cancelled with the request: Redis charges a grant whether or not its
// answer is read. It notes Redis's clock by the answer, as of when the
// call was sent.
func (s *Store) leaseFor(now time.Time, leases []redis.Lease) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	start := time.Now()
	sent := start
	var rnow int64
	var err error
	if b, ok := s.remote.(batchedLeaser); ok {
		rnow, sent, err = b.LeaseBatched(ctx, now, leases)
	} else {
		rnow, err = s.remote.LeaseAll(ctx, now, leases)
	}
	markFailed(leases, err)
	if sent.After(start) {
		// Waited for its call: now, as of when it was sent.
		now, start = now.Add(sent.Sub(start)), sent
	}
	s.noteClock(rnow, now, start)
	return err
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
