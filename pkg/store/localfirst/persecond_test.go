package localfirst

import (
	"context"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// TestLocalFirstOnPerSecondRedis: over a Redis store with a per-second
// Redis, the local-first mode admits what the tighter limit allows, all
// or nothing across both servers, and leases, syncs and gives back each
// bucket's units on the server that keeps it.
func TestLocalFirstOnPerSecondRedis(t *testing.T) {
	first, second := redistest.Start(t), redistest.Start(t)
	split := func() *redis.Store {
		st, err := redis.New(redis.Options{Connect: &redis.ClientOptions{URL: first.URL()}, Prefix: "lf:", CallerClock: true,
			PerSecond: &redis.Server{Connect: &redis.ClientOptions{URL: second.URL()}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	s := newStore(t, split(), time.Hour)
	hour := limit.Limit{Algorithm: limit.FixedWindow, Size: 100, Window: time.Hour}
	// Marked per second (SecondUnit routes it), but counted over an hour:
	// a window of a second could end, and its keys go, before the test does.
	perSecond := limit.Limit{Algorithm: limit.FixedWindow, Size: 10, Window: time.Hour}
	req := []limit.Bucket{
		{Key: "api|ip=1", Limit: hour, Hits: 1},
		{Key: "api|ip=1|#fw1s", Limit: perSecond, Hits: 1, SecondUnit: true},
	}
	now := time.Now()
	admitted := 0
	for range 30 {
		if _, ok := apply(t, s, now, req...); ok {
			admitted++
		}
		settle(s)
	}
	if admitted != 10 {
		t.Fatalf("admitted %d of 30, want the per-second limit's 10", admitted)
	}
	s.sync(context.Background(), now, true) // everything unused goes back
	settle(s)

	ctx := context.Background()
	keysOf := func(c *goredis.Client) []string {
		keys, err := c.Keys(ctx, "lf:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	k1, k2 := keysOf(first.Client(t)), keysOf(second.Client(t))
	if len(k1) != 1 || strings.Contains(k1[0], "#fw1s") {
		t.Errorf("the first Redis holds %q, want the hour limit's bucket only", k1)
	}
	if len(k2) != 1 || !strings.Contains(k2[0], "#fw1s") {
		t.Errorf("the per-second Redis holds %q, want the per-second limit's bucket only", k2)
	}
	// What Redis counts is what was admitted: the refused requests charged
	// neither server, and the units leased and not used came back.
	states := make([]limit.State, len(req))
	at, err := split().State(ctx, now, req, states)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range req {
		if n := limit.Count(states[i], b.Limit, at); n != 10 {
			t.Errorf("%s counts %d on its Redis, want the 10 admitted", b.Key, n)
		}
	}
}
