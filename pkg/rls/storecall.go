package rls

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/trace"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// apply asks the store to decide the request's buckets, within its budget
// (storeBudget).
func (s *Service) apply(ctx context.Context, now time.Time, w *work) error {
	return s.call(ctx, now, StoreApply, w.buckets, w.results)
}

// call asks the store, within its budget; op says what for (StoreApply,
// StorePeek).
func (s *Service) call(ctx context.Context, now time.Time, op string, buckets []limit.Bucket, results []limit.Result) error {
	if s.storeTimeout > 0 {
		budget := storeBudget(ctx, s.storeTimeout, s.margin)
		if budget <= 0 {
			// Too late to ask and still answer: as if the store had timed out.
			s.observer.Store(s.storeName, op, 0, errNoTimeLeft)
			return errNoTimeLeft
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, budget)
		defer cancel()
	}
	var span trace.Span
	if s.tracer != nil && trace.SpanFromContext(ctx).IsRecording() {
		// Under a call that is traced (sampled): a span for the store call.
		ctx, span = s.startStoreSpan(ctx, op, len(buckets))
	}
	start := time.Now()
	err := s.store.Apply(ctx, now, buckets, results)
	s.observer.Store(s.storeName, op, time.Since(start), err)
	if span != nil {
		endStoreSpan(span, err)
	}
	return err
}

// storeBudget is how long a store call may take: the timeout, and no more
// than the call has left less a margin (margin, or if 0 deadlineMargin's)
// in which the service can still answer by its failure mode (allow, deny,
// or Unavailable) when the store hangs.
func storeBudget(ctx context.Context, timeout, margin time.Duration) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return timeout
	}
	left := time.Until(dl)
	if margin == 0 {
		margin = deadlineMargin(left)
	}
	return min(timeout, left-margin)
}

// deadlineMargin is the default margin: a quarter of the time left, at
// least 1 ms and at most 10 ms. Building and sending the failure mode's
// answer takes microseconds; the margin is for what delays a goroutine
// once the store call's timer fires: a busy or CPU-throttled process, a
// GC. On a loaded 2-core machine such delays reached several ms
// (TestFailureModesWithHungRedis), so 5 ms of Envoy's 20 ms are kept back;
// the store still gets 15 ms, over ten times a healthy Redis's round trip.
func deadlineMargin(left time.Duration) time.Duration {
	return min(max(left/4, time.Millisecond), 10*time.Millisecond)
}

// storeFailed answers a request the store could not decide: by the
// failure mode, or with the call's own end if that came first.
func (s *Service) storeFailed(ctx context.Context, err error, domain string, w *work) (*rlsv3.RateLimitResponse, error) {
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	s.errLog.do(func(suppressed int) {
		s.log.Error("rate-limit store failed", "err", err, "domain", domain, "failure_mode", s.failureMode.String(), "suppressed", suppressed)
	})
	if s.failureMode == FailUnavailable {
		return nil, &storeError{err: err}
	}
	s.observer.FailureAnswer(s.failureMode)
	return failureResponse(s.failureMode, w), nil
}

// throttle runs a function at most once a second, telling it how many calls
// it skipped, so a failing store cannot flood the log.
type throttle struct {
	last       atomic.Int64 // Unix nanoseconds of the last run
	suppressed atomic.Int64
}

func (t *throttle) do(f func(suppressed int)) {
	now := time.Now().UnixNano()
	last := t.last.Load()
	if now-last < int64(time.Second) || !t.last.CompareAndSwap(last, now) {
		t.suppressed.Add(1)
		return
	}
	f(int(t.suppressed.Swap(0)))
}

// peekUnanswered asks the store, without charging, for the figures of the
// descriptors the over-limit cache did not answer: the request is rejected
// either way, but each descriptor's status carries its limit and what
// remains, as when the store decides. Descriptors the cache answered need
// no call, so a client hammering one over-limit descriptor costs the store
// nothing. If the store fails, those statuses go without figures.
func (s *Service) peekUnanswered(ctx context.Context, now time.Time, w *work) {
	var peek []int // buckets to ask for
	for i := 0; i+1 < len(w.starts); i++ {
		levels := w.bucketOf[w.starts[i]:w.starts[i+1]]
		if slices.ContainsFunc(levels, func(k int) bool { return k >= 0 && !w.skipped[k] }) {
			continue // answered from the cache
		}
		for _, k := range levels {
			if k >= 0 && !slices.Contains(peek, k) {
				peek = append(peek, k)
			}
		}
	}
	if len(peek) == 0 {
		return
	}
	buckets, results := make([]limit.Bucket, len(peek)), make([]limit.Result, len(peek))
	for n, k := range peek {
		buckets[n] = w.buckets[k]
		buckets[n].Hits = 0
	}
	if err := s.call(ctx, now, StorePeek, buckets, results); err != nil {
		s.log.Debug("rate-limit store failed on a peek for a rejected request's other descriptors", "err", err)
		return
	}
	for n, k := range peek {
		w.results[k], w.skipped[k] = results[n], false
	}
}
