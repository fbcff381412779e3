// Package fallback keeps the service deciding while its shared store (Redis)
// fails: requests are decided on an in-process memory store until the
// shared store answers again. It is not a cache: nothing decided locally
// reaches Redis.
//
// While it falls back, each replica limits on its own: with N replicas, up
// to N times a limit passes. Buckets charged locally are not carried over
// to Redis when it is back, and each outage starts with empty local buckets.
package fallback

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
)

// Primary is the shared store.
type Primary interface {
	Apply(ctx context.Context, now time.Time, buckets []limit.Bucket, results []limit.Result) error
	// State reads buckets without charging them, and Reset empties them
	// (see the memory store's methods of the same names).
	State(ctx context.Context, now time.Time, buckets []limit.Bucket, states []limit.State) (time.Time, error)
	Reset(ctx context.Context, keys []string) error
	Check(ctx context.Context) error
	Close() error
}

// Options configure a Store.
type Options struct {
	// Local configures the memory store used while Primary fails.
	Local memory.Options
	// Timeout caps every Primary call; 0 for no cap. A call with a deadline
	// gives Primary at most half of the time it has left, keeping the
	// other half to decide locally if Primary is slow.
	Timeout time.Duration
	// OnSwitch, if set, is told of every switch: toLocal true when requests
	// go to the local store, false when they go back to Primary.
	OnSwitch func(toLocal bool)
	// Logger receives every switch; default slog.Default().
	Logger *slog.Logger
}

// Store decides on Primary, or on a local memory store while Primary fails.
// It is safe for concurrent use.
type Store struct {
	primary Primary
	opts    Options
	mu      sync.Mutex                   // serializes switches
	local   atomic.Pointer[memory.Store] // set while Primary fails
	// forget is WatchResets' callback, told of every switch.
	forget atomic.Pointer[func(keys []string)]
}

// New returns a Store in front of primary.
func New(primary Primary, opts Options) *Store {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Store{primary: primary, opts: opts}
}

// Name is the store's name in metrics and traces: "fallback".
func (s *Store) Name() string { return "fallback" }

// Apply decides on Primary; when Primary fails (not when the call itself
// has ended), it switches to the local store and decides there.
func (s *Store) Apply(ctx context.Context, now time.Time, buckets []limit.Bucket, results []limit.Result) error {
	if l := s.local.Load(); l != nil {
		return l.Apply(ctx, now, buckets, results)
	}
	pctx, cancel := ctx, context.CancelFunc(func() {})
	if budget := s.primaryBudget(ctx); budget > 0 {
		pctx, cancel = context.WithTimeout(ctx, budget)
	}
	// Primary may go on reading the buckets after its call gave up (a
	// batched Redis call decides a request its caller left), while this
	// call answers from the local store and its caller reuses them: it
	// reads a copy.
	err := s.primary.Apply(pctx, now, slices.Clone(buckets), results)
	cancel()
	if err == nil || ctx.Err() != nil {
		return err
	}
	l, serr := s.toLocal(err)
	if serr != nil {
		return errors.Join(err, serr)
	}
	return l.Apply(ctx, now, buckets, results)
}

// primaryBudget is how long Primary may take for a call: the timeout, and
// at most half of what the call has left (Envoy's deadline, 20 ms by
// default, usually ends before the timeout); 0 for no limit.
func (s *Store) primaryBudget(ctx context.Context) time.Duration {
	budget := s.opts.Timeout
	if dl, ok := ctx.Deadline(); ok {
		if half := max(time.Until(dl)/2, time.Nanosecond); budget == 0 || half < budget {
			budget = half
		}
	}
	return budget
}

// Check asks Primary whether it answers, and switches accordingly. It
// returns nil: the service answers either way.
func (s *Store) Check(ctx context.Context) error {
	err := s.primary.Check(ctx)
	switch {
	case ctx.Err() != nil:
	case err == nil && s.local.Load() != nil:
		s.toPrimary()
	case err != nil && s.local.Load() == nil:
		if _, serr := s.toLocal(err); serr != nil {
			return serr
		}
	}
	return nil
}

// Local reports whether requests are decided locally.
func (s *Store) Local() bool { return s.local.Load() != nil }

func (s *Store) toLocal(cause error) (*memory.Store, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.local.Load(); l != nil {
		return l, nil
	}
	l, err := memory.New(s.opts.Local)
	if err != nil {
		return nil, err
	}
	s.local.Store(l)
	s.opts.Logger.Warn("the shared store fails: deciding on this replica's memory store until it answers", "err", cause)
	if s.opts.OnSwitch != nil {
		s.opts.OnSwitch(true)
	}
	s.forgetAll()
	return l, nil
}

func (s *Store) toPrimary() {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.local.Swap(nil)
	if l == nil {
		return
	}
	s.opts.Logger.Warn("the shared store answers again: deciding on it")
	if s.opts.OnSwitch != nil {
		s.opts.OnSwitch(false)
	}
	s.forgetAll()
	// Calls still on the local store finish before it closes; what they
	// taught the caller is forgotten again then.
	time.AfterFunc(time.Second, func() {
		l.Close()
		s.forgetAll()
	})
}

// forgetAll tells WatchResets' callback that every bucket may have
// changed: what a caller learned from one store (an over-limit cache's
// rejections) is not the other's to keep.
func (s *Store) forgetAll() {
	if f := s.forget.Load(); f != nil {
		(*f)(nil)
	}
}

// State reads the buckets where requests are decided: on the local store
// while falling back, else on Primary. It never switches: a failed read
// is an error.
func (s *Store) State(ctx context.Context, now time.Time, buckets []limit.Bucket, states []limit.State) (time.Time, error) {
	if l := s.local.Load(); l != nil {
		return l.State(ctx, now, buckets, states)
	}
	return s.primary.State(ctx, now, buckets, states)
}

// Reset empties the buckets on Primary and, while falling back, on the
// local store too, where requests are decided meanwhile. Primary's error
// is returned, after the local store is reset.
func (s *Store) Reset(ctx context.Context, keys []string) error {
	if l := s.local.Load(); l != nil {
		if err := l.Reset(ctx, keys); err != nil {
			return err
		}
	}
	return s.primary.Reset(ctx, keys)
}

// WatchResets passes on Primary's, if it has them: the resets made
// through other replicas (see the Redis store's WatchResets); and it calls
// forget(nil) at every switch, between Primary and the local store, for as
// long as ctx lasts: a bucket refused by one may have room in the other.
// Without Primary's resets it returns at once, and the switches are still
// told.
func (s *Store) WatchResets(ctx context.Context, forget func(keys []string)) {
	s.forget.Store(&forget)
	context.AfterFunc(ctx, func() { s.forget.Store(nil) })
	if w, ok := s.primary.(interface {
		WatchResets(context.Context, func([]string))
	}); ok {
		w.WatchResets(ctx, forget)
	}
}

// Close closes Primary and the local store.
func (s *Store) Close() error {
	if l := s.local.Swap(nil); l != nil {
		l.Close()
	}
	return s.primary.Close()
}

// Bytes returns the bytes the local store counts, 0 when not in use.
func (s *Store) Bytes() int64 {
	if l := s.local.Load(); l != nil {
		return l.Bytes()
	}
	return 0
}

// Len returns the buckets of the local store, 0 when not in use.
func (s *Store) Len() int {
	if l := s.local.Load(); l != nil {
		return l.Len()
	}
	return 0
}
