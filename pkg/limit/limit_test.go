package limit

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/leaky"
)

// TestLimitValidate: each algorithm's fields are checked by its own
// package; an unknown algorithm is an error.
func TestLimitValidate(t *testing.T) {
	cases := []struct {
		limit Limit
		want  string // "" for valid
	}{
		{lb(1, time.Second, 1), ""},
		{lb(-1, time.Second, 1), "size must be >= 0"},
		{lb(1, 0, 1), "drip_rate must be at least 1us"},
		{Limit{Algorithm: SlidingWindow, Size: 10, Window: time.Minute}, ""},
		{Limit{Algorithm: SlidingWindow, Size: 10, Window: time.Minute, Resolution: 7 * time.Second}, "does not divide"},
		{Limit{Algorithm: FixedWindow, Size: 10, Window: time.Minute}, ""},
		{Limit{Algorithm: FixedWindow, Size: -1, Window: time.Minute}, "limit must be 0 to"},
		{Limit{Algorithm: 9, Size: 1, DripRate: time.Second, DripSize: 1}, "unknown algorithm 9"},
	}
	for _, c := range cases {
		err := c.limit.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: unexpected error %v", c.limit, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: got error %v, want one containing %q", c.limit, err, c.want)
		}
	}
}

// TestDecideLeakyBucketIsLeakyDecide: Decide on a leaky bucket's Limit
// answers exactly as package leaky, whatever the state, the hits and the
// fields (in range or not).
func TestDecideLeakyBucketIsLeakyDecide(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(vs ...int64) int64 { return vs[rng.IntN(len(vs))] }
	for i := range 5000 {
		l := lb(pick(-1, 0, 1, 5, 100, leaky.MaxSize, leaky.MaxSize+1),
			time.Duration(pick(-1, 0, 1, 1000, 1e6, int64(leaky.MaxDripRate/time.Microsecond)))*time.Microsecond,
			pick(-1, 0, 1, 3, leaky.MaxSize))
		s := State{Counter: pick(0, 1, 4, 100, 1<<53, 1<<62), Timestamp: t0.UnixMicro() - pick(-5e6, 0, 1, 999999, 1e9)}
		hits := pick(-7, -1, 0, 1, 2, 50, 1<<60)
		now := t0.Add(time.Duration(pick(0, 1, 1e3, 1e9)))
		got := Decide(s, l, now, hits)
		want := l.Leaky().Decide(leaky.State{Counter: s.Counter, Timestamp: s.Timestamp}, now, hits)
		wantAsLimit := Result{Admitted: want.Admitted, State: State{Counter: want.State.Counter, Timestamp: want.State.Timestamp},
			Remaining: want.Remaining, Clear: want.Clear, Reset: want.Reset, TTL: want.TTL}
		if !got.Equal(wantAsLimit) {
			t.Fatalf("case %d: %v, %+v, %d hits at %v: got %+v, want %+v", i, l, s, hits, now, got, wantAsLimit)
		}
	}
}

// lb is a leaky bucket's limit, for the tables of this package.
func lb(size int64, rate time.Duration, dripSize int64) Limit {
	return Limit{Size: size, DripRate: rate, DripSize: dripSize}
}
