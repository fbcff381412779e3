package localfirst

import (
	"context"
	"hash/maphash"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// Name is the store's name in metrics and traces: "localfirst".
func (s *Store) Name() string { return "localfirst" }

// State returns the buckets as Redis holds them: the units leased to
// replicas, used or not, count as charged there. It changes nothing.
func (s *Store) State(ctx context.Context, now time.Time, buckets []limit.Bucket, states []limit.State) (time.Time, error) {
	return s.remote.State(ctx, now, buckets, states)
}

// Reset empties the buckets with these keys on Redis and forgets what this
// replica holds of them; the other replicas hear of it through
// WatchResets.
func (s *Store) Reset(ctx context.Context, keys []string) error {
	err := s.remote.Reset(ctx, keys)
	s.forget(keys)
	return err
}

// WatchResets has this replica forget what it holds of the buckets any
// replica resets, and calls forget with their keys, until ctx ends.
func (s *Store) WatchResets(ctx context.Context, forget func(keys []string)) {
	s.remote.WatchResets(ctx, func(keys []string) {
		s.forget(keys)
		forget(keys)
	})
}

// forget drops the units held of the buckets keys, their dry marks and the
// answer of a call out for them, so that their next requests ask Redis
// anew; nil (resets may have been missed) clears every dry mark but keeps
// the units, which Redis charged.
func (s *Store) forget(keys []string) {
	if keys == nil {
		for i := range s.shards {
			sh := &s.shards[i]
			sh.mu.Lock()
			for _, e := range sh.m {
				e.dry = false
			}
			sh.mu.Unlock()
		}
		return
	}
	for _, k := range keys {
		h := maphash.String(s.seed, k)
		sh := &s.shards[h%shards]
		sh.mu.Lock()
		if e := sh.m[h]; e != nil && e.key == k {
			// The units were charged to a bucket that is gone: using them
			// would admit past the limit of the new one.
			e.lease, e.stale, e.dry, e.global = 0, 0, false, limit.State{}
			e.gen++
			e.forgot = e.busy != nil
		}
		sh.mu.Unlock()
	}
}
