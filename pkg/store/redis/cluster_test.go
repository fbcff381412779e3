package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
)

// TestClusterMatchesMemory runs the same random requests, whose buckets
// span several Cluster slots, through the Redis store on a Cluster and the
// memory store: every result must be the same, rejected requests with
// refunds and charges undone included.
func TestClusterMatchesMemory(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := context.Background()
	for i, o := range []Options{{Mode: ScriptMode}, {Mode: ScriptMode, Pipeline: DefaultPipeline}, {Mode: TransactionsMode}} {
		name := fmt.Sprintf("mode%d-pipeline%d", o.Mode, o.Pipeline.Limit)
		t.Run(name, func(t *testing.T) {
			o.Connect, o.CallerClock, o.Prefix = &ClientOptions{URL: cl.URL(), Cluster: true}, true, fmt.Sprintf("cm%d:", i)
			store, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			model, err := memory.New(memory.Options{SweepInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer model.Close()

			rng := rand.New(rand.NewPCG(3, 4))
			type spec struct {
				limit  limit.Limit
				shadow bool
			}
			keys := map[string]spec{}
			var names []string
			for _, user := range []string{"a", "b", "c", "d"} {
				for _, action := range []string{"", "|x=1", "|x=2"} {
					key := "api|u=" + user + action
					keys[key] = spec{limit.Limit{Size: int64(2 + rng.IntN(6)), DripRate: time.Duration(1+rng.IntN(5)) * 100 * time.Millisecond, DripSize: 1}, rng.IntN(6) == 0}
					names = append(names, key)
				}
			}
			now := time.UnixMicro(1_760_000_000_000_000)
			slotsSeen := 0
			for round := range 1500 {
				now = now.Add(time.Duration(rng.IntN(150)) * time.Millisecond)
				var buckets []limit.Bucket
				used := map[string]bool{}
				for range 1 + rng.IntN(4) {
					k := names[rng.IntN(len(names))]
					if used[k] {
						continue
					}
					used[k] = true
					hits := []int64{1, 1, 1, 2, 0, -1, -3}[rng.IntN(7)]
					buckets = append(buckets, limit.Bucket{Key: k, Limit: keys[k].limit, Hits: hits, Shadow: keys[k].shadow})
				}
				if !sameSlot(redisKeys(store, buckets)) {
					slotsSeen++
				}
				got := make([]limit.Result, len(buckets))
				want := make([]limit.Result, len(buckets))
				if err := store.Apply(ctx, now, buckets, got); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if err := model.Apply(ctx, now, buckets, want); err != nil {
					t.Fatal(err)
				}
				for i := range buckets {
					if !got[i].Equal(want[i]) {
						t.Fatalf("round %d, bucket %s (hits %d) of %v:\nCluster %+v\nmemory  %+v", round, buckets[i].Key, buckets[i].Hits, describe(buckets), got[i], want[i])
					}
				}
			}
			if slotsSeen < 500 {
				t.Fatalf("only %d requests spanned several slots", slotsSeen)
			}
		})
	}
}

func redisKeys(s *Store, buckets []limit.Bucket) []string {
	keys := make([]string, len(buckets))
	for i, b := range buckets {
		keys[i] = redisKey(s.keyPrefix, b.Key)
	}
	return keys
}

func describe(buckets []limit.Bucket) string {
	var parts []string
	for _, b := range buckets {
		parts = append(parts, fmt.Sprintf("%s%+d", b.Key, b.Hits))
	}
	return strings.Join(parts, " ")
}

// TestClusterNeverRetriesScripts: a script whose reply does not come in
// time is not sent again (it may have run), so one request of one hit
// charges one hit at most.
func TestClusterNeverRetriesScripts(t *testing.T) {
	cl := redistest.StartCluster(t)
	for name, p := range map[string]Pipeline{"Unbatched": {}, "Pipelined": DefaultPipeline} {
		t.Run(name, func(t *testing.T) { neverRetries(t, cl, p, "api|user=retry-"+name) })
	}
}

func neverRetries(t *testing.T, cl *redistest.Cluster, p Pipeline, bucket string) {
	ctx := context.Background()
	s, err := New(Options{Pipeline: p, Connect: &ClientOptions{URL: cl.URL(), Cluster: true, ReadTimeout: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := limit.Limit{Size: 100, DripRate: time.Hour, DripSize: 1}
	b := []limit.Bucket{{Key: bucket, Limit: l}}
	res := make([]limit.Result, 1)
	if err := s.Apply(ctx, time.Now(), b, res); err != nil { // a peek: loads the script
		t.Fatal(err)
	}
	// Idle connections to the node, for retries to go out on at once.
	parallel(make([]int, 8), func(int) { s.Apply(ctx, time.Now(), b, make([]limit.Result, 1)) })
	key := redisKey(s.keyPrefix, b[0].Key)
	node := masterOf(t, cl, key)
	// Keep the node busy well past the read timeout.
	const busy = "local i = 0 while i < tonumber(ARGV[1]) do i = i + 1 end return i"
	start := time.Now()
	node.Eval(ctx, busy, nil, 1_000_000)
	loops := int64(float64(1_000_000) * float64(800*time.Millisecond) / float64(max(time.Since(start), time.Millisecond)))
	go node.Eval(ctx, busy, nil, loops)
	time.Sleep(50 * time.Millisecond)

	b[0].Hits = 1
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := s.Apply(cctx, time.Now(), b, res); err == nil {
		t.Skip("the busy script did not outlast the read timeout: nothing to show")
	}
	time.Sleep(1500 * time.Millisecond) // the busy script ends, then the queued EVALSHAs run
	v, err := node.Get(ctx, key).Result()
	if err != nil && err != goredis.Nil {
		t.Fatal(err)
	}
	st, _ := decodeState(v)
	t.Logf("stored %+v, loops %d", st, loops)
	if st.Counter > 1 {
		t.Fatalf("one request of one hit left %+v: the script ran more than once", st)
	}
}

// masterOf returns a client of the master that serves key.
func masterOf(t *testing.T, cl *redistest.Cluster, key string) *goredis.Client {
	t.Helper()
	ctx := context.Background()
	for _, n := range cl.Nodes {
		c := n.Client(t)
		if info, _ := c.Info(ctx, "replication").Result(); !strings.Contains(info, "role:master") {
			continue
		}
		if err := c.Get(ctx, key).Err(); err == nil || err == goredis.Nil {
			return c
		}
	}
	t.Fatal("no master serves the key")
	return nil
}

func TestCheckAfterClose(t *testing.T) {
	s, err := New(Options{Connect: &ClientOptions{URL: "redis://127.0.0.1:1/0"}})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.Check(ctx); err != errClosed {
		t.Fatalf("Check after Close: %v, want errClosed", err)
	}
}

// TestClusterSendsAgainWhileSlotMoves splits a request's two keys between
// two masters in the middle of moving their slot, as a reshard does key by
// key: Redis answers TRYAGAIN (the script does not run), and the call is
// sent again until the slot has moved, then decided once.
func TestClusterSendsAgainWhileSlotMoves(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := context.Background()
	s, err := New(Options{Connect: &ClientOptions{URL: cl.URL(), Cluster: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := limit.Limit{Size: 100, DripRate: time.Hour, DripSize: 1}
	b := []limit.Bucket{{Key: "api|user=mover", Limit: l, Hits: 1}, {Key: "api|user=mover|action=a", Limit: l, Hits: 1}}
	if err := s.Apply(ctx, time.Now(), b, make([]limit.Result, 2)); err != nil {
		t.Fatal(err)
	}
	keys := redisKeys(s, b)
	sl := int64(slot(keys[0]))
	from := masterOf(t, cl, keys[0])
	var to *goredis.Client
	for _, n := range cl.Masters(t) {
		if c := n.Client(t); c.Options().Addr != from.Options().Addr {
			to = c
			break
		}
	}
	id := func(c *goredis.Client) string { return c.Do(ctx, "CLUSTER", "MYID").Val().(string) }
	fromID, toID := id(from), id(to)
	host, port, _ := strings.Cut(to.Options().Addr, ":")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(to.Do(ctx, "CLUSTER", "SETSLOT", sl, "IMPORTING", fromID).Err())
	must(from.Do(ctx, "CLUSTER", "SETSLOT", sl, "MIGRATING", toID).Err())
	must(from.Migrate(ctx, host, port, keys[1], 0, time.Second).Err()) // one key moved, one not: TRYAGAIN
	moved := make(chan error, 1)
	go func() {
		time.Sleep(20 * time.Millisecond)
		err := from.Migrate(ctx, host, port, keys[0], 0, time.Second).Err()
		for _, c := range []*goredis.Client{to, from} {
			if err == nil {
				err = c.Do(ctx, "CLUSTER", "SETSLOT", sl, "NODE", toID).Err()
			}
		}
		moved <- err
	}()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	res := make([]limit.Result, 2)
	if err := s.Apply(cctx, time.Now(), b, res); err != nil {
		t.Fatalf("a request whose slot was moving: %v", err)
	}
	must(<-moved)
	if res[0].Remaining != 98 || res[1].Remaining != 98 {
		t.Fatalf("remaining %d and %d after two requests of one hit, want 98 each: decided once", res[0].Remaining, res[1].Remaining)
	}
}

// sameSlot reports whether the keys share one Cluster slot.
func sameSlot(keys []string) bool {
	for _, k := range keys[1:] {
		if slot(k) != slot(keys[0]) {
			return false
		}
	}
	return true
}

// TestClusterLeasesBatched: a lease call whose buckets span a Cluster's
// slots goes in a part per slot, through the batcher; every bucket is
// granted on its own node, as a second call (asking nothing) reads back.
func TestClusterLeasesBatched(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := context.Background()
	s, err := New(Options{Connect: &ClientOptions{URL: cl.URL(), Cluster: true}, Batch: DefaultBatch, BatchWait: time.Millisecond, Prefix: "clb:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := limit.Limit{Size: 100, DripRate: time.Hour, DripSize: 1}
	leases := make([]Lease, 40)
	slots := map[uint16]bool{}
	for i := range leases {
		leases[i] = Lease{Key: fmt.Sprintf("api|user=u%d", i), Limit: l, Ask: int64(1 + i)}
		slots[slot(redisKey(s.keyPrefix, leases[i].Key))] = true
	}
	if len(slots) < 10 {
		t.Fatalf("the keys span %d slots, want many", len(slots))
	}
	if _, _, err := s.LeaseBatched(ctx, time.Now(), leases); err != nil {
		t.Fatal(err)
	}
	again := make([]Lease, len(leases))
	for i, ls := range leases {
		if ls.Err != nil || ls.Granted != ls.Ask || ls.State.Counter != ls.Ask || ls.Now == 0 {
			t.Fatalf("lease %d: %+v, want %d granted", i, ls, ls.Ask)
		}
		again[i] = Lease{Key: ls.Key, Limit: l}
	}
	if _, _, err := s.LeaseBatched(ctx, time.Now(), again); err != nil {
		t.Fatal(err)
	}
	for i, ls := range again {
		if ls.Granted != 0 || ls.State.Counter != leases[i].Granted {
			t.Errorf("read back %d: %+v, want counter %d", i, ls, leases[i].Granted)
		}
	}

	// A request and a lease of one slot (a hash tag) within the wait: one
	// pipeline on the Cluster client, each answered.
	errs := make(chan error, 2)
	results := make([]limit.Result, 1)
	tagged := []Lease{{Key: "api|user={t}b", Limit: l, Ask: 7}}
	go func() {
		errs <- s.Apply(ctx, time.Now(), []limit.Bucket{{Key: "api|user={t}a", Limit: l, Hits: 2}}, results)
	}()
	go func() {
		_, _, err := s.LeaseBatched(ctx, time.Now(), tagged)
		errs <- err
	}()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if !results[0].Admitted || results[0].Remaining != 98 || tagged[0].Granted != 7 || tagged[0].Err != nil {
		t.Errorf("request %+v and lease %+v of one slot, want 98 left and 7 granted", results[0], tagged[0])
	}
}
