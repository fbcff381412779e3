package redis

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/storetest"
)

// newSplit returns a store on first with a per-second Redis on second,
// closed with the test; o gives the other options.
func newSplit(t *testing.T, first, second ClientOptions, o Options) *Store {
	t.Helper()
	o.Connect, o.PerSecond = &first, &Server{Connect: &second, Pipeline: o.Pipeline}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// splitModes are the ways a split store calls Redis.
var splitModes = map[string]Options{
	"script":       {},
	"batched":      {Batch: DefaultBatch, Pipeline: DefaultPipeline},
	"transactions": {Mode: TransactionsMode},
}

// marked has the suites' buckets, which name no unit, spread over both
// servers of a split store: a key whose last byte is odd is counted per
// second. A key keeps its server, and a hierarchy ("u", "u|t") spans both.
type marked struct{ *Store }

func mark(buckets []limit.Bucket) []limit.Bucket {
	out := slices.Clone(buckets)
	for i := range out {
		k := out[i].Key
		out[i].SecondUnit = k != "" && k[len(k)-1]%2 == 1
	}
	return out
}

func (m marked) Apply(ctx context.Context, now time.Time, buckets []limit.Bucket, results []limit.Result) error {
	return m.Store.Apply(ctx, now, mark(buckets), results)
}

func (m marked) State(ctx context.Context, now time.Time, buckets []limit.Bucket, states []limit.State) (time.Time, error) {
	return m.Store.State(ctx, now, mark(buckets), states)
}

func TestMarkedSpansBothServers(t *testing.T) {
	b := mark([]limit.Bucket{{Key: "u"}, {Key: "u|t"}})
	if !b[0].SecondUnit || b[1].SecondUnit {
		t.Fatalf("the suites' hierarchy u, u|t does not span both servers: %+v", b)
	}
}

// TestPerSecondConformance: a store split over two Redis servers passes
// the conformance suite and the suite of State and Reset, in every mode,
// with its buckets spread over both.
func TestPerSecondConformance(t *testing.T) {
	first, second := redistest.Start(t), redistest.Start(t)
	n := 0
	for name, o := range splitModes {
		t.Run(name, func(t *testing.T) {
			newStore := func(t *testing.T) marked {
				n++
				o := o
				o.CallerClock, o.Prefix = true, fmt.Sprintf("split%d:", n)
				return marked{newSplit(t, ClientOptions{URL: first.URL()}, ClientOptions{URL: second.URL()}, o)}
			}
			storetest.Run(t, func(t *testing.T) storetest.Store { return newStore(t) })
			storetest.RunInspect(t, func(t *testing.T) storetest.Inspector { return newStore(t) })
		})
	}
}

// TestPerSecondOnACluster: the per-second Redis may be a Cluster (and the
// first a single Redis): the suite passes with requests split by server
// and, on the Cluster, by slot.
func TestPerSecondOnACluster(t *testing.T) {
	first, cluster := redistest.Start(t), redistest.StartCluster(t)
	n := 0
	storetest.Run(t, func(t *testing.T) storetest.Store {
		n++
		return marked{newSplit(t, ClientOptions{URL: first.URL()}, ClientOptions{URL: cluster.URL(), Cluster: true},
			Options{CallerClock: true, Prefix: fmt.Sprintf("splitc%d:", n), Batch: DefaultBatch})}
	})
}

// keysOn returns the keys Redis holds.
func keysOn(t *testing.T, c *goredis.Client) []string {
	t.Helper()
	keys, err := c.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

// TestPerSecondKeysLandOnTheirServer: the buckets of per-second limits are
// kept on the per-second Redis and the others on the first, by Apply, by
// leases, by State; Reset clears them on both.
func TestPerSecondKeysLandOnTheirServer(t *testing.T) {
	first, second := redistest.Start(t), redistest.Start(t)
	c1, c2 := first.Client(t), second.Client(t)
	minute := limit.Limit{Size: 100, DripRate: 600 * time.Millisecond, DripSize: 1}
	// Marked per second (SecondUnit routes it), but counted over an hour:
	// a window of a second could end, and its key go, before it is looked at.
	perSecond := limit.Limit{Algorithm: limit.FixedWindow, Size: 10, Window: time.Hour}
	for name, o := range splitModes {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c1.FlushAll(ctx)
			c2.FlushAll(ctx)
			o.Prefix = "land:"
			s := newSplit(t, ClientOptions{URL: first.URL()}, ClientOptions{URL: second.URL()}, o)
			buckets := []limit.Bucket{
				{Key: "api|user=alice", Limit: minute, Hits: 1},
				{Key: "api|user=alice|#fw1s", Limit: perSecond, Hits: 1, SecondUnit: true},
			}
			if err := s.Apply(ctx, time.Now(), buckets, make([]limit.Result, 2)); err != nil {
				t.Fatal(err)
			}
			keys := s.keys(buckets)
			if got := keysOn(t, c1); !slices.Equal(got, keys[:1]) {
				t.Errorf("the first Redis holds %q, want the minute limit's %q", got, keys[:1])
			}
			if got := keysOn(t, c2); !slices.Equal(got, keys[1:]) {
				t.Errorf("the per-second Redis holds %q, want the per-second limit's %q", got, keys[1:])
			}
			states := make([]limit.State, 2)
			if _, err := s.State(ctx, time.Now(), buckets, states); err != nil {
				t.Fatal(err)
			}
			if states[0].Counter == 0 || states[1].Counter != 1 {
				t.Errorf("State read %+v: each bucket charged once, on its server", states)
			}
			if o.Mode == ScriptMode {
				leases := []Lease{{Key: "api|user=bob", Limit: minute, Ask: 5}, {Key: "api|user=bob|#fw1s", Limit: perSecond, SecondUnit: true, Ask: 5}}
				if _, err := s.LeaseAll(ctx, time.Now(), leases); err != nil {
					t.Fatal(err)
				}
				if leases[0].Granted != 5 || leases[1].Granted != 5 {
					t.Errorf("leases granted %d and %d, want 5 each", leases[0].Granted, leases[1].Granted)
				}
				bob := s.keys([]limit.Bucket{{Key: leases[0].Key}, {Key: leases[1].Key}})
				if n, _ := c1.Exists(ctx, bob[0]).Result(); n != 1 {
					t.Errorf("the minute limit's lease is not on the first Redis")
				}
				if n, _ := c2.Exists(ctx, bob[1]).Result(); n != 1 {
					t.Errorf("the per-second limit's lease is not on the per-second Redis")
				}
				if n, _ := c1.Exists(ctx, bob[1]).Result(); n != 0 {
					t.Errorf("the per-second limit's lease is on the first Redis")
				}
			}
			if err := s.Reset(ctx, []string{buckets[0].Key, buckets[1].Key}); err != nil {
				t.Fatal(err)
			}
			for _, c := range []*goredis.Client{c1, c2} {
				for _, k := range keys {
					if n, _ := c.Exists(ctx, k).Result(); n != 0 {
						t.Errorf("%s is left after Reset", k)
					}
				}
			}
		})
	}
}

// TestPerSecondAllOrNothing: a request with buckets on both servers is
// admitted on both or charged on neither: refused on one, what the other
// charged is undone; a bucket that charges always stays charged.
func TestPerSecondAllOrNothing(t *testing.T) {
	first, second := redistest.Start(t), redistest.Start(t)
	one := limit.Limit{Size: 1, DripRate: time.Hour, DripSize: 1}
	ten := limit.Limit{Size: 10, DripRate: time.Hour, DripSize: 1}
	tenFixed := limit.Limit{Algorithm: limit.FixedWindow, Size: 10, Window: time.Hour}
	tenSliding := limit.Limit{Algorithm: limit.SlidingWindow, Size: 10, Window: time.Hour, Resolution: 6 * time.Minute}
	for name, o := range splitModes {
		for _, full := range []string{"first", "per-second"} {
			t.Run(name+"/refused on the "+full, func(t *testing.T) {
				ctx := context.Background()
				o.Prefix, o.CallerClock = fmt.Sprintf("aon-%s-%s:", name, full), true
				s := newSplit(t, ClientOptions{URL: first.URL()}, ClientOptions{URL: second.URL()}, o)
				fullOnSecond := full == "per-second"
				now := time.UnixMicro(1_760_000_000_000_000)
				gate := limit.Bucket{Key: "g|gate", Limit: one, Hits: 1, SecondUnit: fullOnSecond}
				if err := s.Apply(ctx, now, []limit.Bucket{gate}, make([]limit.Result, 1)); err != nil {
					t.Fatal(err)
				}
				other := !fullOnSecond
				req := []limit.Bucket{
					gate,
					{Key: "g|leaky", Limit: ten, Hits: 2, SecondUnit: other},
					{Key: "g|fixed", Limit: tenFixed, Hits: 2, SecondUnit: other},
					{Key: "g|sliding", Limit: tenSliding, Hits: 2, SecondUnit: other},
					{Key: "g|tokens", Limit: ten, Hits: 3, SecondUnit: other, Always: true},
				}
				results := make([]limit.Result, len(req))
				if err := s.Apply(ctx, now, req, results); err != nil {
					t.Fatal(err)
				}
				if results[0].Admitted {
					t.Fatal("the full gate admitted")
				}
				states := make([]limit.State, len(req))
				if _, err := s.State(ctx, now, req, states); err != nil {
					t.Fatal(err)
				}
				for i, b := range req[1:] {
					r := limit.Decide(states[i+1], b.Limit, now, 0)
					want := b.Limit.Size
					if b.Always {
						want -= b.Hits
					}
					if r.Remaining != want {
						t.Errorf("%s, on the other server: %d remaining after a refused request, want %d", b.Key, r.Remaining, want)
					}
				}
				// With room on both, both are charged.
				req[0] = limit.Bucket{Key: "g|open", Limit: ten, Hits: 1, SecondUnit: fullOnSecond}
				if err := s.Apply(ctx, now, req, results); err != nil {
					t.Fatal(err)
				}
				for i, r := range results {
					if !r.Admitted {
						t.Errorf("%s refused with room on both servers", req[i].Key)
					}
				}
			})
		}
	}
}

// TestPerSecondServerDown: with the per-second Redis down, a request with
// buckets on both fails and charges nothing on the first; one with none
// there is decided as before; Check names the server that fails.
func TestPerSecondServerDown(t *testing.T) {
	first, second := redistest.Start(t), redistest.New(t)
	second.Restart()
	ctx := context.Background()
	s := newSplit(t, ClientOptions{URL: first.URL()}, ClientOptions{URL: second.URL(), DialTimeout: 200 * time.Millisecond},
		Options{Prefix: "down:", CallerClock: true})
	ten := limit.Limit{Size: 10, DripRate: time.Hour, DripSize: 1}
	now := time.UnixMicro(1_760_000_000_000_000)
	if err := s.Check(ctx); err != nil {
		t.Fatalf("both up: %v", err)
	}
	second.Stop()
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := s.Check(cctx); err == nil || !strings.Contains(err.Error(), perSecondName) {
		t.Fatalf("Check with the per-second Redis down: %v, want an error naming it", err)
	}
	req := []limit.Bucket{{Key: "d|minute", Limit: ten, Hits: 4}, {Key: "d|second", Limit: ten, Hits: 1, SecondUnit: true}}
	if err := s.Apply(cctx, now, req, make([]limit.Result, 2)); err == nil {
		t.Fatal("a request on a Redis that is down did not fail")
	}
	states := make([]limit.State, 1)
	if _, err := s.State(ctx, now, req[:1], states); err != nil {
		t.Fatal(err)
	}
	if r := limit.Decide(states[0], ten, now, 0); r.Remaining != 10 {
		t.Errorf("the first Redis's bucket has %d remaining after a failed request, want 10: its charge is undone", r.Remaining)
	}
	if err := s.Apply(ctx, now, req[:1], make([]limit.Result, 1)); err != nil {
		t.Errorf("a request with no per-second limit, the per-second Redis down: %v", err)
	}

	// The other way round: the per-second Redis decides first, and
	// charges; the first Redis is down, so the request fails, and the
	// per-second charge is undone.
	second.Restart()
	first.Stop()
	dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
	defer dcancel()
	if err := s.Apply(dctx, now, req, make([]limit.Result, 2)); err == nil {
		t.Fatal("a request on both, the first Redis down, did not fail")
	}
	if _, err := s.State(ctx, now, req[1:], states); err != nil {
		t.Fatal(err)
	}
	if r := limit.Decide(states[0], ten, now, 0); r.Remaining != 10 {
		t.Errorf("the per-second Redis's bucket has %d remaining after a request the first Redis failed, want 10: its charge is undone", r.Remaining)
	}
}

// TestPerSecondSentinel: the per-second Redis may be reached through
// Sentinel: its buckets land on the master the sentinels name.
func TestPerSecondSentinel(t *testing.T) {
	first, master := redistest.Start(t), redistest.Start(t)
	sentinel := redistest.StartSentinel(t, master, "persecond")
	ctx := context.Background()
	s := newSplit(t, ClientOptions{URL: first.URL()}, ClientOptions{URL: "redis://ignored:1/0", SentinelMaster: "persecond", SentinelAddrs: []string{sentinel}},
		Options{Prefix: "sentinel:"})
	b := []limit.Bucket{{Key: "s|a", Limit: limit.Limit{Size: 5, DripRate: time.Second, DripSize: 1}, Hits: 1, SecondUnit: true}}
	if err := s.Apply(ctx, time.Now(), b, make([]limit.Result, 1)); err != nil {
		t.Fatal(err)
	}
	if got := keysOn(t, master.Client(t)); !slices.Equal(got, s.keys(b)) {
		t.Errorf("the master behind the sentinel holds %q, want %q", got, s.keys(b))
	}
	if got := keysOn(t, first.Client(t)); len(got) != 0 {
		t.Errorf("the first Redis holds %q, want nothing", got)
	}
}

// TestPerSecondRegistryAndResets: with a per-second Redis, the RLQS
// registry's records stay on the first Redis, and a reset made there is
// heard by every store watching it, whichever server held the buckets.
func TestPerSecondRegistryAndResets(t *testing.T) {
	first, second := redistest.Start(t), redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := newSplit(t, ClientOptions{URL: first.URL()}, ClientOptions{URL: second.URL()}, Options{Prefix: "reg:"})
	if _, err := s.ExchangeRecords(ctx, time.Now(), "r1", []Shelf{{Level: "api|user=alice|#fw1s", TTL: time.Minute, Record: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if got := keysOn(t, second.Client(t)); len(got) != 0 {
		t.Errorf("the per-second Redis holds %q: the registry is the first's", got)
	}
	if got := keysOn(t, first.Client(t)); len(got) != 1 {
		t.Errorf("the first Redis holds %q, want the level's record", got)
	}
	heard := make(chan []string, 4)
	watcher := newSplit(t, ClientOptions{URL: first.URL()}, ClientOptions{URL: second.URL()}, Options{Prefix: "reg:"})
	go watcher.WatchResets(ctx, func(keys []string) { heard <- keys })
	b := []limit.Bucket{{Key: "api|user=bob|#fw1s", Limit: limit.Limit{Algorithm: limit.FixedWindow, Size: 5, Window: time.Second}, Hits: 1, SecondUnit: true}}
	deadline := time.Now().Add(5 * time.Second)
	for {
		// Until the watcher has subscribed: a reset before is not heard.
		if err := s.Reset(ctx, []string{b[0].Key}); err != nil {
			t.Fatal(err)
		}
		select {
		case keys := <-heard:
			if !slices.Equal(keys, []string{b[0].Key}) {
				t.Fatalf("heard %q, want %q", keys, b[0].Key)
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no reset heard within 5s")
		}
	}
}
