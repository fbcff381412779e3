package localfirst

import (
	"context"
	"hash/maphash"
	"slices"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// Name is the store's name in metrics and traces: "localfirst".
func (s *Store) Name() string { return "localfirst" }

// State returns the buckets as this replica answers for them: a bucket
// it holds a model of by its model (what exact mode would hold, as far as
// it knows), any other as Redis holds it. It changes nothing.
func (s *Store) State(ctx context.Context, now time.Time, buckets []limit.Bucket, states []limit.State) (time.Time, error) {
	at, err := s.remote.State(ctx, now, buckets, states)
	if err != nil {
		return at, err
	}
	for i, b := range buckets {
		h := maphash.String(s.seed, b.Key)
		sh := &s.shards[h%shards]
		sh.mu.Lock()
		if e := sh.m[h]; e != nil && e.key == b.Key && e.known && e.matches(b) {
			states[i] = e.model
			states[i].Counts = slices.Clone(e.model.Counts)
		}
		sh.mu.Unlock()
	}
	return at, nil
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

// forget drops what this replica holds of the buckets keys, which were
// reset (empty on Redis now), and the answer of a call out for them; nil
// (resets may have been missed) has every model learnt anew from Redis,
// keeping the units, which Redis charged.
func (s *Store) forget(keys []string) {
	if keys == nil {
		for i := range s.shards {
			sh := &s.shards[i]
			sh.mu.Lock()
			for _, e := range sh.m {
				if e.lease == 0 {
					e.known = false
				}
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
			e.forget()
		}
		sh.mu.Unlock()
	}
}
