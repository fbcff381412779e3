package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// TestOneCommandPerRequest counts what Redis executes for requests of two
// buckets, two levels of leaky buckets or a leaky bucket and a sliding
// window on one node: one EVALSHA each, inside which the script reads and
// writes both buckets; and counts what the client sends: that one command.
func TestOneCommandPerRequest(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	hook := &redistest.Counter{}
	c.AddHook(hook)
	// As serve wires it, on a client that counts what it sends.
	ro := servedRedis(redis.ClientOptions{}, false)
	ro.Connect, ro.Client = nil, c
	store, err := redis.New(ro)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cfg, _, err := descriptors.Parse(descriptors.Source{Name: "service.yaml", Data: []byte(serviceConfig)})
	if err != nil {
		t.Fatal(err)
	}
	opts := rls.Options{Store: store, Config: cfg}
	asServed(&opts)
	svc, err := rls.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := svc.ShouldRateLimit(ctx, request([]string{"user=warm-up"})); err != nil {
		t.Fatal(err) // loads the script
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	hook.Cmds.Store(0)
	const requests = 50
	for i := range requests {
		req := request([]string{fmt.Sprintf("user=u%d", i), "action=trade"})
		if i%2 == 1 {
			req = request([]string{fmt.Sprintf("mixed=u%d", i)})
		}
		resp, err := svc.ShouldRateLimit(ctx, req)
		if err != nil || len(resp.GetStatuses()) != 1 || resp.GetStatuses()[0].GetCurrentLimit() == nil {
			t.Fatalf("request %d: %v, %v", i, resp, err)
		}
	}
	stats := redistest.CommandCalls(t, admin)
	t.Logf("commandstats after %d requests of two buckets: %v", requests, stats)
	if stats["evalsha"] != requests || stats["eval"] != 0 {
		t.Fatalf("%d EVALSHA and %d EVAL for %d requests, want one EVALSHA each", stats["evalsha"], stats["eval"], requests)
	}
	// Inside the script: both levels read, both written, and the clock.
	if stats["get"] != 2*requests || stats["set"] != 2*requests || stats["time"] != requests {
		t.Fatalf("inside the scripts: %d GET, %d SET, %d TIME; want %d, %d, %d", stats["get"], stats["set"], stats["time"], 2*requests, 2*requests, requests)
	}
	for cmd := range stats {
		switch cmd {
		case "evalsha", "get", "set", "time", "config|resetstat", "info":
		default:
			t.Errorf("unexpected command %s", cmd)
		}
	}
	if sent := hook.Cmds.Load(); sent != requests {
		t.Fatalf("the client sent %d commands for %d requests, want %d", sent, requests, requests)
	}
}

// TestTransactionsRoundTrips counts the commands of transactions mode: one
// attempt is WATCH, a pipeline of TIME and one HMGET per bucket, and
// MULTI/EXEC with the writes.
func TestTransactionsRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	hook := &redistest.Counter{}
	c.AddHook(hook)
	store, err := redis.New(redis.Options{Client: c, Mode: redis.TransactionsMode})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	l := limit.Limit{Size: 10, DripRate: time.Second, DripSize: 1}
	buckets := []limit.Bucket{{Key: "api|user=a", Limit: l, Hits: 1}, {Key: "api|user=a|action=b", Limit: l, Hits: 1}}
	results := make([]limit.Result, 2)
	// The first call also opens the connection (HELLO, CLIENT SETINFO).
	for i := range 2 {
		hook.Reset()
		if err := store.Apply(context.Background(), time.Now(), buckets, results); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	t.Logf("transactions mode, 2 buckets, no contention: %d round trips, %d commands", hook.Trips.Load(), hook.Cmds.Load())
	if hook.Trips.Load() != 3 {
		t.Fatalf("%d round trips, want 3 (WATCH; TIME and reads; MULTI/EXEC)", hook.Trips.Load())
	}
}

// TestMemoryPerBucket measures with MEMORY USAGE what one bucket of a
// typical two-level descriptor costs Redis.
func TestMemoryPerBucket(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	store, err := redis.New(redis.Options{Connect: &redis.ClientOptions{URL: srv.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	l := limit.Limit{Size: 60, DripRate: time.Second, DripSize: 1}
	results := make([]limit.Result, 2)
	ctx := context.Background()
	const users = 1000
	for i := range users {
		user := fmt.Sprintf("api|user=u%06d", i)
		buckets := []limit.Bucket{{Key: user, Limit: l, Hits: 1}, {Key: user + "|action=trade", Limit: l, Hits: 1}}
		if err := store.Apply(ctx, time.Now(), buckets, results); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := admin.Keys(ctx, "*").Result()
	if err != nil || len(keys) != 2*users {
		t.Fatalf("%d keys (%v), want %d", len(keys), err, 2*users)
	}
	perBucket := memoryPerKey(t, admin, keys)
	t.Logf("MEMORY USAGE: %.1f bytes per bucket (keys like %q)", perBucket, keys[0])
	if perBucket > 100 {
		t.Fatalf("%.1f bytes per bucket, want at most 100", perBucket)
	}
}

// TestMemoryPerSlidingWindow measures with MEMORY USAGE what a sliding
// window's key costs Redis, with a hit in one, 10 and 60 of its 60
// sub-windows: 7 bytes and 6 per counted sub-window, beside the key.
func TestMemoryPerSlidingWindow(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	store, err := redis.New(redis.Options{Connect: &redis.ClientOptions{URL: srv.URL()}, CallerClock: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	l := limit.Limit{Algorithm: limit.SlidingWindow, Size: 1000, Window: time.Hour, Resolution: time.Minute}
	ctx := context.Background()
	now := time.Now().Truncate(time.Minute)
	results := make([]limit.Result, 1)
	var perKey []float64
	for _, counted := range []int{1, 10, 60} {
		const users = 500
		for i := range users {
			b := []limit.Bucket{{Key: fmt.Sprintf("api|user=u%06d|#sw1h/1m~%d", i, counted), Limit: l, Hits: 1}}
			for m := range counted { // a hit in each of the first sub-windows
				if err := store.Apply(ctx, now.Add(time.Duration(m)*time.Minute), b, results); err != nil || !results[0].Admitted {
					t.Fatalf("%v, %+v", err, results[0])
				}
			}
		}
		keys, err := admin.Keys(ctx, fmt.Sprintf("*~%d", counted)).Result()
		if err != nil || len(keys) != users {
			t.Fatalf("%d keys (%v), want %d", len(keys), err, users)
		}
		perKey = append(perKey, memoryPerKey(t, admin, keys))
		t.Logf("MEMORY USAGE: %.1f bytes per sliding window with %d of 60 sub-windows counted (keys like %q)", perKey[len(perKey)-1], counted, keys[0])
	}
	// O(sub-windows): what 59 more counted sub-windows add is about their
	// 6 bytes each (Redis rounds allocations up).
	if grew := perKey[2] - perKey[0]; grew < 59*6*0.8 || grew > 59*6*1.5 {
		t.Fatalf("59 more counted sub-windows cost %.0f bytes, want about %d", grew, 59*6)
	}
	if perKey[0] > 128 {
		t.Fatalf("a window with one counted sub-window costs %.1f bytes, want at most 128", perKey[0])
	}
}

// memoryPerKey returns the mean MEMORY USAGE of keys.
func memoryPerKey(t *testing.T, admin *goredis.Client, keys []string) float64 {
	t.Helper()
	total := int64(0)
	for _, k := range keys {
		n, err := admin.MemoryUsage(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	return float64(total) / float64(len(keys))
}
