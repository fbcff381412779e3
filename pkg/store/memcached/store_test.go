package memcached

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/memcachedtest"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
	"github.com/envoy-rls/envoy-rls/pkg/store/storetest"
)

// stores counts the stores made on one server: each gets a prefix of its
// own, so that each subtest starts empty.
var stores atomic.Int64

func newStore(t *testing.T, srv *memcachedtest.Server, opts Options) *Store {
	t.Helper()
	opts.Addrs = []string{srv.Addr()}
	if opts.Prefix == "" {
		opts.Prefix = "t" + strconv.FormatInt(stores.Add(1), 10) + ":"
	}
	opts.MaxIdleConns = 256
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	srv := memcachedtest.Start(t)
	storetest.Run(t, func(t *testing.T) storetest.Store { return newStore(t, srv, Options{}) })
}

func TestInspect(t *testing.T) {
	srv := memcachedtest.Start(t)
	storetest.RunInspect(t, func(t *testing.T) storetest.Inspector { return newStore(t, srv, Options{}) })
}

// TestAnswersAsMemory runs random requests over buckets of every layout
// (reference counters of fixed windows, the store's own keys for the
// rest) against this store and the memory store: every answer must be
// the same.
func TestAnswersAsMemory(t *testing.T) {
	srv := memcachedtest.Start(t)
	for _, own := range []bool{false, true} {
		t.Run(fmt.Sprintf("OwnKeys=%v", own), func(t *testing.T) {
			mc := newStore(t, srv, Options{OwnKeys: own})
			mem, err := memory.New(memory.Options{SweepInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer mem.Close()
			pool := []limit.Bucket{
				{Key: "api|user=a|#fw1m", Limit: storetest.Fixed(4, time.Minute)},
				{Key: "api|user=a|action=x|#fw1s", Limit: storetest.Fixed(2, time.Second)},
				{Key: "api|user=a|action=x|#3/hour/fw", Limit: storetest.Fixed(3, time.Hour)},
				{Key: "api|user=a", Limit: limit.Limit{Size: 5, DripRate: 700 * time.Millisecond, DripSize: 1}},
				{Key: "api|user=b|#sw10s/1s", Limit: storetest.Sliding(6, 10*time.Second, time.Second)},
				{Key: "api|path=/a b|#fw1m", Limit: storetest.Fixed(3, time.Minute)}, // a space: hashed
			}
			admitted, rejected := 0, 0
			rng := rand.New(rand.NewPCG(7, 11))
			now := storetest.T0
			for step := range 400 {
				now = now.Add(time.Duration(rng.IntN(900)) * time.Millisecond)
				var req []limit.Bucket
				for _, i := range rng.Perm(len(pool))[:1+rng.IntN(3)] {
					b := pool[i]
					b.Hits = int64(rng.IntN(4)) - 1 // refunds and peeks too
					b.Always = rng.IntN(4) == 0
					b.Shadow = rng.IntN(8) == 0
					req = append(req, b)
				}
				got := make([]limit.Result, len(req))
				want := make([]limit.Result, len(req))
				if err := mc.Apply(context.Background(), now, req, got); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				if err := mem.Apply(context.Background(), now, req, want); err != nil {
					t.Fatal(err)
				}
				for i := range req {
					g, w := got[i], want[i]
					if g.Admitted {
						admitted++
					} else {
						rejected++
					}
					if g.Admitted != w.Admitted || g.Remaining != w.Remaining || g.Reset != w.Reset || g.Clear != w.Clear {
						t.Fatalf("step %d (T0+%s), bucket %q hits %d: got %+v, want %+v", step, now.Sub(storetest.T0), req[i].Key, req[i].Hits, g, w)
					}
				}
			}
			if admitted < 100 || rejected < 100 {
				t.Fatalf("%d buckets admitted and %d rejected: the run does not test both", admitted, rejected)
			}
		})
	}
}

// TestMixedRequestsStayExact has requests of one bucket race requests of
// two that share it: the requests of one bucket, which take no lock, must
// never slip a charge between a request of two's read and its writes.
func TestMixedRequestsStayExact(t *testing.T) {
	srv := memcachedtest.Start(t)
	s := newStore(t, srv, Options{})
	user := limit.Limit{Size: 60, DripRate: time.Hour, DripSize: 1}
	trade := storetest.Fixed(15, time.Hour)
	var alone, both atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := []limit.Bucket{{Key: "api|user=a", Limit: user, Hits: 1}}
			if i%2 == 1 {
				req = append(req, limit.Bucket{Key: "api|user=a|action=trade|#fw1h", Limit: trade, Hits: 1})
			}
			res := make([]limit.Result, len(req))
			if err := s.Apply(context.Background(), storetest.T0, req, res); err != nil {
				t.Error(err)
				return
			}
			for _, r := range res {
				if !r.Admitted {
					return
				}
			}
			if len(req) == 1 {
				alone.Add(1)
			} else {
				both.Add(1)
			}
		}()
	}
	wg.Wait()
	if both.Load() > 15 || alone.Load()+both.Load() != 60 {
		t.Fatalf("admitted %d alone and %d with the trade bucket, want at most 15 trades and 60 in all", alone.Load(), both.Load())
	}
	res := make([]limit.Result, 2)
	peek := []limit.Bucket{{Key: "api|user=a", Limit: user}, {Key: "api|user=a|action=trade|#fw1h", Limit: trade}}
	if err := s.Apply(context.Background(), storetest.T0, peek, res); err != nil {
		t.Fatal(err)
	}
	// Rejected requests charged nothing: each bucket holds exactly what
	// was admitted.
	if res[0].Clear != 60*time.Hour || res[1].Remaining != 15-both.Load() {
		t.Fatalf("after the run: %+v, want the user bucket holding exactly 60 and the trade bucket %d", res, both.Load())
	}
}

// TestDeadlineHonoured: a memcached that accepts and never answers makes
// Apply fail by the call's deadline, not the client's timeouts.
func TestDeadlineHonoured(t *testing.T) {
	srv := memcachedtest.New(t)
	srv.Restart()
	s := newStore(t, srv, Options{Timeout: 5 * time.Second})
	l := limit.Limit{Size: 5, DripRate: time.Second, DripSize: 1}
	res := make([]limit.Result, 1)
	if err := s.Apply(context.Background(), storetest.T0, []limit.Bucket{{Key: "k", Limit: l, Hits: 1}}, res); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	begin := time.Now()
	err := s.Apply(ctx, storetest.T0, []limit.Bucket{{Key: "k", Limit: l, Hits: 1}}, res)
	if err == nil || time.Since(begin) > 500*time.Millisecond {
		t.Fatalf("Apply on a hung memcached: %v after %s, want an error within the 50ms deadline", err, time.Since(begin))
	}
}

// TestServerDown: a stopped memcached is an error, never a decision.
func TestServerDown(t *testing.T) {
	srv := memcachedtest.New(t)
	s := newStore(t, srv, Options{})
	l := limit.Limit{Size: 5, DripRate: time.Second, DripSize: 1}
	res := make([]limit.Result, 2)
	for _, n := range []int{1, 2} {
		req := []limit.Bucket{{Key: "a", Limit: l, Hits: 1}, {Key: "b", Limit: l, Hits: 1}}[:n]
		if err := s.Apply(context.Background(), storetest.T0, req, res); err == nil {
			t.Fatalf("%d buckets on a stopped memcached: no error", n)
		}
	}
	if err := s.Check(context.Background()); err == nil {
		t.Fatal("Check of a stopped memcached: no error")
	}
	srv.Restart()
	if err := s.Check(context.Background()); err != nil {
		t.Fatalf("Check after a restart: %v", err)
	}
}

func TestOptionsChecked(t *testing.T) {
	for _, o := range []Options{
		{},
		{Addrs: []string{"a:1"}, SRV: "_m._tcp.example"},
		{SRV: "memcached.example"},
		{Addrs: []string{"no-port"}},
		{Addrs: []string{"a:1"}, Prefix: "has space"},
		{Addrs: []string{"a:1"}, CAFile: "ca.pem"},
		{Addrs: []string{"a:1"}, TLS: true, CertFile: "c.pem"},
		{Addrs: []string{"a:1"}, ExpirationJitter: -time.Second},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v): no error", o)
		}
	}
}
