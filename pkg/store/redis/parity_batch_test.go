package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// TestScriptMatchesDecideInBatches runs calls of several requests whose
// buckets share keys through the Lua script, and each request in turn
// through limit.DecideAll on the states the ones before it left: a request
// must see the buckets as the earlier requests of its call wrote them. It
// wants the same results, and at the end the same stored states.
func TestScriptMatchesDecideInBatches(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	cs := &clients{conn: c}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(9, 10))
	for round := range 1000 {
		now := time.UnixMicro(1_760_000_000_000_000 + rng.Int64N(1e12))
		skew := randomSkew(rng)
		// A few keys, each with its limit and a state as Redis holds it.
		pool := make([]string, 1+rng.IntN(4))
		limits := map[string]limit.Limit{}
		held := map[string]limit.State{} // the model: what Redis holds
		for k := range pool {
			pool[k] = redisKey("bparity:", fmt.Sprintf("b|r=%d|k=%d", round, k))
			l := randomLimit(rng)
			if rng.IntN(2) == 0 {
				l = randomWindow(rng)
			}
			limits[pool[k]] = l
			var st limit.State
			switch l.Algorithm {
			case limit.SlidingWindow:
				st = randomSlidingState(rng, l, now)
			case limit.FixedWindow:
				st = randomFixedState(rng, l, now, skew)
			default:
				st = randomState(rng, l, now)
			}
			if v := encodeAs(l, st); v != "" && rng.IntN(6) > 0 {
				if err := c.Set(ctx, pool[k], v, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
				held[pool[k]] = decodeAs(l, v)
			}
		}
		// Requests of distinct keys each, keys shared between requests.
		reqs := make([]scriptRequest, 1+rng.IntN(6))
		var keys []string
		for r := range reqs {
			ks := rng.Perm(len(pool))[:1+rng.IntN(len(pool))]
			reqs[r] = scriptRequest{at: -1, ref: now.Add(skew).UnixMicro(), results: make([]limit.Result, len(ks))}
			for _, k := range ks {
				l := limits[pool[k]]
				reqs[r].buckets = append(reqs[r].buckets, limit.Bucket{Key: pool[k], Limit: l, Hits: randomHits(rng, l),
					Shadow: rng.IntN(5) == 0, Always: rng.IntN(4) == 0})
				keys = append(keys, pool[k])
			}
		}
		if _, err := runRequests(ctx, cs, now.UnixMicro(), keys, reqs); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for r, req := range reqs {
			states := make([]limit.State, len(req.buckets))
			for i, b := range req.buckets {
				states[i] = held[b.Key]
			}
			want := make([]limit.Result, len(req.buckets))
			admitted := limit.DecideAll(states, req.buckets, now, want)
			for i, b := range req.buckets {
				if !req.results[i].Equal(want[i]) {
					t.Fatalf("round %d request %d bucket %d (%v, hits %d): script %+v, Go %+v", round, r, i, b.Limit, b.Hits, req.results[i], want[i])
				}
				charged := b.Limit.Algorithm == limit.LeakyBucket || (b.Hits != 0 && (want[i].Admitted || b.Always))
				if !limit.Saves(b, admitted) || !charged {
					continue
				}
				delete(held, b.Key)
				if v := encodeAs(b.Limit, want[i].State); want[i].TTL > 0 && v != "" {
					held[b.Key] = decodeAs(b.Limit, v)
				}
			}
		}
		for _, k := range pool {
			v, err := c.Get(ctx, k).Result()
			if err != nil && err != goredis.Nil {
				t.Fatal(err)
			}
			if got := decodeAs(limits[k], v); !sameStored(got, held[k]) {
				if ttl, _ := c.PTTL(ctx, k).Result(); err == goredis.Nil || ttl < time.Second {
					continue // a state of a few milliseconds may have expired already
				}
				t.Fatalf("round %d: %s (%v) holds %+v, want %+v", round, k, limits[k], got, held[k])
			}
		}
	}
}

// encodeAs returns the stored form of a state of limit l's algorithm.
func encodeAs(l limit.Limit, st limit.State) string {
	if l.Algorithm == limit.SlidingWindow {
		return encodeWindow(st)
	}
	return encodeState(st)
}
