package memory

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/storetest"
)

func newStore(t *testing.T, opts Options) *Store {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Store { return newStore(t, Options{}) })
}

func TestConformanceOneShard(t *testing.T) {
	// Every bucket of a request in one shard: the lock set has one member.
	storetest.Run(t, func(t *testing.T) storetest.Store { return newStore(t, Options{Shards: 1}) })
}

func TestInspect(t *testing.T) {
	storetest.RunInspect(t, func(t *testing.T) storetest.Inspector { return newStore(t, Options{}) })
}

var t0 = storetest.T0

func charge(t *testing.T, s *Store, now time.Time, key string, l limit.Limit) limit.Result {
	t.Helper()
	r := make([]limit.Result, 1)
	if err := s.Apply(context.Background(), now, []limit.Bucket{{Key: key, Limit: l, Hits: 1}}, r); err != nil {
		t.Fatal(err)
	}
	return r[0]
}

func TestBucketCountIsBounded(t *testing.T) {
	s := newStore(t, Options{MaxBuckets: 64, Shards: 4, SweepInterval: -1})
	l := limit.Limit{Size: 5, DripRate: time.Hour, DripSize: 1}
	for i := range 10000 {
		charge(t, s, t0, fmt.Sprintf("flood|v=%d", i), l)
	}
	if n := s.Len(); n > 64 {
		t.Fatalf("store holds %d buckets, want at most 64", n)
	}
	if s.Evictions() == 0 {
		t.Fatal("no eviction counted although the flood overflowed the store")
	}
}

func TestEvictionPrefersBucketsNearEmpty(t *testing.T) {
	s := newStore(t, Options{MaxBuckets: 8, Shards: 1, SweepInterval: -1})
	l := limit.Limit{Size: 100, DripRate: time.Second, DripSize: 1}
	// A heavy user fills its bucket: it expires last.
	for range 100 {
		charge(t, s, t0, "heavy", l)
	}
	for i := range 1000 {
		charge(t, s, t0, fmt.Sprintf("flood|v=%d", i), l)
	}
	if r := charge(t, s, t0, "heavy", l); r.Admitted {
		t.Fatal("the heavy bucket was evicted by a flood of fresh ones: its 101st request passed")
	}
}

func TestSweepRemovesExpiredBuckets(t *testing.T) {
	s := newStore(t, Options{SweepInterval: -1})
	l := limit.Limit{Size: 5, DripRate: time.Second, DripSize: 1}
	charge(t, s, t0, "a", l)                     // expires at t0+2s
	charge(t, s, t0.Add(10*time.Second), "b", l) // expires at t0+12s
	if n := s.Sweep(t0.Add(2 * time.Second)); n != 1 {
		t.Fatalf("Sweep removed %d buckets, want 1", n)
	}
	if n := s.Len(); n != 1 {
		t.Fatalf("store holds %d buckets after the sweep, want 1", n)
	}
}

func TestSweeperRunsInBackground(t *testing.T) {
	now := t0
	clock := func() time.Time { return now.Add(time.Hour) }
	s := newStore(t, Options{SweepInterval: time.Millisecond, Clock: clock})
	charge(t, s, now, "a", limit.Limit{Size: 5, DripRate: time.Second, DripSize: 1})
	deadline := time.Now().Add(5 * time.Second)
	for s.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the sweeper did not remove the expired bucket within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestEmptyBucketsAreNotKept(t *testing.T) {
	s := newStore(t, Options{SweepInterval: -1})
	l := limit.Limit{Size: 5, DripRate: time.Second, DripSize: 1}
	r := make([]limit.Result, 1)
	// A peek at a bucket that does not exist stores nothing.
	if err := s.Apply(context.Background(), t0, []limit.Bucket{{Key: "a", Limit: l}}, r); err != nil {
		t.Fatal(err)
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("a peek stored %d buckets", n)
	}
}

func TestClosedStoreFails(t *testing.T) {
	s := newStore(t, Options{})
	s.Close()
	r := make([]limit.Result, 1)
	if err := s.Apply(context.Background(), t0, []limit.Bucket{{Key: "a", Limit: limit.Limit{Size: 1, DripRate: time.Second, DripSize: 1}, Hits: 1}}, r); err != ErrClosed {
		t.Fatalf("Apply after Close: got %v, want ErrClosed", err)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, o := range []Options{{MaxBuckets: -1}, {MaxBytes: -1}, {Shards: -3}} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
}
