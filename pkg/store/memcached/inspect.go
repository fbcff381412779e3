package memcached

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/envoy-rls/envoy-rls/pkg/breaker"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// State returns the stored state of each bucket at now, changing nothing:
// states[i] is buckets[i]'s, empty when memcached holds none. The states
// are for now: memcached has no clock of its own.
func (s *Store) State(ctx context.Context, now time.Time, buckets []limit.Bucket, states []limit.State) (time.Time, error) {
	if s.closed.Load() {
		return now, ErrClosed
	}
	if len(states) < len(buckets) {
		return now, fmt.Errorf("memcached store: %d states for %d buckets", len(states), len(buckets))
	}
	if len(buckets) == 0 {
		return now, ctx.Err()
	}
	buckets = append([]limit.Bucket(nil), buckets...)
	places := make([]place, len(buckets))
	keys := make([]string, len(buckets))
	for i, b := range buckets {
		places[i] = placeOf(s.prefix, s.ownKeys, b, now)
		keys[i] = places[i].key
	}
	read := make([]limit.State, len(buckets))
	err := s.call(ctx, keys[0], func(context.Context) error {
		items, err := s.client.GetMulti(keys)
		if err != nil {
			return err
		}
		for i, p := range places {
			read[i] = stateAt(p, buckets[i], items[p.key])
		}
		return nil
	})
	if err != nil {
		return now, err
	}
	copy(states, read)
	return now, nil
}

// Reset empties the buckets with these keys: each key of its own and,
// for a fixed window of a reference unit, the reference's counter of the
// window that holds the store's clock now.
func (s *Store) Reset(ctx context.Context, keys []string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if len(keys) == 0 {
		return ctx.Err()
	}
	wall := s.clock()
	var doomed []string
	for _, k := range keys {
		doomed = append(doomed, ownKey(s.prefix, k))
		if ref, window, ok := referenceKey(k); ok && !s.ownKeys {
			doomed = append(doomed, legalKey(s.prefix, ref+fmt.Sprint(windowStart(wall, window)), hashedRef))
		}
	}
	return s.call(ctx, doomed[0], func(ctx context.Context) error {
		for _, k := range doomed {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := s.client.Delete(k); err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
				return err
			}
		}
		return nil
	})
}

// Check reports whether every server answers; while the servers are not
// found yet, it looks for them first.
func (s *Store) Check(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := s.resolve(ctx); err != nil {
		return fmt.Errorf("memcached store: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.client.Ping() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("memcached store: %w", err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// BreakersOpen returns the servers whose circuit breaker is open.
func (s *Store) BreakersOpen() []string {
	if s.breakers == nil {
		return nil
	}
	return s.breakers.Open()
}

// Close stops the SRV refresh and closes the connections; Apply then
// fails with ErrClosed.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.stop)
		<-s.refreshDone
		err = s.client.Close()
	})
	return err
}

// minBudget is the least time a call must have had for its timeout to
// count against its server: memcached answers in far less, and a caller
// sending tiny deadlines must not trip the breaker for every caller.
const minBudget = 10 * time.Millisecond

// outcome is how a call ended, as the breaker counts it: an answer
// (memcached's own refusals too), a timeout of a call that had minBudget,
// or neither (a refused connection, a call given up).
func outcome(ctx context.Context, begin time.Time, err error) breaker.Outcome {
	var ne net.Error
	var connect *memcache.ConnectTimeoutError
	switch {
	case err == nil || conflict(err) || errors.Is(err, memcache.ErrServerError):
		return breaker.Answered
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.As(err, &connect) || (errors.As(err, &ne) && ne.Timeout()):
		if deadline, ok := ctx.Deadline(); ok && deadline.Sub(begin) < minBudget {
			return breaker.Abandoned
		}
		return breaker.TimedOut
	}
	return breaker.Abandoned
}
