package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// TestLeaseScriptMatchesLease runs random buckets of every algorithm,
// states, units given back and asked for through the lease script on a
// real Redis and through limit.Lease, and wants the same grants and stored
// states that decide alike: by LeaseAll, and by LeaseBatched through the
// store's batcher.
func TestLeaseScriptMatchesLease(t *testing.T) {
	srv := redistest.Start(t)
	for _, batched := range []bool{false, true} {
		name := "LeaseAll"
		if batched {
			name = "LeaseBatched"
		}
		t.Run(name, func(t *testing.T) { leaseMatchesLease(t, srv.Addr(), batched) })
	}
}

func leaseMatchesLease(t *testing.T, addr string, batched bool) {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	o := Options{Client: c, CallerClock: true, Prefix: "lparity:"}
	if batched {
		o.Batch, o.BatchWait, o.Prefix = DefaultBatch, time.Millisecond, "lbatched:"
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	for round := range 300 {
		now := time.UnixMicro(1_760_000_000_000_000 + rng.Int64N(1e12))
		s.refSkew = randomSkew(rng)
		leases := make([]Lease, 1+rng.IntN(8))
		states := make([]limit.State, len(leases))
		for i := range leases {
			l := randomLimit(rng)
			if rng.IntN(2) == 0 {
				l = randomWindow(rng)
			}
			at := now.Add(-time.Duration(rng.Int64N(int64(2 * time.Minute))))
			leases[i] = Lease{Key: fmt.Sprintf("l|r=%d|b=%d", round, i), Limit: l,
				Return: pick(rng, 0, 0, 1, 3, l.Size, -1), At: at.UnixMicro(), Ask: pick(rng, 0, 1, 2, 10, l.Size, l.Size+1, -1)}
			var stored string
			switch l.Algorithm {
			case limit.SlidingWindow:
				stored = encodeWindow(randomSlidingState(rng, l, now))
			case limit.FixedWindow:
				stored = encodeState(randomFixedState(rng, l, now, s.refSkew))
			default:
				stored = encodeState(randomState(rng, l, now))
			}
			if rng.IntN(6) == 0 {
				stored = ""
			}
			if stored != "" {
				if err := c.Set(ctx, redisKey(s.keyPrefix, leases[i].Key), stored, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
				states[i] = decodeAs(l, stored)
			}
		}
		if batched {
			_, _, err = s.LeaseBatched(ctx, now, leases)
		} else {
			_, err = s.LeaseAll(ctx, now, leases)
		}
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i, ls := range leases {
			st := states[i]
			st.Counts = slices.Clone(st.Counts)
			granted, want := limit.Lease(st, ls.Limit, now, ls.Return, time.UnixMicro(ls.At), ls.Ask)
			if ls.Granted != granted {
				t.Fatalf("round %d bucket %d (%v, state %+v, return %d at %d, ask %d): granted %d, want %d",
					round, i, ls.Limit, states[i], ls.Return, ls.At, ls.Ask, ls.Granted, granted)
			}
			one := limit.Decide(limit.State{Counter: want.State.Counter, Timestamp: want.State.Timestamp, Counts: slices.Clone(want.State.Counts)}, ls.Limit, now, 1)
			if ls.Wait != one.Reset {
				t.Fatalf("round %d bucket %d (%v, state %+v, return %d, ask %d): room for one more in %v, want %v",
					round, i, ls.Limit, states[i], ls.Return, ls.Ask, ls.Wait, one.Reset)
			}
			if ls.Limit.Algorithm == limit.LeakyBucket && !ls.State.Equal(want.State) {
				t.Fatalf("round %d bucket %d: state %+v, want %+v", round, i, ls.State, want.State)
			}
			v, err := c.Get(ctx, redisKey(s.keyPrefix, ls.Key)).Result()
			if err != nil && err != goredis.Nil {
				t.Fatal(err)
			}
			if err == goredis.Nil && want.TTL < time.Second {
				continue // a state of a few milliseconds may have expired already
			}
			got := decodeAs(ls.Limit, v)
			if ls.Return <= 0 && granted == 0 {
				// Nothing given back or granted: left as it was.
				if !sameStored(got, states[i]) {
					t.Fatalf("round %d bucket %d: unchanged bucket holds %+v, want %+v", round, i, got, states[i])
				}
				continue
			}
			// What Redis holds must decide as Go's state does.
			for _, hits := range []int64{0, 1, ls.Limit.Size} {
				a := limit.Decide(limit.State{Counter: got.Counter, Timestamp: got.Timestamp, Counts: slices.Clone(got.Counts)}, ls.Limit, now, hits)
				b := limit.Decide(limit.State{Counter: want.State.Counter, Timestamp: want.State.Timestamp, Counts: slices.Clone(want.State.Counts)}, ls.Limit, now, hits)
				if a.Admitted != b.Admitted || a.Remaining != b.Remaining || a.Reset != b.Reset {
					t.Fatalf("round %d bucket %d (%v, state %+v, return %d, ask %d): stored %+v decides %+v for %d hits; Go's %+v decides %+v",
						round, i, ls.Limit, states[i], ls.Return, ls.Ask, got, a, hits, want.State, b)
				}
			}
		}
	}
}

func TestLeaseNeedsScriptMode(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	s, err := New(Options{Client: c, Mode: TransactionsMode})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.LeaseAll(context.Background(), time.Now(), []Lease{{Key: "a", Ask: 1}}); err == nil {
		t.Fatal("a lease in transactions mode: no error")
	}
}

// TestLeasesGoWithRequests: within a batch wait, a request and two
// callers' leases for its slot go together, one decide call and one lease
// call, the decide call first: the lease on the request's bucket sees its
// charge.
func TestLeasesGoWithRequests(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	s, err := New(Options{Client: c, Batch: 8, BatchWait: 300 * time.Millisecond, Prefix: "lwith:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	l := limit.Limit{Size: 10, DripRate: time.Hour, DripSize: 1}
	// Redis has both scripts loaded first.
	if err := s.Apply(ctx, time.Now(), []limit.Bucket{{Key: "api|user=z", Limit: l, Hits: 1}}, make([]limit.Result, 1)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.LeaseBatched(ctx, time.Now(), []Lease{{Key: "api|user=z", Limit: l, Ask: 1}}); err != nil {
		t.Fatal(err)
	}
	for slotBusy(s.batch) {
		time.Sleep(time.Millisecond)
	}
	before := scriptCalls(t, c)
	results := make([]limit.Result, 1)
	leases := [][]Lease{{{Key: "api|user=a", Limit: l, Ask: 3}}, {{Key: "api|user=b", Limit: l, Ask: 5}}}
	errs := make(chan error, 3)
	go func() {
		errs <- s.Apply(ctx, time.Now(), []limit.Bucket{{Key: "api|user=a", Limit: l, Hits: 4}}, results)
	}()
	sent := make([]time.Time, 2)
	for i := range leases {
		time.Sleep(10 * time.Millisecond)
		go func() {
			var err error
			_, sent[i], err = s.LeaseBatched(ctx, time.Now(), leases[i])
			errs <- err
		}()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if calls := scriptCalls(t, c) - before; calls != 2 {
		t.Errorf("%d script calls for a request and two leases in one batch wait, want 2", calls)
	}
	if !sent[0].Equal(sent[1]) || sent[0].IsZero() {
		t.Errorf("the leases' calls were sent at %v and %v, want one call", sent[0], sent[1])
	}
	if !results[0].Admitted || results[0].Remaining != 6 {
		t.Errorf("request: %+v, want admitted with 6 left", results[0])
	}
	a, b := leases[0][0], leases[1][0]
	if a.Err != nil || a.Granted != 3 || a.State.Counter != 7 {
		t.Errorf("lease after the request on its bucket: granted %d, counter %d (%v), want 3 granted on the 4 charged", a.Granted, a.State.Counter, a.Err)
	}
	if b.Err != nil || b.Granted != 5 || b.State.Counter != 5 || b.Now == 0 {
		t.Errorf("lease of a bucket of its own: %+v, want 5 granted", b)
	}
}
