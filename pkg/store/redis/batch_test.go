package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// TestBatchedCallerThatLeaves: a caller whose deadline passes while Redis
// hangs gets its context's error, and its results are never written after
// it has gone (the service reuses them for the next request); callers
// waiting when the store closes are told so.
func TestBatchedCallerThatLeaves(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ReadTimeout: 5 * time.Second})
	s, err := New(Options{Client: c, Batch: 8})
	if err != nil {
		t.Fatal(err)
	}
	l := limit.Limit{Size: 10, DripRate: time.Second, DripSize: 1}
	bucket := []limit.Bucket{{Key: "api|user=a", Limit: l, Hits: 1}}
	results := []limit.Result{{Remaining: -42}}
	if err := s.Apply(context.Background(), time.Now(), bucket, results); err != nil || results[0].Remaining != 9 {
		t.Fatalf("before: %+v, %v", results[0], err)
	}

	srv.Pause()
	results[0] = limit.Result{Remaining: -42}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	err = s.Apply(ctx, time.Now(), bucket, results)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with Redis stopped: %v, want the deadline's error", err)
	}
	srv.Resume()
	time.Sleep(500 * time.Millisecond) // the call, sent or not, has had its answer
	if results[0].Remaining != -42 {
		t.Fatalf("the results were written after the caller left: %+v", results[0])
	}
	// The store goes on: the abandoned request may have charged (a lost
	// reply), so 8 or 7 are left.
	if err := s.Apply(context.Background(), time.Now(), bucket, results); err != nil || results[0].Remaining > 8 || results[0].Remaining < 7 {
		t.Fatalf("after: %+v, %v", results[0], err)
	}

	// Close tells the callers still waiting.
	srv.Pause()
	done := make(chan error, 1)
	go func() { done <- s.Apply(context.Background(), time.Now(), bucket, make([]limit.Result, 1)) }()
	time.Sleep(100 * time.Millisecond)
	go s.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a call during Close succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a caller waited on past Close")
	}
	srv.Resume()
}

// TestBatchWaitGathersRequests sends requests a few milliseconds apart:
// with a batch wait longer than their spread, one script call decides
// them all, each all or nothing and charged; without, each has its own.
func TestBatchWaitGathersRequests(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		wait     time.Duration
		maxCalls int64
	}{{300 * time.Millisecond, 1}, {0, 5}} {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
		s, err := New(Options{Client: c, Batch: 8, BatchWait: tc.wait, Prefix: fmt.Sprintf("w%d:", tc.wait)})
		if err != nil {
			t.Fatal(err)
		}
		l := limit.Limit{Size: 10, DripRate: time.Hour, DripSize: 1}
		// Redis has the script loaded first.
		if err := s.Apply(context.Background(), time.Now(), []limit.Bucket{{Key: "api|user=b", Limit: l, Hits: 1}}, make([]limit.Result, 1)); err != nil {
			t.Fatal(err)
		}
		// Its call is answered before the batcher marks the slot idle: a
		// request sent in between would find the slot busy, and go as soon
		// as it is free, without waiting for the others.
		for s.batch != nil && slotBusy(s.batch) {
			time.Sleep(time.Millisecond)
		}
		before := scriptCalls(t, c)
		errs := make(chan error, 5)
		results := make([][]limit.Result, 5)
		for i := range 5 {
			results[i] = make([]limit.Result, 1)
			go func() {
				errs <- s.Apply(context.Background(), time.Now(), []limit.Bucket{{Key: "api|user=a", Limit: l, Hits: 1}}, results[i])
			}()
			time.Sleep(10 * time.Millisecond)
		}
		for range 5 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		calls := scriptCalls(t, c) - before
		if calls > tc.maxCalls || (tc.wait == 0 && calls < 3) {
			t.Errorf("batch wait %v: %d script calls for 5 requests 10ms apart", tc.wait, calls)
		}
		left := map[int64]bool{}
		for _, r := range results {
			left[r[0].Remaining] = true
		}
		if len(left) != 5 || !left[5] || !left[9] {
			t.Errorf("batch wait %v: remaining %v, want each of 9 down to 5 once: each decided on its own", tc.wait, left)
		}
		s.Close()
	}
}

// scriptCalls returns how many script calls Redis has run.
func scriptCalls(t *testing.T, c *goredis.Client) int64 {
	calls := redistest.CommandCalls(t, c)
	return int64(calls["evalsha"] + calls["eval"])
}

// TestBatchWaitLetsFewCallersGo: the batch wait gathers requests only where
// others come. A lone caller, each request waiting on its answer, waits a
// few times, then its requests go at once (but for a probe in 16); and
// callers that send together after each answer wait only a few of the gaps
// between them. Each would take at least calls times the wait (2 s) if
// every request that found its slot idle waited it out.
func TestBatchWaitLetsFewCallersGo(t *testing.T) {
	srv := redistest.Start(t)
	const wait, calls = 50 * time.Millisecond, 40
	l := limit.Limit{Size: 1 << 30, DripRate: time.Hour, DripSize: 1}
	for _, callers := range []int{1, 8} {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
		s, err := New(Options{Client: c, Batch: 64, BatchWait: wait, Prefix: fmt.Sprintf("few%d:", callers)})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		errs := make(chan error, callers)
		for w := range callers {
			go func() {
				for i := range calls {
					key := fmt.Sprintf("api|user=c%d-%d", w, i)
					if err := s.Apply(context.Background(), time.Now(), []limit.Bucket{{Key: key, Limit: l, Hits: 1}}, make([]limit.Result, 1)); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for range callers {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		took := time.Since(start)
		s.Close()
		t.Logf("%d callers, %d requests each, batch wait %s: %s", callers, calls, wait, took.Round(time.Millisecond))
		if took > calls*wait/2 {
			t.Errorf("%d callers: %s for %d requests each, most of them waiting out the batch wait", callers, took.Round(time.Millisecond), calls)
		}
	}
}

// slotBusy reports whether a slot has a call out.
func slotBusy(b *batcher) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.busy) > 0
}

// TestBatchPaceSpacesCalls: with a pace, a slot's calls go at least that
// far apart while several callers send, each call gathering what came
// meanwhile, every request still decided on its own; a lone caller,
// each request waiting on its answer, is paced only until its waits show
// it alone.
func TestBatchPaceSpacesCalls(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	const pace = 100 * time.Millisecond
	s, err := New(Options{Client: c, Batch: 32, BatchWait: 5 * time.Millisecond, BatchPace: pace, Prefix: "pace:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	l := limit.Limit{Size: 1000, DripRate: time.Hour, DripSize: 1}
	if err := s.Apply(ctx, time.Now(), []limit.Bucket{{Key: "api|user=warm", Limit: l, Hits: 1}}, make([]limit.Result, 1)); err != nil {
		t.Fatal(err)
	}

	before, begin := scriptCalls(t, c), time.Now()
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for caller := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(begin) < time.Second {
				r := make([]limit.Result, 1)
				if err := s.Apply(ctx, time.Now(), []limit.Bucket{{Key: fmt.Sprintf("api|user=c%d", caller), Limit: l, Hits: 1}}, r); err != nil {
					t.Error(err)
					return
				}
				if r[0].Admitted {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(begin)
	calls := scriptCalls(t, c) - before
	if most := int64(took/pace) + 2; calls > most {
		t.Errorf("8 callers for %v: %d script calls, want at most %d, %v apart", took.Round(time.Millisecond), calls, most, pace)
	}
	if admitted.Load() < 8 {
		t.Errorf("%d requests admitted, want each caller's", admitted.Load())
	}
	left, err := c.Exists(ctx, redisKey(s.keyPrefix, "api|user=c0")).Result()
	if err != nil || left != 1 {
		t.Errorf("a caller's bucket is not stored (%d, %v)", left, err)
	}

	// A lone caller: 30 requests in turn would take 3 s if each were paced.
	time.Sleep(pace)
	begin = time.Now()
	for i := range 30 {
		if err := s.Apply(ctx, time.Now(), []limit.Bucket{{Key: fmt.Sprintf("api|user=lone%d", i), Limit: l, Hits: 1}}, make([]limit.Result, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(begin); took > 15*pace {
		t.Errorf("a lone caller's 30 requests took %v, want them paced only until it is seen alone", took)
	}
}

// TestBatchPaceNeedsWait: a pace without a batch wait is refused.
func TestBatchPaceNeedsWait(t *testing.T) {
	if _, err := New(Options{Client: goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}), Batch: 8, BatchPace: time.Millisecond}); err == nil || !strings.Contains(err.Error(), "batch wait") {
		t.Errorf("a pace without a wait: %v, want an error naming the batch wait", err)
	}
}

// TestAnsweredAsCallEnds: a lease part answered just as its caller's
// context ends is the caller's: Redis charged what it granted, and the
// caller must hold it, not take the call for failed.
func TestAnsweredAsCallEnds(t *testing.T) {
	for i := range 200 {
		ctx, cancel := context.WithCancel(context.Background())
		dst := []Lease{{Key: "a", Ask: 3}}
		q := &queued{ctx: ctx, leases: []Lease{{Key: "a", Ask: 3, Granted: 3}}, leaseDst: dst, answer: make(chan error, 1)}
		q.reply(nil)
		cancel() // both ready: the select may see either first
		if err := q.wait(); err != nil || dst[0].Granted != 3 {
			t.Fatalf("try %d: %v, granted %d: the answer lost to the context's end", i, err, dst[0].Granted)
		}
	}
}
