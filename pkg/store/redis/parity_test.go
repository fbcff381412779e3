package redis

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/leaky"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
)

// TestScriptMatchesDecide runs random buckets, states, instants and hits
// through the Lua script on a real Redis and through limit.DecideAll, and
// wants the same results and the same stored state, bit for bit.
func TestScriptMatchesDecide(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	s, err := New(Options{Client: c, CallerClock: true, Prefix: "parity:"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	const rounds = 3000
	// The first round takes the largest drip counts the script divides:
	// (2^53-1) / 2^20 microseconds.
	edge := limit.Limit{Size: 1 << 40, DripRate: (1 << 20) * time.Microsecond, DripSize: 1}
	edgeNow := time.UnixMicro(1_760_000_000_000_000)
	edgeState := limit.State{Counter: 1 << 53, Timestamp: edgeNow.UnixMicro() - (1<<53 - 1)}
	for round := range rounds {
		n := 1 + rng.IntN(4)
		if round%2 == 0 {
			n = 1
		}
		now := time.UnixMicro(1_760_000_000_000_000 + rng.Int64N(1e12))
		if round == 0 {
			now = edgeNow
		}
		buckets := make([]limit.Bucket, n)
		states := make([]limit.State, n)
		for i := range buckets {
			l := randomLimit(rng)
			buckets[i] = limit.Bucket{
				Key:    fmt.Sprintf("p|r=%d|b=%d", round, i),
				Limit:  l,
				Hits:   randomHits(rng, l),
				Shadow: rng.IntN(5) == 0,
				Always: rng.IntN(3) == 0,
			}
			states[i] = randomState(rng, l, now)
			if round == 0 {
				buckets[i].Limit, buckets[i].Hits, states[i] = edge, 0, edgeState
			}
			key := redisKey(s.keyPrefix, buckets[i].Key)
			if !states[i].Equal(limit.State{}) {
				stored := encodeState(states[i])
				if err := c.Set(ctx, key, stored, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
				// A stored counter is at most leaky.MaxSize.
				states[i], _ = decodeState(stored)
			}
		}
		want := make([]limit.Result, n)
		admitted := limit.DecideAll(states, buckets, now, want)
		got := make([]limit.Result, n)
		if err := s.Apply(ctx, now, buckets, got); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i := range buckets {
			if !got[i].Equal(want[i]) {
				t.Fatalf("round %d bucket %d: limit %+v, state %+v, hits %d, now %d:\nscript %+v\nGo     %+v",
					round, i, buckets[i].Limit, states[i], buckets[i].Hits, now.UnixMicro(), got[i], want[i])
			}
			checkStored(t, c, redisKey(s.keyPrefix, buckets[i].Key), states[i], want[i], limit.Saves(buckets[i], admitted))
		}
	}
}

// checkStored checks what the script left in Redis: the new state with its
// TTL if the bucket was charged (admitted: the request was, or the bucket
// charges always), the old state otherwise.
func checkStored(t *testing.T, c *goredis.Client, key string, before limit.State, r limit.Result, admitted bool) {
	t.Helper()
	ctx := context.Background()
	v, err := c.Get(ctx, key).Result()
	stored := limit.State{}
	switch {
	case err == goredis.Nil:
	case err != nil:
		t.Fatal(err)
	default:
		var ok bool
		if stored, ok = decodeState(v); !ok {
			t.Fatalf("%s holds %x, not a bucket", key, v)
		}
	}
	want := before
	if admitted {
		want = r.State
		if r.TTL == 0 {
			want = limit.State{}
		}
	}
	if !stored.Equal(want) {
		if err == goredis.Nil && admitted && r.TTL < time.Second {
			return // a bucket of a few milliseconds may have expired already
		}
		t.Fatalf("%s holds %+v, want %+v (admitted %v)", key, stored, want, admitted)
	}
	if admitted && r.TTL > 0 {
		ttl, err := c.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if max := (r.TTL + time.Millisecond - 1).Truncate(time.Millisecond); ttl > max || ttl < max-time.Second {
			t.Fatalf("%s expires in %s, want %s", key, ttl, max)
		}
	}
}

func pick[T any](rng *rand.Rand, xs ...T) T { return xs[rng.IntN(len(xs))] }

func randomLimit(rng *rand.Rand) limit.Limit {
	size := pick(rng, 0, 1, 2, 3, 5, 10, 100, 1000, leaky.MaxSize, 1+rng.Int64N(1e6))
	rate := pick(rng, int64(1), 7, 1000, 333333, 1e6, 6e7, 36e8, 1<<53, 1+rng.Int64N(1e9))
	drip := pick(rng, 1, 1, 1, 2, 3, 4, 7, 100, leaky.MaxSize, 1+rng.Int64N(1000))
	return limit.Limit{Size: size, DripRate: time.Duration(rate) * time.Microsecond, DripSize: drip}
}

func randomHits(rng *rand.Rand, l limit.Limit) int64 {
	return pick(rng, 0, 1, 1, 1, 2, l.Size, l.Size+1, -1, -l.Size, 1<<53, -(1 << 53), math.MaxInt64, math.MinInt64+1, rng.Int64N(2*l.Size+2))
}

func randomState(rng *rand.Rand, l limit.Limit, now time.Time) limit.State {
	if rng.IntN(6) == 0 {
		return limit.State{}
	}
	counter := pick(rng, 1, l.Size, l.Size+1, max(l.Size-1, 1), rng.Int64N(2*l.Size+2), leaky.MaxSize, 1<<53)
	rate := l.DripRate.Microseconds()
	offset := pick(rng, 0, -rng.Int64N(10*min(rate, 1<<40)+1), rng.Int64N(1e9), -(1 << 52), -now.UnixMicro(), 1<<40,
		1<<60, -(1 << 60), 1<<53-now.UnixMicro()+1) // beyond 2^53: clamped alike
	return limit.State{Counter: counter, Timestamp: now.UnixMicro() + offset}
}
