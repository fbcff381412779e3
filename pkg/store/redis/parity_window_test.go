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
	"github.com/envoy-rls/envoy-rls/pkg/window"
)

// TestScriptMatchesDecideWindows runs random mixes of windows and leaky
// buckets, states, instants and hits through the Lua script on a real
// Redis and through limit.DecideAll, and wants the same figures and the
// same stored state.
func TestScriptMatchesDecideWindows(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	s, err := New(Options{Client: c, CallerClock: true, Prefix: "wparity:"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	for round := range 3000 {
		n := 1 + rng.IntN(4)
		now := time.UnixMicro(1_760_000_000_000_000 + rng.Int64N(1e12))
		s.refSkew = randomSkew(rng) // calendar windows' periods, sent around the service's clock
		buckets := make([]limit.Bucket, n)
		states := make([]limit.State, n)
		for i := range buckets {
			l := randomWindow(rng)
			if rng.IntN(4) == 0 {
				l = randomLimit(rng)
			}
			buckets[i] = limit.Bucket{Key: fmt.Sprintf("w|r=%d|b=%d", round, i), Limit: l, Hits: randomHits(rng, l), Shadow: rng.IntN(5) == 0, Always: rng.IntN(3) == 0}
			key := redisKey(s.keyPrefix, buckets[i].Key)
			var stored string
			switch l.Algorithm {
			case limit.SlidingWindow:
				states[i] = randomSlidingState(rng, l, now)
				stored = encodeWindow(states[i])
			case limit.FixedWindow:
				states[i] = randomFixedState(rng, l, now, s.refSkew)
				stored = encodeState(states[i])
			default:
				states[i] = randomState(rng, l, now)
				stored = encodeState(states[i])
			}
			if rng.IntN(6) == 0 || stored == "" {
				states[i], stored = limit.State{}, "" // no key
			}
			if stored != "" {
				if err := c.Set(ctx, key, stored, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
				states[i] = decodeAs(l, stored) // as Redis holds it
			}
		}
		want := make([]limit.Result, n)
		goStates := make([]limit.State, n)
		for i, st := range states {
			goStates[i] = limit.State{Counter: st.Counter, Timestamp: st.Timestamp, Counts: slices.Clone(st.Counts)}
		}
		admitted := limit.DecideAll(goStates, buckets, now, want)
		got := make([]limit.Result, n)
		if err := s.Apply(ctx, now, buckets, got); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i, b := range buckets {
			g, w := got[i], want[i]
			if b.Limit.Algorithm != limit.LeakyBucket {
				g.State, w.State = limit.State{}, limit.State{} // the script reports a window's count, not its state
			}
			if !g.Equal(w) {
				t.Fatalf("round %d bucket %d: limit %v, state %+v, hits %d, now %d:\nscript %+v\nGo     %+v",
					round, i, b.Limit, states[i], b.Hits, now.UnixMicro(), got[i], want[i])
			}
			key := redisKey(s.keyPrefix, b.Key)
			v, err := c.Get(ctx, key).Result()
			if err != nil && err != goredis.Nil {
				t.Fatal(err)
			}
			wantStored := states[i]
			charged := b.Limit.Algorithm == limit.LeakyBucket || (b.Hits != 0 && (want[i].Admitted || b.Always))
			if limit.Saves(b, admitted) && charged {
				wantStored = want[i].State
				if want[i].TTL == 0 {
					wantStored = limit.State{}
				}
			}
			if err == goredis.Nil && limit.Saves(b, admitted) && want[i].TTL < time.Second {
				continue // a state of a few milliseconds may have expired already
			}
			if gotStored := decodeAs(b.Limit, v); !sameStored(gotStored, wantStored) {
				t.Fatalf("round %d bucket %d (%v, hits %d, admitted %v): stored %+v, want %+v", round, i, b.Limit, b.Hits, admitted, gotStored, wantStored)
			}
		}
	}
}

// decodeAs reads a stored state of limit l's algorithm; "" is empty.
func decodeAs(l limit.Limit, v string) limit.State {
	if l.Algorithm == limit.SlidingWindow {
		st, _ := decodeWindow(v)
		return st
	}
	st, _ := decodeState(v)
	return st
}

// sameStored compares states as Redis keeps them: a window's counts
// without the empty oldest ones, and nothing for a window counting nothing.
func sameStored(a, b limit.State) bool {
	trim := func(s limit.State) limit.State {
		m := len(s.Counts)
		for m > 0 && s.Counts[m-1] == 0 {
			m--
		}
		if s.Counts != nil && m == 0 {
			return limit.State{}
		}
		s.Counts = s.Counts[:m]
		if s.Counts != nil {
			s.Counter = 0 // informational: the count when made
			for _, c := range s.Counts {
				s.Counter += c
			}
		}
		return s
	}
	return trim(a).Equal(trim(b))
}

func randomWindow(rng *rand.Rand) limit.Limit {
	size := pick(rng, 0, 1, 2, 5, 10, 100, 1+rng.Int64N(1e6))
	res := time.Duration(pick(rng, int64(1), 7, 1000, 1e6, 6e7, 1+rng.Int64N(1e9), 3153600000000)) * time.Microsecond // the last: a tenth of the longest window
	subs := pick(rng, 1, 2, 3, 10, 60, 1000, 1+rng.IntN(100))
	if res >= window.MaxWindow/10 {
		subs = 10
	}
	if rng.IntN(5) == 0 {
		return randomCalendar(rng, size)
	}
	if rng.IntN(2) == 0 {
		return limit.Limit{Algorithm: limit.FixedWindow, Size: size, Window: res * time.Duration(subs)}
	}
	return limit.Limit{Algorithm: limit.SlidingWindow, Size: size, Window: res * time.Duration(subs), Resolution: res}
}

func randomSlidingState(rng *rand.Rand, l limit.Limit, now time.Time) limit.State {
	w := l.Sliding()
	res := w.Resolution.Microseconds()
	subs := w.SubWindows()
	newest := now.UnixMicro()/res - rng.Int64N(int64(subs)+2) + pick(rng, int64(0), 0, 0, 1) // sometimes ahead: a clock stepped back
	counts := make([]int64, rng.IntN(subs+1))
	for k := range counts {
		if rng.IntN(3) > 0 {
			counts[k] = rng.Int64N(l.Size/2 + 2)
		}
	}
	return limit.State{Timestamp: newest * res, Counts: counts}
}
