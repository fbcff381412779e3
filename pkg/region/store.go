package region

import (
	"context"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// Decider decides buckets, as every store does (rls.Store).
type Decider interface {
	Apply(ctx context.Context, now time.Time, buckets []limit.Bucket, results []limit.Result) error
}

// Store decides every bucket on the store it wraps under this region's
// claim of the bucket's limit (Exchange.Scaled), and counts what each
// admitted for the exchange (what each was asked is Exchange.Asked's). Its Apply is the wrapped
// store's, as are State and Reset (where the wrapped store has them) and
// Check, Close and Name.
type Store struct {
	inner Decider
	x     *Exchange
}

// Wrap returns inner deciding under this region's claims.
func (x *Exchange) Wrap(inner Decider) *Store { return &Store{inner: inner, x: x} }

// Apply implements rls.Store. The wrapped store is given copies of the
// buckets, their limits the claims': a failed call may still read them.
func (s *Store) Apply(ctx context.Context, now time.Time, buckets []limit.Bucket, results []limit.Result) error {
	scaled, keys := s.scale(buckets)
	err := s.inner.Apply(ctx, now, scaled, results)
	if err != nil {
		return err
	}
	// A request is admitted only if all its buckets are (all or
	// nothing): a bucket with room in a refused request is not charged.
	all := true
	for i, b := range buckets {
		if !b.Shadow && !results[i].Admitted {
			all = false
		}
	}
	for i, b := range buckets {
		if !b.Regional && b.Hits > 0 && (all || b.Always) {
			s.x.admitted(keys[i], b.Limit, b.Hits, now)
		}
	}
	return nil
}

// scale returns copies of buckets under their claims, and their keys'
// hashes.
func (s *Store) scale(buckets []limit.Bucket) ([]limit.Bucket, []uint64) {
	scaled := make([]limit.Bucket, len(buckets))
	keys := make([]uint64, len(buckets))
	for i, b := range buckets {
		scaled[i] = b
		if b.Regional {
			continue // each region's own: not divided
		}
		keys[i] = KeyHash(b.Key)
		scaled[i].Limit = s.x.Scaled(keys[i], b.Limit)
	}
	return scaled, keys
}

// inspector is a store whose buckets can be read and reset (rls.Inspector).
type inspector interface {
	State(ctx context.Context, now time.Time, buckets []limit.Bucket, states []limit.State) (time.Time, error)
	Reset(ctx context.Context, keys []string) error
}

// State reads the buckets' states under this region's claims.
func (s *Store) State(ctx context.Context, now time.Time, buckets []limit.Bucket, states []limit.State) (time.Time, error) {
	ins, ok := s.inner.(inspector)
	if !ok {
		return time.Time{}, errNotInspectable
	}
	scaled, _ := s.scale(buckets)
	return ins.State(ctx, now, scaled, states)
}

// Reset resets the buckets of keys in this region's store.
func (s *Store) Reset(ctx context.Context, keys []string) error {
	ins, ok := s.inner.(inspector)
	if !ok {
		return errNotInspectable
	}
	return ins.Reset(ctx, keys)
}

// Check is the wrapped store's.
func (s *Store) Check(ctx context.Context) error {
	if c, ok := s.inner.(interface{ Check(context.Context) error }); ok {
		return c.Check(ctx)
	}
	return nil
}

// Close is the wrapped store's.
func (s *Store) Close() error {
	if c, ok := s.inner.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

// Name is the wrapped store's.
func (s *Store) Name() string {
	if n, ok := s.inner.(interface{ Name() string }); ok {
		return n.Name()
	}
	return "store"
}
