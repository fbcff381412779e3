package integration

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/localfirst"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
	"github.com/envoy-rls/envoy-rls/pkg/window"
)

// diffSeedEnv names the variable that runs TestLocalFirstMatchesExact on
// one seed only, the one a failure printed.
const diffSeedEnv = "RLS_DIFF_SEED"

// diffSeeds are the fixed seeds of TestLocalFirstMatchesExact: each
// sequence has keys of every algorithm.
const diffSeeds = 12

// diffSteps is the length of one sequence.
const diffSteps = 200

// TestLocalFirstMatchesExact holds one local-first replica to its
// contract: it answers exactly as exact mode does, for any sequence of
// hits. The same random sequences of requests, at the same instants of a
// virtual clock, go to a local-first store (syncing with Sync at the
// instants its loop would) and to an exact store, each on its own
// database of one Redis; every bucket's admitted, remaining and reset
// must be the same. No difference is allowed one replica: those the mode
// allows (docs/operations.md) come from several replicas sharing a
// bucket.
//
// Seeds 1 to diffSeeds always run, and one fresh seed; RLS_DIFF_SEED=n
// runs seed n alone. A failure prints the seed, the keys, the first
// mismatch and the steps on its keys before it.
func TestLocalFirstMatchesExact(t *testing.T) {
	var seeds []uint64
	if s := os.Getenv(diffSeedEnv); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", diffSeedEnv, s, err)
		}
		seeds = []uint64{n}
	} else {
		for n := range uint64(diffSeeds) {
			seeds = append(seeds, n+1)
		}
		seeds = append(seeds, uint64(time.Now().UnixNano()))
	}
	srv := redistest.Start(t)
	requests, here := 0, 0
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed %d (%s=%d runs it alone)", seed, diffSeedEnv, seed)
			seq := newDiffSeq(seed, diffSteps)
			m, steps := replayDiff(t, srv, seq)
			if m != nil {
				t.Error(m.report(seq))
			}
			r, h := 0, 0
			for _, st := range steps {
				if st.local != nil {
					r++
				}
				if st.here {
					h++
				}
			}
			t.Logf("%d requests, %d decided by local-first without calling Redis", r, h)
			requests, here = requests+r, here+h
		})
	}
	// A store that sends every request to Redis would pass: the sequences
	// must have local-first deciding in process too.
	if !t.Failed() && here == 0 {
		t.Errorf("local-first decided none of %d requests without calling Redis: the sequences test exact mode against itself", requests)
	}
}

// TestLocalFirstRefusedRequestLeavesRoom is the sequence the local-first
// store once got wrong: on a leaky bucket of 10 an hour, hits 8, 3 and 1
// are admitted, refused and admitted, as exact mode answers: a refused
// request of 3 does not refuse a request of 1 that fits. Then, 5 seconds
// and 25 syncs later, hits 2 and 1 get exact mode's answers too. (The
// stores alone, as replayDiff says why.)
func TestLocalFirstRefusedRequestLeavesRoom(t *testing.T) {
	const interval = 200 * time.Millisecond
	tenAnHour := limit.Rate{RequestsPerUnit: 10, Unit: limit.Hour}.Limit()
	log := slog.New(slog.DiscardHandler)
	for name, start := range topologies(t) {
		t.Run(name, func(t *testing.T) {
			connect := start(t)
			newStore := func(prefix string) *redis.Store {
				st, err := redis.New(redis.Options{Connect: &connect, CallerClock: true, Prefix: prefix, Logger: log})
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
			exact := newStore("exact:")
			t.Cleanup(func() { exact.Close() })
			remote := &quietRemote{Store: newStore("local:")}
			lf, err := localfirst.New(remote, localfirst.Options{Interval: interval, ManualSync: true, Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { lf.Close() })
			ctx := context.Background()
			now := diffT0
			lf.Sync(ctx, now) // its next sync on this clock
			step := func(hits int64, want string) {
				t.Helper()
				b := []limit.Bucket{{Key: "api|user=alice", Limit: tenAnHour, Hits: hits}}
				local, exactly := make([]limit.Result, 1), make([]limit.Result, 1)
				err := lf.Apply(ctx, now, b, local)
				remote.settle()
				if err != nil {
					t.Fatalf("local-first, hits %d: %v", hits, err)
				}
				if err := exact.Apply(ctx, now, b, exactly); err != nil {
					t.Fatalf("exact, hits %d: %v", hits, err)
				}
				l, e := formatResult(local[0]), formatResult(exactly[0])
				t.Logf("+%s hits %d: local-first %s, exact %s", now.Sub(diffT0), hits, l, e)
				if want != "" && overallCode(exactly[0].Admitted) != want {
					t.Fatalf("+%s hits %d: exact mode answers %s, want %s", now.Sub(diffT0), hits, e, want)
				}
				if want != "" && overallCode(local[0].Admitted) != want {
					t.Errorf("+%s hits %d: local-first answers %s, want %s", now.Sub(diffT0), hits, l, want)
				}
				if l != e {
					t.Errorf("+%s hits %d on %s: local-first %s, exact %s", now.Sub(diffT0), hits, tenAnHour, l, e)
				}
			}
			step(8, "OK")
			step(3, "OVER_LIMIT")
			step(1, "OK")
			for range 25 {
				now = now.Add(interval)
				lf.Sync(ctx, now)
				remote.settle()
			}
			// Exact mode's answers, whatever they are: 9 of 10 are held,
			// as less than a drip has leaked.
			step(2, "")
			step(1, "")
		})
	}
}

func overallCode(admitted bool) string {
	if admitted {
		return "OK"
	}
	return "OVER_LIMIT"
}

// diffT0 is where the virtual clock starts: off the whole second, so that
// windows do not start with it.
var diffT0 = time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.UTC)

// diffKey is one bucket of a sequence, with its limit and how its
// config marks it.
type diffKey struct {
	key            string
	limit          limit.Limit
	shadow, always bool
}

// diffOp is one step of a sequence, at diffT0+at: a request of hits[j] on
// keys[j], or, with hits nil, a reset of keys. keys index the sequence's.
type diffOp struct {
	at   time.Duration
	keys []int
	hits []int64
}

// diffSeq is a sequence: a local-first store syncing every interval, its
// keys and its steps.
type diffSeq struct {
	seed     uint64
	interval time.Duration
	keys     []diffKey
	ops      []diffOp
}

// newDiffSeq draws a sequence of n steps from seed: 3 to 8 keys, the
// first three of each algorithm, the first two hot; requests of 2 to 4
// buckets, a hierarchy or several limits of one node; hits from a check
// (0) to past the limit; now and then a reset; the clock standing still,
// moving within a sync interval, by less than a second, by part of a
// window, or by several.
func newDiffSeq(seed uint64, n int) diffSeq {
	rng := rand.New(rand.NewPCG(seed, 0x6c6f63616c))
	seq := diffSeq{seed: seed, interval: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, time.Second, 5 * time.Second}[rng.IntN(4)]}
	algos := []limit.Algorithm{limit.LeakyBucket, limit.SlidingWindow, limit.FixedWindow}
	rng.Shuffle(len(algos), func(i, j int) { algos[i], algos[j] = algos[j], algos[i] })
	nkeys := 3 + rng.IntN(6)
	for i := range nkeys {
		a := limit.Algorithms[rng.IntN(len(limit.Algorithms))]
		if i < len(algos) {
			a = algos[i]
		}
		seq.keys = append(seq.keys, diffKey{
			// Levels of a path: a key may extend another's, as a
			// descriptor's nested entries do.
			key:    fmt.Sprintf("api|user=u%d", i/2) + []string{"", fmt.Sprintf("|action=a%d", i)}[i%2],
			limit:  diffLimit(rng, a),
			shadow: rng.IntN(6) == 0,
			always: rng.IntN(5) == 0,
		})
	}
	var at time.Duration
	for range n {
		at = seq.avoidEdges(at + seq.step(rng))
		if rng.IntN(25) == 0 {
			seq.ops = append(seq.ops, diffOp{at: at, keys: seq.pick(rng, 1+rng.IntN(2))})
			continue
		}
		op := diffOp{at: at, keys: seq.pick(rng, min([]int{2, 2, 2, 2, 2, 3, 3, 3, 4, 4}[rng.IntN(10)], nkeys))}
		same := rng.IntN(2) == 0 // one hits_addend for the whole request
		var h int64
		for j, k := range op.keys {
			if j == 0 || !same {
				h = diffHits(rng, seq.keys[k].limit.Size)
			}
			op.hits = append(op.hits, h)
		}
		seq.ops = append(seq.ops, op)
	}
	return seq
}

// diffLimit draws a limit of algorithm a. Drips are at least 100ms and
// windows at least a second (see avoidEdges and persist).
func diffLimit(rng *rand.Rand, a limit.Algorithm) limit.Limit {
	sizes := []int64{1, 2, 3, 5, 8, 10, 13, 20, 30, 100, 300, 1000}
	size := sizes[rng.IntN(len(sizes))]
	switch a {
	case limit.SlidingWindow:
		w := []time.Duration{time.Second, 10 * time.Second, time.Minute, time.Hour}[rng.IntN(4)]
		return limit.Limit{Algorithm: a, Size: size, Window: w, Resolution: w / time.Duration([]int{1, 2, 5, 10}[rng.IntN(4)])}
	case limit.FixedWindow:
		if rng.IntN(3) == 0 {
			// A calendar day, in a zone whose midnight the steps may cross.
			zone := []string{"", "Asia/Tokyo", "America/Los_Angeles", "Asia/Kolkata"}[rng.IntN(4)]
			return limit.Limit{Algorithm: a, Size: size, Calendar: window.Day, Zone: zone}
		}
		w := []time.Duration{time.Second, 10 * time.Second, time.Minute, time.Hour, 24 * time.Hour}[rng.IntN(5)]
		return limit.Limit{Algorithm: a, Size: size, Window: w}
	}
	if rng.IntN(3) == 0 {
		// As a rate_limit translates: 10 per hour is a drip every 6m.
		n := []uint32{1, 3, 10, 60, 100, 1000}[rng.IntN(6)]
		u := []limit.Unit{limit.Minute, limit.Hour, limit.Day}[rng.IntN(3)]
		if l := (limit.Rate{RequestsPerUnit: n, Unit: u}).Limit(); l.DripRate >= 100*time.Millisecond {
			return l
		}
	}
	drip := []time.Duration{100 * time.Millisecond, 250 * time.Millisecond, time.Second, 6 * time.Second, time.Minute, 10 * time.Minute}[rng.IntN(6)]
	return limit.Limit{Size: size, DripRate: drip, DripSize: min(size, []int64{1, 1, 2, 3, 5}[rng.IntN(5)])}
}

// diffHits draws a request's hits on a limit of size: a check, a few,
// up to a fifth of the limit, up to the limit, or past it.
func diffHits(rng *rand.Rand, size int64) int64 {
	switch r := rng.IntN(100); {
	case r < 10:
		return 0
	case r < 30:
		return 1 + rng.Int64N(3)
	case r < 70:
		return 1 + rng.Int64N(max(size/5, 1))
	case r < 93:
		return 1 + rng.Int64N(max(size, 1))
	default:
		return size + 1 + rng.Int64N(size+1)
	}
}

// step draws how far the clock moves before a step.
func (s *diffSeq) step(rng *rand.Rand) time.Duration {
	period := func() time.Duration { return diffPeriod(s.keys[rng.IntN(len(s.keys))].limit) }
	switch r := rng.IntN(100); {
	case r < 35:
		return 0
	case r < 65: // within a sync interval: buckets stay hot
		return time.Duration(1+rng.Int64N(s.interval.Microseconds())) * time.Microsecond
	case r < 80:
		return time.Duration(1+rng.Int64N(int64(time.Second/time.Microsecond))) * time.Microsecond
	case r < 93:
		return time.Duration(1+rng.Int64N(period().Microseconds())) * time.Microsecond
	default:
		return time.Duration(1+rng.IntN(4))*period() + time.Duration(rng.Int64N(period().Microseconds()))*time.Microsecond
	}
}

// diffPeriod is how long a limit takes to forget a full bucket: a
// window (a calendar window's first period), or a leaky bucket's drain.
func diffPeriod(l limit.Limit) time.Duration {
	if l.IsCalendar() {
		p := l.FixedPeriod(diffT0.UnixMicro())
		return time.Duration(p.End-p.Start) * time.Microsecond
	}
	if l.Algorithm != limit.LeakyBucket {
		return l.Window
	}
	return time.Duration((l.Size+l.DripSize-1)/l.DripSize) * l.DripRate
}

// edgeMargin is how close to the end of a window whose Redis key's TTL
// is that end no step is taken.
const edgeMargin = 50 * time.Millisecond

// avoidEdges moves at to the end of a window it is within edgeMargin of:
// Redis expires keys on its own clock, and a key charged that close to
// the end of its window could expire, on Redis's clock, before the test
// persists it (persist). Only windows that are one sub-window, whose TTL
// is the time left in the window, are that close: a leaky bucket's TTL is
// at least a drip, and a sliding window's, charged in its newest
// sub-window, at least half the window.
func (s *diffSeq) avoidEdges(at time.Duration) time.Duration {
	for moved := true; moved; {
		moved = false
		for _, k := range s.keys {
			w := k.limit.Window
			if k.limit.Algorithm == limit.LeakyBucket || (k.limit.Algorithm == limit.SlidingWindow && k.limit.Resolution != w) {
				continue
			}
			if k.limit.IsCalendar() {
				us := diffT0.Add(at).UnixMicro()
				if left := time.Duration(k.limit.FixedPeriod(us).End-us) * time.Microsecond; left < edgeMargin {
					at += left
					moved = true
				}
				continue
			}
			if left := w - time.Duration(diffT0.Add(at).UnixMicro()%w.Microseconds())*time.Microsecond; left < edgeMargin {
				at += left
				moved = true
			}
		}
	}
	return at
}

// pick returns n distinct keys, the first two keys six times as likely
// as the others: hot buckets, leased, and cold ones.
func (s *diffSeq) pick(rng *rand.Rand, n int) []int {
	var keys []int
	for len(keys) < n {
		k := rng.IntN(len(s.keys) + 10)
		if k >= len(s.keys) {
			k = (k - len(s.keys)) % 2
		}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}
