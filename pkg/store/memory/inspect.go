package memory

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// State returns the stored state of each bucket at now, changing nothing:
// states[i] is buckets[i]'s (by its key, and its limit's algorithm), empty
// when the store holds none or it has expired. The buckets are read
// together, as Apply would read them; the time returned is now. A sliding
// window's counts are copied.
func (s *Store) State(ctx context.Context, now time.Time, buckets []limit.Bucket, states []limit.State) (time.Time, error) {
	if err := ready(ctx, s); err != nil {
		return now, err
	}
	if len(states) < len(buckets) {
		return now, fmt.Errorf("memory store: %d states for %d buckets", len(states), len(buckets))
	}
	ids, locks := s.lock(buckets, nil, nil)
	defer s.unlock(locks)
	us := now.UnixMicro()
	for i, b := range buckets {
		st := s.shards[ids[i]].state(b, us)
		st.Counts = slices.Clone(st.Counts)
		states[i] = st
	}
	return now, ctx.Err()
}

// Reset removes the buckets with these keys, as if they had drained: the
// next request finds them empty. Keys the store does not hold are skipped.
func (s *Store) Reset(ctx context.Context, keys []string) error {
	if err := ready(ctx, s); err != nil {
		return err
	}
	for _, k := range keys {
		sh := &s.shards[maphash.String(s.seed, k)&s.mask]
		sh.mu.Lock()
		closed := s.closed() // the final snapshot may have read the shard
		if !closed {
			sh.delete(k)
		}
		sh.mu.Unlock()
		if closed {
			return ErrClosed
		}
	}
	return nil
}

// ready says why the store cannot be read now: the call has ended, or the
// store is closed.
func ready(ctx context.Context, s *Store) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Check(ctx)
}
