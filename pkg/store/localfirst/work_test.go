package localfirst

import (
	"context"
	"fmt"
	"math/rand"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limit"
	"github.com/envoy-rls/envoy-rls/pkg/store/redis"
)

// countingRemote is the in-process remote, counting the buckets each kind
// of call sends: what Redis works on.
type countingRemote struct {
	*remote
	decided, leased, calls, leaseCalls atomic.Int64
}

func (c *countingRemote) Apply(ctx context.Context, now time.Time, buckets []limit.Bucket, results []limit.Result) error {
	c.decided.Add(int64(len(buckets)))
	c.calls.Add(1)
	return c.remote.Apply(ctx, now, buckets, results)
}

func (c *countingRemote) LeaseAll(ctx context.Context, now time.Time, leases []redis.Lease) (int64, error) {
	c.leased.Add(int64(len(leases)))
	c.leaseCalls.Add(1)
	return c.remote.LeaseAll(ctx, now, leases)
}

// workShape is a traffic shape of scripts/bench.sh: keys picked in turn
// or by Zipf, at a rate, two buckets a request (user, then user and
// action) of a limit so large that every request is admitted.
type workShape struct {
	name string
	keys int
	zipf float64 // 0: in turn
}

// work is what Redis did per request of a run: buckets decided or
// leased, requests that waited for a call, and requests on a key the run
// had not seen before (which local-first decides on Redis).
type work struct{ buckets, waits, fresh float64 }

// redisWork runs shape at rate requests a second of a virtual clock for
// warm, then for run, on a store syncing every interval, and returns what
// Redis did per request of the run.
func redisWork(tb testing.TB, shape workShape, rate int, interval, warm, run time.Duration) work {
	r := &countingRemote{remote: newRemote()}
	r.callerClock = true
	s, err := New(r, Options{Interval: interval, ManualSync: true})
	if err != nil {
		tb.Fatal(err)
	}
	defer s.Close()
	big := limit.Limit{Size: 1_000_000_000, DripRate: time.Minute, DripSize: 1}
	var z *rand.Zipf
	if shape.zipf > 0 {
		z = rand.NewZipf(rand.New(rand.NewSource(1)), shape.zipf, 1, uint64(shape.keys-1))
	}
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	step := time.Second / time.Duration(rate)
	next := t0.Add(interval)
	ctx := context.Background()
	res := make([]limit.Result, 2)
	seen := map[int]bool{}
	var before, requests, waits, fresh int64
	warmN, total := int(warm/step), int((warm+run)/step)
	for i := range total {
		now := t0.Add(time.Duration(i) * step)
		for !now.Before(next) {
			s.Sync(ctx, next)
			next = next.Add(interval)
		}
		if i == warmN {
			before = r.decided.Load() + r.leased.Load()
			requests, waits, fresh = 0, 0, 0
		}
		k := i % shape.keys
		if z != nil {
			k = int(z.Uint64())
		}
		if !seen[k] {
			seen[k] = true
			fresh++
		}
		user := fmt.Sprintf("api|user=u%d", k)
		bs := []limit.Bucket{{Key: user, Limit: big, Hits: 1}, {Key: fmt.Sprintf("%s|action=a%d", user, k), Limit: big, Hits: 1}}
		c0 := r.calls.Load() + r.leaseCalls.Load()
		if err := s.Apply(ctx, now, bs, res); err != nil {
			tb.Fatal(err)
		}
		if !res[0].Admitted || !res[1].Admitted {
			tb.Fatalf("request %d refused", i)
		}
		if r.calls.Load()+r.leaseCalls.Load() != c0 {
			waits++
		}
		requests++
	}
	n := float64(requests)
	return work{buckets: float64(r.decided.Load()+r.leased.Load()-before) / n, waits: float64(waits) / n, fresh: float64(fresh) / n}
}

// BenchmarkRedisWork reports, on a virtual clock, what Redis works on per
// request in each traffic shape of scripts/bench.sh at 15,000 requests a
// second: buckets decided or leased (exact mode: 2) and the share of
// requests that waited for a call (exact mode: all).
func BenchmarkRedisWork(b *testing.B) {
	shapes := []workShape{{"turn:10000", 10000, 0}, {"turn:1000000", 1000000, 0}, {"zipf1.1:1000000", 1000000, 1.1}}
	for _, sh := range shapes {
		for _, iv := range []time.Duration{100 * time.Millisecond, time.Second} {
			b.Run(fmt.Sprintf("%s/%v", sh.name, iv), func(b *testing.B) {
				for range b.N {
					w := redisWork(b, sh, 15000, iv, 60*time.Second, 60*time.Second)
					b.ReportMetric(w.buckets, "buckets/req")
					b.ReportMetric(w.waits, "waits/req")
					b.ReportMetric(w.fresh, "fresh/req")
				}
			})
		}
	}
}

// TestRedisWorkPerShape holds the mode to what it saves on each traffic
// shape, on a virtual clock at 2,000 requests a second: keys in turn that
// come back every half second cost Redis almost nothing at a 100ms
// interval as at 1s (each was decided on Redis every time at 100ms, when
// sightings lasted two intervals), and keys each seen once cost what
// exact mode costs, never more.
func TestRedisWorkPerShape(t *testing.T) {
	for _, c := range []struct {
		shape    workShape
		interval time.Duration
		atMost   float64 // buckets Redis works on per request
		atLeast  float64
	}{
		{workShape{"turn:1000", 1000, 0}, 100 * time.Millisecond, 0.05, 0},
		{workShape{"turn:1000", 1000, 0}, time.Second, 0.05, 0},
		{workShape{"turn:100000", 100000, 0}, 100 * time.Millisecond, 2, 2},
		{workShape{"turn:100000", 100000, 0}, time.Second, 2, 2},
	} {
		w := redisWork(t, c.shape, 2000, c.interval, 10*time.Second, 20*time.Second)
		t.Logf("%s at %v: %.3f buckets per request", c.shape.name, c.interval, w.buckets)
		if w.buckets > c.atMost || w.buckets < c.atLeast {
			t.Errorf("%s at %v: Redis works on %.3f buckets per request, want %g to %g", c.shape.name, c.interval, w.buckets, c.atLeast, c.atMost)
		}
	}
}
