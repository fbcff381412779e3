package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/memory"
)

// TestChunksAllOrNothing sends requests of more buckets than one call
// takes, each with one full bucket (in the first call, in the middle, in
// the last), through the Redis store and the memory store: a rejected
// request must charge nothing in any of its calls (each bucket read back
// as the memory store holds it, and the next request admitted with the
// same figures), but the buckets that charge always, which stay charged.
// Every result must be the memory store's.
func TestChunksAllOrNothing(t *testing.T) {
	srv := redistest.Start(t)
	single := ClientOptions{URL: srv.URL()}
	for _, o := range []Options{{Mode: ScriptMode}, {Mode: ScriptMode, Pipeline: DefaultPipeline, Batch: DefaultBatch}, {Mode: TransactionsMode}} {
		t.Run(fmt.Sprintf("Single-mode%d-batch%d", o.Mode, o.Batch), func(t *testing.T) {
			o.Connect = &single
			chunksAllOrNothing(t, o, 1)
		})
	}
	t.Run("Cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("a Cluster takes seconds to start")
		}
		cl := redistest.StartCluster(t)
		chunksAllOrNothing(t, Options{Connect: &ClientOptions{URL: cl.URL(), Cluster: true}, Pipeline: DefaultPipeline}, 2)
	})
}

func chunksAllOrNothing(t *testing.T, o Options, tags int) {
	ctx := context.Background()
	n := 3*maxCallBuckets + 50
	for _, always := range []bool{false, true} {
		for _, full := range []int{0, n / 2, n - 1} {
			o.CallerClock, o.Prefix = true, fmt.Sprintf("aon-%d-%d-%v-%d:", o.Mode, o.Batch, always, full)
			s, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			model, err := memory.New(memory.Options{SweepInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("always %v, full bucket %d of %d", always, full, n)
			buckets := hugeRequest(n, tags, "")
			for i := range buckets {
				buckets[i].Limit.Size = 5
				buckets[i].Shadow = i%11 == 3
				buckets[i].Always = always && i%5 == 1
			}
			if parts, _ := s.split(s.keys(buckets), buckets); len(parts) != tags || len(parts[0]) < 3 {
				t.Fatalf("%d runs of %d calls: the request must span several calls of each slot", len(parts), len(parts[0]))
			}
			now := time.UnixMicro(1_760_000_000_000_000)
			both := func(step string, bs []limit.Bucket) []limit.Result {
				t.Helper()
				got, want := make([]limit.Result, len(bs)), make([]limit.Result, len(bs))
				if err := s.Apply(ctx, now, bs, got); err != nil {
					t.Fatalf("%s, %s: %v", name, step, err)
				}
				if err := model.Apply(ctx, now, bs, want); err != nil {
					t.Fatal(err)
				}
				for i := range bs {
					// A window's counts as Redis keeps them: without the empty oldest.
					g, w := got[i], want[i]
					g.State, w.State = limit.State{}, limit.State{}
					if !g.Equal(w) || !sameStored(got[i].State, want[i].State) {
						t.Fatalf("%s, %s: bucket %d (%v, hits %d, always %v):\nRedis  %+v\nmemory %+v", name, step, i, bs[i].Limit, bs[i].Hits, bs[i].Always, got[i], want[i])
					}
				}
				return got
			}
			both("the first hit", buckets)
			fill := []limit.Bucket{buckets[full]}
			fill[0].Hits, fill[0].Always, fill[0].Shadow = 4, false, false
			if r := both("filling one bucket", fill); !r[0].Admitted || r[0].Remaining != 0 {
				t.Fatalf("%s: the bucket to fill: %+v", name, r[0])
			}
			now = now.Add(time.Millisecond)
			buckets[full].Shadow = false
			if r := both("the rejected request", buckets); r[full].Admitted {
				t.Fatalf("%s: the full bucket admitted its hit: %+v", name, r[full])
			}
			// Read back: each bucket decides as the memory store's, which
			// only what charges always has charged.
			got, want := make([]limit.State, n), make([]limit.State, n)
			if _, err := s.State(ctx, now, buckets, got); err != nil {
				t.Fatal(err)
			}
			if _, err := model.State(ctx, now, buckets, want); err != nil {
				t.Fatal(err)
			}
			for i, b := range buckets {
				g, w := limit.Decide(got[i], b.Limit, now, 0), limit.Decide(want[i], b.Limit, now, 0)
				if g.Remaining != w.Remaining || g.Reset != w.Reset {
					t.Fatalf("%s: bucket %d (%v, always %v) holds %+v, left %d; the memory store's %+v, left %d",
						name, i, b.Limit, b.Always, got[i], g.Remaining, want[i], w.Remaining)
				}
				if left := int64(4); !b.Always && g.Remaining != left && i != full {
					t.Fatalf("%s: bucket %d (%v) has %d left after one hit, want %d: the rejected request charged it", name, i, b.Limit, g.Remaining, left)
				}
			}
			now = now.Add(time.Millisecond)
			rest := append(buckets[:full:full], buckets[full+1:]...)
			both("the next request", rest)
			s.Close()
			model.Close()
		}
	}
}

// TestCutBoundsCalls cuts requests of light and heavy buckets over a few
// slots: every bucket goes in exactly one call, in the request's order,
// with buckets of its slot only, and no call weighs more than
// maxCallBuckets but for a call of one bucket.
func TestCutBoundsCalls(t *testing.T) {
	heavy := limit.Limit{Algorithm: limit.SlidingWindow, Size: 10, Window: time.Hour, Resolution: 3600 * time.Millisecond} // 1,000 sub-windows
	if w := callWeight(heavy); w != 1+1000/12 {
		t.Fatalf("a sliding window of 1000 sub-windows weighs %d", w)
	}
	for _, cluster := range []bool{false, true} {
		for _, n := range []int{1, maxCallBuckets, maxCallBuckets + 1, 5000} {
			buckets := hugeRequest(n, 3, "")
			for i := range buckets {
				if i%97 == 5 {
					buckets[i].Limit = heavy
				}
			}
			s := &Store{keyPrefix: "cut:", servers: []*server{{cluster: cluster}}}
			keys := s.keys(buckets)
			runs, _ := s.split(keys, buckets)
			seen := make([]bool, n)
			for _, run := range runs {
				for _, p := range run {
					w, last := 0, -1
					for j, i := range p.index {
						if seen[i] || i <= last || p.keys[j] != keys[i] || (cluster && slot(keys[i]) != slot(p.keys[0])) {
							t.Fatalf("cluster %v, %d buckets: bucket %d twice, out of order or in another slot's call", cluster, n, i)
						}
						seen[i], last = true, i
						w += callWeight(buckets[i].Limit)
					}
					if w > maxCallBuckets && len(p.index) > 1 {
						t.Fatalf("cluster %v, %d buckets: a call weighs %d", cluster, n, w)
					}
				}
			}
			for i, ok := range seen {
				if !ok {
					t.Fatalf("cluster %v, %d buckets: bucket %d in no call", cluster, n, i)
				}
			}
			if want := map[bool]int{false: 1, true: min(n, 3)}[cluster]; len(runs) != want {
				t.Fatalf("cluster %v, %d buckets: %d runs, want one per slot (%d)", cluster, n, len(runs), want)
			}
		}
	}
}

// TestBatchFillBound: a batch's call takes requests in order while they
// fit in maxCallBuckets, and at least one.
func TestBatchFillBound(t *testing.T) {
	q := func(weights ...int32) []*queued {
		var out []*queued
		for _, w := range weights {
			out = append(out, &queued{weight: w})
		}
		return out
	}
	for _, tc := range []struct {
		q    []*queued
		most int
		want int
	}{
		{q(2, 2, 2), 32, 3},
		{q(2, 2, 2), 2, 2},
		{q(100, 100, 100), 32, 2},
		{q(maxCallBuckets, 1), 32, 1},
		{q(1, maxCallBuckets), 32, 1},
		{q(maxCallBuckets-1, 1, 1), 32, 2},
	} {
		if got := fill(tc.q, tc.most); got != tc.want {
			t.Errorf("fill of %d requests, at most %d: %d, want %d", len(tc.q), tc.most, got, tc.want)
		}
	}
}

// TestChunksFailureUndoes: a request of many calls whose deadline passes
// midway fails, the calls it made are undone and the rest are not sent,
// so at most the call that ran out of time (whose reply was lost, and
// which Redis may have run) is left charged.
func TestChunksFailureUndoes(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Options{Connect: &ClientOptions{URL: srv.URL()}, Prefix: "fail:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	buckets := hugeRequest(20_000, 1, "")
	for i := range buckets {
		buckets[i].Limit = limit.Limit{Size: 10, DripRate: time.Hour, DripSize: 1}
	}
	// The script loaded, and the connections open.
	if err := s.Apply(context.Background(), time.Now(), hugeRequest(600, 1, "|warm"), make([]limit.Result, 600)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err = s.Apply(ctx, time.Now(), buckets, make([]limit.Result, len(buckets)))
	if err == nil {
		t.Skip("the request was decided before its deadline: nothing to show")
	}
	time.Sleep(200 * time.Millisecond) // a call that ran out of time has run, if it was to
	states := make([]limit.State, len(buckets))
	if _, err := s.State(context.Background(), time.Now(), buckets, states); err != nil {
		t.Fatal(err)
	}
	charged := 0
	for _, st := range states {
		if st.Counter > 0 {
			charged++
		}
	}
	t.Logf("a request of %d buckets failed (%v): %d left charged", len(buckets), err, charged)
	if charged > maxCallBuckets {
		t.Fatalf("%d buckets left charged by a failed request: more than the one call whose reply was lost", charged)
	}
}
