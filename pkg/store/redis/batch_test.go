package redis

import (
	"context"
	"errors"
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
