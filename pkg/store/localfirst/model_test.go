package localfirst

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/window"
)

// TestRefusalKeepsNoSmallerRequestOut: a leaky bucket of 10 an hour, hits
// 8, 3, 1: the 3 does not fit and charges nothing, the 1 does; seconds
// and syncs later, 2 and 1 still fit (only 9 charged). A refusal teaches
// what remains, not "full".
func TestRefusalKeepsNoSmallerRequestOut(t *testing.T) {
	r := newRemote()
	s, err := New(r, Options{Interval: 200 * time.Millisecond, ManualSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := limit.Rate{RequestsPerUnit: 10, Unit: limit.Hour}.Limit()
	now := time.UnixMicro(1_800_000_000_000_000)
	var got []bool
	for _, hits := range []int64{8, 3, 1} {
		res, _ := apply(t, s, now, limit.Bucket{Key: "k", Limit: l, Hits: hits})
		got = append(got, res[0].Admitted)
	}
	for range 25 {
		now = now.Add(200 * time.Millisecond)
		s.Sync(context.Background(), now)
	}
	for _, hits := range []int64{2, 1} {
		res, _ := apply(t, s, now, limit.Bucket{Key: "k", Limit: l, Hits: hits})
		got = append(got, res[0].Admitted)
	}
	if fmt.Sprint(got) != "[true false true false true]" {
		// 8 + 1 = 9 charged, 10 an hour leaks one in 6 minutes: 5 s on,
		// 1 fits (10), 2 does not.
		t.Fatalf("hits 8, 3, 1, then 5 s later 2, 1: admitted %v, want [true false true false true] as exact mode", got)
	}
}

// TestOneReplicaAnswersAsExact drives one local-first store and an exact
// one (limit.DecideAll on the same kind of in-process Redis) with the same
// random requests, resets and time steps, syncing at every interval: each
// bucket's answer (admitted, remaining, reset, clear) must be the same.
// The test on a real Redis is test/integration's.
func TestOneReplicaAnswersAsExact(t *testing.T) {
	seeds := 400
	if testing.Short() {
		seeds = 50
	}
	first := 0
	if v, err := strconv.Atoi(os.Getenv("LOCALFIRST_SEED")); err == nil {
		first, seeds = v, v+1 // one sequence, to look into
	}
	if v, err := strconv.Atoi(os.Getenv("LOCALFIRST_SEEDS")); err == nil {
		seeds = v // more sequences than CI runs
	}
	for seed := first; seed < seeds; seed++ {
		if msg := runExactly(uint64(seed)); msg != "" {
			lines := strings.Split(strings.TrimSpace(msg), "\n")
			t.Fatalf("seed %d, the last steps:\n%s", seed, strings.Join(lines[max(0, len(lines)-12):], "\n"))
		}
	}
}

// runExactly runs one random sequence and returns its trace up to the
// first difference, or "".
func runExactly(seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 29))
	interval := time.Duration(1+rng.IntN(500)) * time.Millisecond
	exact, lr := newRemote(), newRemote()
	s, err := New(lr, Options{Interval: interval, ManualSync: true})
	if err != nil {
		return err.Error()
	}
	defer s.Close()
	type key struct {
		name           string
		limit          limit.Limit
		always, shadow bool
	}
	var keys []key
	for k := range 2 + rng.IntN(4) {
		keys = append(keys, key{name: fmt.Sprintf("k%d", k), limit: randomLimit(rng), always: rng.IntN(4) == 0, shadow: rng.IntN(6) == 0})
	}
	now := time.UnixMicro(1_800_000_000_000_000 + rng.Int64N(1_000_000_000))
	for _, k := range keys {
		if k.limit.IsCalendar() {
			// A few seconds before the period ends, so that the sequence
			// crosses its end: leases and debts must end with it.
			end := k.limit.FixedPeriod(now.UnixMicro()).End
			now = time.UnixMicro(end - rng.Int64N(3_000_000) - 1)
			break
		}
	}
	next := now.Add(interval)
	var trace strings.Builder
	ctx := context.Background()
	for step := range 200 {
		switch rng.IntN(6) {
		case 0:
		case 1:
			now = now.Add(time.Duration(rng.IntN(1000)) * time.Microsecond)
		case 2:
			now = now.Add(time.Duration(rng.Int64N(int64(interval) * 3)))
		case 3:
			now = now.Add(time.Duration(rng.Int64N(int64(keys[0].limit.Window+keys[0].limit.DripRate) + 1)))
		default:
			now = now.Add(time.Duration(rng.IntN(50)) * time.Millisecond)
		}
		for !next.After(now) {
			s.Sync(ctx, next)
			next = next.Add(interval)
		}
		if rng.IntN(40) == 0 {
			k := keys[rng.IntN(len(keys))].name
			exact.Reset(ctx, []string{k})
			s.Reset(ctx, []string{k})
			fmt.Fprintf(&trace, "step %d: reset %s\n", step, k)
			continue
		}
		var bs []limit.Bucket
		for _, i := range rng.Perm(len(keys))[:1+rng.IntN(min(3, len(keys)))] {
			k := keys[i]
			hits := int64(rng.IntN(4))
			if rng.IntN(5) == 0 {
				hits = rng.Int64N(k.limit.Size + 3)
			}
			bs = append(bs, limit.Bucket{Key: k.name, Limit: k.limit, Hits: hits, Always: k.always, Shadow: k.shadow})
		}
		want, got := make([]limit.Result, len(bs)), make([]limit.Result, len(bs))
		if err := exact.Apply(ctx, now, bs, want); err != nil {
			return err.Error()
		}
		if err := s.Apply(ctx, now, bs, got); err != nil {
			return trace.String() + err.Error()
		}
		settle(s)
		fmt.Fprintf(&trace, "step %d at %s:", step, now.Format("15:04:05.000000"))
		differs := false
		for i, b := range bs {
			fmt.Fprintf(&trace, " %s(%s hits %d always %v shadow %v) exact %s lf %s;", b.Key, b.Limit, b.Hits, b.Always, b.Shadow, brief(want[i]), brief(got[i]))
			if brief(want[i]) != brief(got[i]) {
				differs = true
			}
		}
		trace.WriteString("\n")
		if differs {
			return trace.String()
		}
	}
	return ""
}

func brief(r limit.Result) string {
	return fmt.Sprintf("{%v %d reset %s clear %s}", r.Admitted, r.Remaining, r.Reset, r.Clear)
}

// randomLimit is a small limit of a random algorithm, so that requests
// reach it.
func randomLimit(rng *rand.Rand) limit.Limit {
	size := int64(1 + rng.IntN(20))
	switch rng.IntN(5) {
	case 0:
		res := time.Duration(1+rng.IntN(200)) * time.Millisecond
		return limit.Limit{Algorithm: limit.SlidingWindow, Size: size, Window: res * time.Duration(1+rng.IntN(10)), Resolution: res}
	case 1:
		return limit.Limit{Algorithm: limit.FixedWindow, Size: size, Window: time.Duration(1+rng.IntN(2000)) * time.Millisecond}
	case 2:
		zones := []string{"", "Europe/Berlin", "Asia/Tokyo", "America/Los_Angeles"}
		return limit.Limit{Algorithm: limit.FixedWindow, Size: size, Calendar: window.Day + window.Calendar(rng.IntN(4)), Zone: zones[rng.IntN(len(zones))]}
	}
	return limit.Limit{Size: size, DripRate: time.Duration(1+rng.IntN(300)) * time.Millisecond, DripSize: int64(1 + rng.IntN(3))}
}
